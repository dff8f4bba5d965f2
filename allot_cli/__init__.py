"""`allot`: the command line of the Allot portal, a client of its REST API (docs/cli.md).

It speaks HTTP to `/api/v1/` only: no module here imports Django or any app of the project
(import-linter contract `cli-api-only`), so it installs alone (`pip install .` pulls requests
and PyYAML) on a laptop or a CI runner.
"""

__version__ = "0.1.0"
