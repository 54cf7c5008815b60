"""Helpers the benchmark scripts share (a package: `sys.path` holds benchmarks/, then `from common import procs`)."""
