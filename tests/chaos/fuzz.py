"""schemathesis over the OpenAPI schema (`/api/schema/`, drf-spectacular) against the running
gunicorn, once per role (an admin's token, a researcher's): cases generated from the schema,
valid and invalid, for every operation, within a time budget.

The 500s are counted from gunicorn's access log, over the window of each role's run: every
answer the server gave, whatever schemathesis checked. schemathesis' own output (with a curl
line reproducing each failure) is kept in the logs folder.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FuzzResult:
    role: str
    requests: int = 0
    server_errors: Counter[str] = field(default_factory=Counter)  # "METHOD /path status"
    exit_code: int = 0
    output: Path | None = None

    @property
    def count_5xx(self) -> int:
        return sum(self.server_errors.values())


def access_lines(log: Path, start: int) -> tuple[list[str], int]:
    """The access log's lines from byte `start` on, and the offset after them."""
    with log.open("rb") as f:
        f.seek(start)
        data = f.read()
    return data.decode(errors="replace").splitlines(), start + len(data)


def run_schemathesis(*, port: int, token: str, role: str, max_time: int, max_examples: int,
                     phases: str, access_log: Path, logs: Path, seed: int) -> FuzzResult:
    """One schemathesis run with `token`; the 5xx answers gunicorn logged meanwhile."""
    result = FuzzResult(role=role, output=logs / f"schemathesis-{role}.log")
    _, offset = access_lines(access_log, 0)
    cmd = [str(Path(sys.executable).parent / "schemathesis"), "run",
           f"http://127.0.0.1:{port}/api/schema/?format=json",
           "-H", f"Authorization: Token {token}",
           "--checks", "not_a_server_error", "--phases", phases,
           "--max-examples", str(max_examples), "--max-time", str(max_time),
           "--seed", str(seed), "--workers", "2", "--request-timeout", "30",
           "--generation-database", "none", "--no-color", "--wait-for-schema", "30",
           # It would revoke the very token the run uses: every later case would be a 401.
           "--exclude-operation-id", "v1_auth_token_destroy"]
    with result.output.open("wb") as out:
        done = subprocess.run(cmd, cwd=logs, stdout=out, stderr=subprocess.STDOUT,
                              timeout=max_time + 120)
    result.exit_code = done.returncode
    lines, _ = access_lines(access_log, offset)
    for line in lines:
        status, _, rest = line.partition(" ")
        if not status.isdigit():
            continue
        result.requests += 1
        if int(status) >= 500:
            result.server_errors[f"{rest} {status}"] += 1
    return result
