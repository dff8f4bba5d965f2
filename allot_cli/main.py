"""`allot`: the command line of the Allot portal (docs/cli.md). Parses the command line, runs
one command, and exits with the codes of `errors.Exit`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from allot_cli import __version__, completion
from allot_cli.commands import auth, billing, capacity, fleet, policies, workloads
from allot_cli.context import Context
from allot_cli.errors import CliError, Exit
from allot_cli.manifest import parse_duration, parse_label
from allot_cli.output import FORMATS

EPILOG = """exit codes: 0 ok, 1 refused by the API or invalid input (the message says which
field), 2 usage error, 3 not found, 4 not signed in / bad token / wrong password / not
allowed, 5 server unreachable or unavailable.
environment: ALLOT_SERVER, ALLOT_TOKEN, ALLOT_CONFIG (docs/cli.md)."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} < 1: must be at least 1")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} < 0: must be at least 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: must be more than 0 seconds")
    return value


def _duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _label(text: str) -> tuple[str, str]:
    try:
        return parse_label(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common(*, top: bool) -> argparse.ArgumentParser:
    # The options every command takes, before or after its name (`allot -o json list` and
    # `allot list -o json`): the top level holds the defaults, commands only what is given.
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--server", metavar="URL", help="the portal, e.g. https://allot.example.org "
                   "(default: ALLOT_SERVER, else the one `allot login` saved)",
                   default=None if top else argparse.SUPPRESS)
    p.add_argument("-o", "--output", choices=FORMATS, help="table (default), json or yaml",
                   default="table" if top else argparse.SUPPRESS)
    p.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                   help="give up on an answer after this long (default 30)",
                   default=30.0 if top else argparse.SUPPRESS)
    return p


def _files(action: argparse.Action) -> argparse.Action:
    setattr(action, completion.FILES, True)
    return action


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    common = _common(top=False)
    parser = argparse.ArgumentParser(
        prog="allot", parents=[_common(top=True)], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Request GPUs, follow workloads, read queues, usage and capacity requests "
                    "on an Allot portal, through its REST API.")
    parser.add_argument("--version", action="version", version=f"allot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, run: Callable[[Context], int], help_: str,
                into: argparse._SubParsersAction = sub) -> argparse.ArgumentParser:
        p = into.add_parser(name, parents=[common], help=help_, description=help_)
        p.set_defaults(run=run)
        return p

    p = command("login", auth.run_login, "get an API token with your username and password")
    p.add_argument("-u", "--username", help="default: asked")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from standard input (for scripts)")
    p.add_argument("--token-stdin", action="store_true",
                   help="save a token made in the portal instead (single sign-on users, "
                   "who have no password): read from standard input, checked with the server")
    p.add_argument("--scope", choices=("write", "read"), default="write",
                   help="read: GET only (default write)")
    p.add_argument("--expires-in-days", type=_positive, metavar="DAYS",
                   help="the token's lifetime (default: the server's, 90 days)")
    command("logout", auth.run_logout, "revoke the saved token and forget it")

    p = command("submit", workloads.run_submit,
                "submit a workload: a manifest file (YAML or JSON), or flags")
    _files(p.add_argument("manifest", nargs="?", metavar="FILE",
                          help="the fields of POST /api/v1/workloads; - reads standard input"))
    p.add_argument("--name", help="a DNS label (default: job-YYYYMMDD-HHMMSS)")
    p.add_argument("--queue", help="a leaf queue's path, e.g. rd/vision")
    p.add_argument("--gpus", type=_count, help="GPUs per pod")
    p.add_argument("--pods", type=_positive, help="pods in the gang (default 1)")
    p.add_argument("--flavor", action="append", metavar="FLAVOR",
                   help="acceptable GPU model, in order of preference (repeat, or a,b)")
    p.add_argument("--cpu", type=float, help="CPU cores per pod")
    p.add_argument("--memory", type=float, metavar="GIB", help="memory per pod, GiB")
    p.add_argument("--image", help="container image")
    p.add_argument("--command", help="the command line, split as a shell would")
    p.add_argument("--priority", metavar="CLASS", help="priority class (default training)")
    p.add_argument("--duration", type=_duration, metavar="TIME",
                   help="expected run time: 3600, 45m, 2h, 1h30m, 2d (for the ETA)")
    p.add_argument("--label", type=_label, action="append", metavar="KEY=VALUE",
                   help="a label (repeat)")

    p = command("list", workloads.run_list, "list workloads, newest first")
    setattr(p.add_argument("--state", action="append", metavar="STATE",
                           help=f"one of {', '.join(workloads.STATES)} (repeat, or a,b)"),
            completion.WORDS, workloads.STATES)
    p.add_argument("--queue", metavar="PATH", help="this queue and the queues below it")
    p.add_argument("--name", help="names containing this")
    p.add_argument("--mine", action="store_true", help="only workloads you submitted")
    p.add_argument("--limit", type=_positive, default=workloads.DEFAULT_LIMIT,
                   help=f"at most this many (default {workloads.DEFAULT_LIMIT})")
    p.add_argument("--all", action="store_true", help="every one, page after page")

    for name, run, text in (
            ("status", workloads.run_status, "a workload: state, request, admission, events"),
            ("why", workloads.run_why, "why a workload waits: its reasons, place in the queue "
                                       "and estimated start"),
            ("cancel", workloads.run_cancel, "cancel a workload")):
        command(name, run, text).add_argument("id", type=_positive, metavar="ID")

    p = command("extend", workloads.run_extend,
                "extend a session's time limit, while the quota allows")
    p.add_argument("id", type=_positive, metavar="ID")
    p.add_argument("--hours", type=float, default=1.0,
                   help="hours to add (default 1; at most 168)")

    p = command("queues", fleet.run_queues, "the queue tree with quota and usage")
    p.add_argument("path", nargs="?", metavar="PATH", help="one queue and its subtree")
    p.add_argument("--resource", choices=("gpu", "cpu", "memory"), default="gpu",
                   help="which resource the table shows (default gpu)")

    p = command("top", fleet.run_top, "a live view of the fleet, the queues and the workloads")
    p.add_argument("--interval", type=_seconds, default=5.0, metavar="SECONDS",
                   help="refresh every this many seconds (default 5)")
    p.add_argument("--once", action="store_true", help="print one frame and exit")

    p = command("usage", billing.run_usage, "GPU-hours and cost (default: this month)")
    p.add_argument("--group-by", choices=("team", "queue", "flavor"), default="team")
    p.add_argument("--from", dest="since", metavar="DATE",
                   help="YYYY-MM-DD or an ISO 8601 time, inclusive (UTC)")
    p.add_argument("--to", dest="until", metavar="DATE", help="exclusive (default: now)")

    cap = command("capacity", _needs_subcommand, "capacity requests: quota changes")
    cap_sub = cap.add_subparsers(dest="capacity_command", metavar="ACTION", required=True)
    p = command("list", capacity.run_capacity_list, "capacity requests you may see",
                into=cap_sub)
    p.add_argument("--state", choices=capacity.STATES)
    p.add_argument("--queue", metavar="PATH")
    p.add_argument("--limit", type=_positive, default=workloads.DEFAULT_LIMIT)
    p.add_argument("--all", action="store_true")
    p = command("request", capacity.run_capacity_request,
                "ask for a queue's min and/or max to change", into=cap_sub)
    p.add_argument("--queue", required=True, metavar="PATH")
    p.add_argument("--flavor", required=True)
    p.add_argument("--resource", choices=("gpu", "cpu", "memory"), default="gpu")
    p.add_argument("--min", type=float, help="the new guaranteed amount")
    p.add_argument("--max", type=float, help="the new ceiling")
    p.add_argument("--justification", required=True, metavar="TEXT")
    p.add_argument("--starts", metavar="TIME", help="ISO 8601 (default: now)")
    p.add_argument("--ends", metavar="TIME", help="ISO 8601 (default: permanent)")
    for decision, text in (("approve", "approve a request (admins)"),
                           ("deny", "deny a request, saying why (admins)")):
        p = command(decision, capacity.run_capacity_decide, text, into=cap_sub)
        p.set_defaults(decision=decision)
        p.add_argument("id", type=_positive, metavar="ID")
        p.add_argument("--comment", required=decision == "deny", metavar="TEXT")

    pol = command("policies", _needs_subcommand, "policies as code")
    pol_sub = pol.add_subparsers(dest="policies_command", metavar="ACTION", required=True)
    p = command("test", policies.run_policies_test,
                "run the test cases of policy files on the server (admins)", into=pol_sub)
    _files(p.add_argument("path", metavar="DIR", help="a folder of policy YAML files, or one"))

    p = command("completion", _completion, "print a shell completion script")
    p.add_argument("shell", choices=("bash", "zsh"))
    return parser


def _needs_subcommand(ctx: Context) -> int:  # argparse requires one: never reached
    raise CliError(Exit.USAGE, f"{ctx.args.command} needs an action (see --help)")


def _completion(ctx: Context) -> int:
    print(completion.script(build_parser(), ctx.args.shell), end="")
    return Exit.OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit code (docs/cli.md)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and --version (0), a usage error (2)
        return int(exc.code or 0) if not isinstance(exc.code, str) else int(Exit.USAGE)
    try:
        return int(args.run(Context(args=args)))
    except CliError as exc:
        print(f"allot: error: {exc.message}", file=sys.stderr)
        return int(exc.code)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # `allot list | head`: the reader has gone, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(Exit.OK)
