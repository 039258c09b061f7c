#!/usr/bin/env bash
# Submits `shardmill run` to Google Cloud Dataflow, or to a Flink cluster.
#
#   bash run_dataflow.sh --config job.textproto --output gs://BUCKET/out \
#       --project PROJECT --region REGION --temp-location gs://BUCKET/tmp [--num-workers N]
#       [--machine-type TYPE] [--input PATTERN ...] [--seed N] [--overwrite] [--dry-run] [-- BEAM_ARGS...]
#   bash run_dataflow.sh --runner flink --flink-master HOST:PORT --config job.textproto --output DIR [--dry-run]
#
# The job's code travels to the workers as a wheel of this repository (with the
# native extension), built into dist/ and passed as --extra_package; workers
# must run the same Python version as this machine. Dataflow needs
# `pip install 'apache-beam[gcp]==2.77.0'` and credentials on this machine.
# On Flink the SDK workers run as PROCESS environments with this machine's
# interpreter path, so the task managers need the same virtualenv at the same
# path; to use a worker-pool sidecar or a container instead, pass
# --environment_type/--environment_config after `--` (later options win).
# --dry-run checks the arguments, builds and serializes the pipeline graph
# locally and prints the exact submission command; it needs no credentials.
set -euo pipefail
cd "$(dirname "$0")"
PY="${SHARDMILL_PYTHON:-.venv/bin/python}"

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
fail() { echo "run_dataflow.sh: error: $*" >&2; exit 2; }

runner=dataflow config="" output="" project="" region="" temp="" flink_master="" workers="" machine=""
dry_run=0 job_args=() beam_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runner) runner="${2:?}"; shift 2 ;;
    --config) config="${2:?}"; shift 2 ;;
    --output) output="${2:?}"; shift 2 ;;
    --input) job_args+=(--input "${2:?}"); shift 2 ;;
    --seed) job_args+=(--seed "${2:?}"); shift 2 ;;
    --overwrite) job_args+=(--overwrite); shift ;;
    --project) project="${2:?}"; shift 2 ;;
    --region) region="${2:?}"; shift 2 ;;
    --temp-location) temp="${2:?}"; shift 2 ;;
    --num-workers) workers="${2:?}"; shift 2 ;;
    --machine-type) machine="${2:?}"; shift 2 ;;
    --flink-master) flink_master="${2:?}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage ;;
    --) shift; beam_args+=("$@"); break ;;
    *) fail "unknown argument $1 (see --help)" ;;
  esac
done

[ -n "$config" ] || fail "--config is required"
[ -f "$config" ] || fail "config file $config does not exist"
[ -n "$output" ] || fail "--output is required"
[ -x "$PY" ] || fail "$PY not found: run 'bash dev.sh test' (or set SHARDMILL_PYTHON)"
version=$("$PY" -c 'import importlib.metadata as m; print(m.version("shardmill"))')
pyver=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheel="dist/shardmill-${version}-${pyver}-${pyver}-linux_x86_64.whl"

case "$runner" in
  dataflow)
    [ -n "$project" ] || fail "--project is required for Dataflow"
    [ -n "$region" ] || fail "--region is required for Dataflow"
    [[ "$temp" == gs://* ]] || fail "--temp-location must be a gs:// path for Dataflow"
    [[ "$output" == gs://* ]] || fail "--output must be a gs:// path for Dataflow (workers can't see local disks)"
    beam_args=(--runner=DataflowRunner "--project=$project" "--region=$region" "--temp_location=$temp"
               "--extra_package=$wheel" ${workers:+"--num_workers=$workers"} ${machine:+"--machine_type=$machine"}
               "${beam_args[@]}")
    ;;
  flink)
    [[ "$flink_master" =~ ^[^:]+:[0-9]+$ ]] || fail "--flink-master HOST:PORT is required for Flink"
    beam_args=(--runner=FlinkRunner "--flink_master=$flink_master" --environment_type=PROCESS
               "--environment_config={\"command\": \"$(cd "$(dirname "$PY")" && pwd)/python -m apache_beam.runners.worker.sdk_worker_main\"}"
               ${workers:+"--parallelism=$workers"} "${beam_args[@]}")
    ;;
  *) fail "--runner must be dataflow or flink, not $runner" ;;
esac

build=("$PY" -m pip wheel --no-deps --quiet -w dist .)
submit=("$PY" -m shardmill.pipelines.cli run --config "$config" --output "$output" "${job_args[@]}" "${beam_args[@]}")
if [ "$dry_run" = 1 ]; then
  echo "would build:  ${build[*]}"
  echo "would submit: ${submit[*]}"
  "$PY" -m shardmill.pipelines.cli run --dry-run --config "$config" --output "$output" "${job_args[@]}" "${beam_args[@]}"
  exit 0
fi
"${build[@]}"
exec "${submit[@]}"
