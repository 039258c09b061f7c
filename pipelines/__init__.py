"""Job assembly from config and the `shardmill` command line."""
