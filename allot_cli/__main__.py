"""`python -m allot_cli`: the same as the `allot` command."""

import sys

from allot_cli.main import main

sys.exit(main())
