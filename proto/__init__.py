"""The job configuration schema; shardmill_config_pb2 is generated from shardmill_config.proto at build time."""
