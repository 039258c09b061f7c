#!/usr/bin/env bash
# Submits the job to Google Cloud Dataflow or a Flink cluster: a thin wrapper of `shardmill submit`
# that builds the workers' wheel from this repository (the same arguments; --help lists them).
#
#   bash run_dataflow.sh --config job.textproto --output gs://BUCKET/out \
#       --project PROJECT --region REGION --temp-location gs://BUCKET/tmp [--num-workers N] [--dry-run]
#   bash run_dataflow.sh --runner flink --flink-master HOST:PORT --config job.textproto --output DIR \
#       [--environment external --worker-pool HOST:PORT | --environment docker --sdk-container IMAGE]
set -euo pipefail
REPO="$(cd "$(dirname "$0")" && pwd)"
PY="${SHARDMILL_PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PY" ] || { echo "run_dataflow.sh: error: $PY not found: run 'bash dev.sh demo' (or set SHARDMILL_PYTHON)" >&2; exit 2; }
exec "$PY" -m shardmill.pipelines.cli submit --checkout "$REPO" "$@"
