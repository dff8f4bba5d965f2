"""The fault and load suite (docs/faults.md): `python -m tests.chaos.run` (`make chaos`), and
its short version in `make test` (test_chaos.py)."""
