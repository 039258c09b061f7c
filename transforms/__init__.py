"""The Beam job: one folder per job kind and the blocks every kind shares.

Layers (pyproject.toml's [tool.importlinter]; a layer imports only those below it):
  lc0/ | events/ | tokens/      the job kinds, independent of each other; each has the same files for the same
                                roles: kind.py (the JobKind: config checks, hooks), plan.py (the launcher's plan),
                                graph.py (the job's PTransforms), shards.py (the ShardFormat), report.py (summary,
                                charts), and modules named after the stages they serve
  common/ : output/ : job.py    shared blocks (common: I/O, discovery, hashing, spill, sampling helpers; output:
                                the output's lifecycle; job.py: the JobKind contract)
Below them: the reader (shardmill.native_ext) and shardmill.core; above them: the commands (shardmill.pipelines).
"""
