"""The exit codes scripts may rely on (docs/cli.md) and the error that carries one."""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class Exit(IntEnum):
    """What `allot` exits with."""

    OK = 0
    REFUSED = 1  # the API refused the request (validation, a rule, a conflict), or bad input
    USAGE = 2  # the command line itself is wrong (argparse's own code for usage errors)
    NOT_FOUND = 3  # the workload, request or queue named does not exist (or is not visible)
    AUTH = 4  # not signed in, a bad or expired token, wrong password, or not allowed
    UNREACHABLE = 5  # no answer from the server, or it says it is unavailable (502-504)


class CliError(Exception):
    """An error the command line reports on stderr as `allot: error: MESSAGE`, then exits
    with `code`; `status` and `body` are the API's answer when it came from one."""

    def __init__(self, code: Exit, message: str, *, status: int | None = None,
                 body: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.body = body
