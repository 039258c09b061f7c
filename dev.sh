#!/usr/bin/env bash
# The two set-up commands of the README:
#   bash dev.sh demo   create .venv, install shardmill, run the job on the built-in dataset
#   bash dev.sh test   create .venv, install shardmill with test extras, run the whole test suite
# Both work on a fresh clone with only Python (>= 3.10), pip, a C++ compiler and CMake.
set -euo pipefail
cd "$(dirname "$0")"
VENV="${SHARDMILL_VENV:-.venv}"
PY="$VENV/bin/python"

install() {
  [ -x "$PY" ] || python3 -m venv "$VENV"
  echo "installing shardmill into $VENV (builds the native extension; about a minute)..." >&2
  "$PY" -m pip install --quiet --disable-pip-version-check ".[test]"
}

case "${1:-}" in
  demo)
    install
    if [ ! -d data/default ]; then
      "$PY" -m tests.datagen.lc0 data/default
    fi
    "$VENV/bin/shardmill" run --config pipelines/configs/demo.textproto --overwrite
    "$VENV/bin/shardmill" inspect out/demo --plot out/demo-charts.png
    ;;
  test)
    install
    # Tests import the installed shardmill (the repository has no shardmill/ folder).
    "$PY" -m pytest -q -p no:cacheprovider tests "${@:2}"
    ;;
  *)
    echo "usage: bash dev.sh demo|test [pytest args]" >&2
    exit 2
    ;;
esac
