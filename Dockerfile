# The workers' image: Dataflow custom container, Flink DOCKER environment or Flink worker-pool sidecar.
#
#   docker build -t REGISTRY/shardmill-worker:0.2.0 .
#   shardmill submit ... --sdk-container REGISTRY/shardmill-worker:0.2.0           (Dataflow)
#   docker run -p 50000:50000 REGISTRY/shardmill-worker:0.2.0 --worker_pool         (Flink sidecar, one per
#   shardmill submit --runner flink --environment external --worker-pool localhost:50000 ...   task manager)
#
# Beam's SDK image for the pinned Beam and the Python the job is submitted with (pickled code must load
# in the same Python); its entrypoint (/opt/apache/beam/boot) starts the SDK harness, or a worker pool with
# --worker_pool. The install is CI's: a compiler, then pip install of this checkout, which builds the
# native extension against the pinned pyarrow.
FROM apache/beam_python3.11_sdk:2.77.0
RUN apt-get update && apt-get install -y --no-install-recommends g++ cmake libdeflate-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/shardmill
COPY . .
RUN pip install --no-cache-dir '.[job]' && rm -rf build
