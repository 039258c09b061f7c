"""What both the Beam job and the reader need, below both: the errors they share, the output contract and the
job's native kernels. Imports nothing else of shardmill."""
