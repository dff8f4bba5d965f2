"""The commands of `allot`, one module per area; each `run_*` returns the exit code."""
