#!/usr/bin/env bash
# The two set-up commands of the README:
#   bash dev.sh demo   create .venv, install shardmill with the job's extras, run the job on the built-in dataset
#   bash dev.sh test   create .venv, install shardmill with the job's and the tests' extras, run the native unit
#                      tests and the test suite
# Both work on a fresh clone with only Python (>= 3.10), pip, a C++ compiler and CMake.
# And for the native code:
#   bash dev.sh asan   the extension and its C++ unit tests under AddressSanitizer (.venv-asan), then the
#                      reader's, the lc0 tensors' and the job kernels' Python tests against that extension (not the torch and
#                      Grain adapters': those frameworks are not built for a preloaded ASan runtime)
set -euo pipefail
cd "$(dirname "$0")"
VENV="${SHARDMILL_VENV:-.venv}"
PY="$VENV/bin/python"

install() {  # $1: the extras, then extra pip arguments (of the build). Builds a wheel of this checkout into
  # build/wheels/<venv>/ (WHEEL), then installs it with the extras.
  local extras="$1"; shift
  need_debian_package libdeflate.h libdeflate-dev  # the lc0 chunks' inflater, linked by the extension
  [ -x "$PY" ] || python3 -m venv "$VENV"
  echo "installing shardmill[$extras] into $VENV (builds the native extension; about a minute)..." >&2
  local wheels="build/wheels/$(basename "$VENV")"
  rm -rf "$wheels" && mkdir -p "$wheels"
  "$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$wheels" . "$@"
  WHEEL="$(ls "$wheels"/shardmill-*.whl)"
  "$PY" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"
  "$PY" -m pip install --quiet --disable-pip-version-check "$WHEEL[$extras]"
}

need_debian_package() {  # $1: a header the package installs, $2: the package (a fresh machine has apt as root)
  [ -f "/usr/include/$1" ] || [ -f "/usr/local/include/$1" ] && return 0
  echo "installing $2..." >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  mkdir -p build
  { { [ -n "${APT_UPDATED:-}" ] || $sudo apt-get update -qq; } && APT_UPDATED=1 \
      && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2"; } \
    > build/apt.log 2>&1 \
    || { cat build/apt.log >&2; echo "could not install $2: install it, then rerun" >&2; return 1; }
}

native_unit_tests() {  # $1: build directory, then extra CMake definitions. Builds the C++ unit tests (one
  # *_test.cc beside each part) and the Python tests' hooks (_native_testing) there, then runs the unit tests.
  local build="$1"; shift
  need_debian_package gtest/gtest.h libgtest-dev  # GoogleTest, the C++ unit tests' framework
  cmake -S native_ext/tests -B "$build" -DPython_EXECUTABLE="$PWD/$PY" "$@" > "$build.log" 2>&1 \
    || { cat "$build.log" >&2; return 1; }
  cmake --build "$build" -j 2 >> "$build.log" 2>&1 || { tail -50 "$build.log" >&2; return 1; }
  "$build/native_unit_tests" --gtest_brief=1
}

case "${1:-}" in
  demo)
    install job,plot
    if [ ! -d data/default ]; then
      "$PY" -m tests.datagen.lc0 data/default
    fi
    "$VENV/bin/shardmill" run --config pipelines/configs/demo.textproto --overwrite
    "$VENV/bin/shardmill" inspect out/demo --plot out/demo-charts.png
    ;;
  test)
    install job,plot,test
    mkdir -p build
    native_unit_tests build/native-tests
    # Tests import the installed shardmill (the repository has no shardmill/ folder); the install test
    # takes the wheel just built instead of compiling its own.
    # --all: the slow tests too (jobs, subprocesses); a bare `pytest` is the fast loop. Two pytest workers
    # (SHARDMILL_TEST_WORKERS): most tests wait on subprocesses or I/O, so two cores run the suite in ~60%.
    SHARDMILL_BUILT_WHEEL="$PWD/$WHEEL" "$PY" -m pytest -q -p no:cacheprovider -n "${SHARDMILL_TEST_WORKERS:-2}" \
      tests --all "${@:2}"
    ;;
  asan)
    VENV=.venv-asan PY=.venv-asan/bin/python
    # Only what these tests need: the job, pytest (with xdist) and pybind11 for the hooks (not the test extras' torch,
    # Grain, Dask, ...).
    install job --config-settings=cmake.define.SHARDMILL_SANITIZE=address \
      --config-settings=build-dir=build/asan-{wheel_tag}
    "$PY" -m pip install --quiet --disable-pip-version-check "pytest>=8" "pytest-xdist>=3" "pybind11>=2.13"
    mkdir -p build
    native_unit_tests build/native-tests-asan -DSHARDMILL_SANITIZE=address
    # Python is not instrumented: preload the runtime (and libstdc++, so ASan's interceptor of C++
    # throws finds the real one); leaks of the interpreter itself are not ours.
    LD_PRELOAD="$(g++ -print-file-name=libasan.so):$(g++ -print-file-name=libstdc++.so)" \
      ASAN_OPTIONS=detect_leaks=0 SHARDMILL_NATIVE_TESTS_DIR=build/native-tests-asan \
      "$PY" -m pytest -q -p no:cacheprovider -n "${SHARDMILL_TEST_WORKERS:-2}" tests/native_ext/test_reader.py \
      tests/native_ext/test_dataset.py \
      tests/native_ext/test_lc0_tensors.py tests/core/test_kernels.py --all -k "not torch_adapter and not grain_adapter" "${@:2}"
    ;;
  *)
    echo "usage: bash dev.sh demo|test|asan [pytest args]" >&2
    exit 2
    ;;
esac
