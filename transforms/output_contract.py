"""Names and versions of the output directory contract, shared by the job and the reader.

Deliberately import-free: the native reader imports it without pulling in Beam.
"""

MANIFEST_NAME = "manifest.json"
ERRORS_NAME = "errors.jsonl"
FORMAT_VERSION = 1  # manifest format; bump on any incompatible change
