"""`allot policies test DIR`: a policy repository's test cases, run by the server
(POST /api/v1/policy-tests) as `manage.py policies_test DIR` runs them there."""

from __future__ import annotations

import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from allot_cli.context import Context
from allot_cli.errors import CliError, Exit
from allot_cli.output import emit


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def read_files(path: Path) -> list[dict[str, Any]]:
    """Every *.yaml / *.yml file under `path` (sorted, recursive), or `path` itself, parsed;
    an unreadable file is a usage error naming it (exit 2, as `policies_test`)."""
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml"))
    else:
        raise CliError(Exit.USAGE, f"{path}: no such file or directory")
    if not files:
        raise CliError(Exit.USAGE, f"{path}: no .yaml or .yml policy files in it")
    out = []
    for f in files:
        try:
            doc = yaml.safe_load(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise CliError(Exit.USAGE, f"{f}: {exc}") from exc
        out.append({"path": str(f), "document": _plain(doc)})
    return out


def run_policies_test(ctx: Context) -> int:
    """Send the files, print each case's outcome; exit 1 when one fails."""
    files = read_files(Path(ctx.args.path))
    report = ctx.api().post("policy-tests", {"files": files})

    def render() -> str:
        lines = []
        for r in report["results"]:
            mark = "ok  " if r["passed"] else "FAIL"
            lines.append(f"{mark} {r['policy']}: {r['case']}: {r['detail']}")
        lines.append(f"{report['passed']} passed, {report['failed']} failed "
                     f"({report['policies']} policies in {report['files']} files)")
        return "\n".join(lines)

    emit(report, ctx.output, render)
    if report["failed"]:
        print(f"allot: {report['failed']} policy test case(s) failed", file=sys.stderr)
        return Exit.REFUSED
    return Exit.OK
