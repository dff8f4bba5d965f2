"""The fault and load suite: `python -m tests.chaos.run` (full, `make chaos`) or `--short` (the
CI version, run by tests/chaos/test_chaos.py). docs/faults.md says what it does and what the
figures mean.

It starts a throwaway PostgreSQL and Redis and the whole system on them (stack.py), drives N
clients submitting and cancelling (clients.py) while a fault schedule kills workers mid-cycle,
stops the broker and crashes the database, lets the system settle, checks the invariants from
the database (invariants.py), runs schemathesis as an admin and as a researcher (fuzz.py),
prints the figures, writes them as JSON (`--json PATH`), and exits 1 if any target figure is
not 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.chaos.clients import Client, Record, run_load
from tests.chaos.fuzz import run_schemathesis
from tests.chaos.stack import Stack

OUTAGE_GRACE_S = 2.0  # answers this long after the database is back still count as outage


@dataclass(frozen=True)
class Plan:
    clients: int
    seconds: float
    think_s: float
    db_down_s: float
    broker_down_s: float
    kills: int
    fuzz_s: int
    fuzz_examples: int
    fuzz_phases: str
    workers: int = 2
    settle_s: float = 120.0


FULL = Plan(clients=200, seconds=120, think_s=1.0, db_down_s=8, broker_down_s=8, kills=4,
            fuzz_s=150, fuzz_examples=25, fuzz_phases="examples,coverage,fuzzing",
            settle_s=600)
SHORT = Plan(clients=20, seconds=20, think_s=0.2, db_down_s=3, broker_down_s=3, kills=2,
             fuzz_s=8, fuzz_examples=2, fuzz_phases="fuzzing")


@dataclass
class Faults:
    kills: list[dict] = field(default_factory=list)
    db_down: list[tuple[float, float]] = field(default_factory=list)  # monotonic (down, up)
    broker_down: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    worker_exits: list[dict] = field(default_factory=list)  # not killed by the suite


def fault_schedule(stack: Stack, plan: Plan, start: float, faults: Faults) -> None:
    """Kills spread over the run; the broker down at 1/4, the database down at 1/2."""
    steps: list[tuple[float, str]] = [(0.25, "broker"), (0.5, "db")]
    steps += [((k + 0.5) / plan.kills * 0.9, "kill") for k in range(plan.kills)]
    for frac, what in sorted(steps):
        time.sleep(max(0.0, start + frac * plan.seconds - time.monotonic()))
        try:
            if what == "kill":
                faults.kills.append(stack.kill_worker_mid_cycle())
            elif what == "broker":
                t0 = time.monotonic()
                stack.broker_outage(plan.broker_down_s)
                faults.broker_down.append((t0, time.monotonic()))
            else:
                t0 = time.monotonic()
                stack.db_outage(plan.db_down_s)
                faults.db_down.append((t0, time.monotonic()))
        except Exception as exc:  # reported as a failure of the suite itself
            faults.errors.append(f"{what}: {exc!r}")
    faults.errors += [f"worker restart: {e}" for e in stack.restarts_join()]


def sample_capacity(stop: threading.Event, seen: list[str], counts: dict[str, int]) -> None:
    """Check the capacity invariants every second while the load runs (skipped while the
    database does not answer)."""
    from django.db import Error, connection

    from tests.chaos.invariants import capacity_violations

    while not stop.wait(1.0):
        try:
            seen.extend(capacity_violations())
            counts["samples"] += 1
        except Error:
            counts["skipped"] += 1
            connection.close()
    connection.close()


def drain(stack: Stack, plan: Plan) -> tuple[Record, dict[str, int], list[str]]:
    """Restart what is down, cancel every open workload as the admin, and wait until nothing
    is open, held or undelivered (the outbox drained, the clusters confirmed every delete)."""
    from django.db import connections

    from scheduling.models import OPEN_STATES, Workload
    from tests.chaos.invariants import leftovers

    connections.close_all()
    stack.restarts_join()  # every worker alive again (the supervisor restarts the others)
    record = Record()
    started = time.monotonic()
    deadline = started + plan.settle_s
    left: dict[str, int] = {}
    passes: list[str] = []
    while time.monotonic() < deadline:
        ids = list(Workload.objects.filter(state__in=OPEN_STATES).values_list("id", flat=True))
        chunks = [ids[i::4] for i in range(4)]

        def cancel(chunk: list[int]) -> None:
            client = Client(stack.port, stack.users.admin, record)
            for pk in chunk:
                client.call("cancel", "POST", f"/api/v1/workloads/{pk}/cancel")
            client.close()

        threads = [threading.Thread(target=cancel, args=(c,)) for c in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        left = leftovers()
        passes.append(f"{time.monotonic() - started:.1f} s: cancelled {len(ids)}; left "
                      + ", ".join(f"{n} {k}" for k, n in left.items() if n))
        if not any(left.values()):
            break
        time.sleep(1.0)
    return record, left, passes


def in_outage(at: float, took: float, windows: list[tuple[float, float]]) -> bool:
    """Whether an answer's wait overlapped a window (or came within the grace after it)."""
    return any(at >= down and at - took <= up + OUTAGE_GRACE_S for down, up in windows)


def figures(plan: Plan, record: Record, drained: Record, faults: Faults, history: Any,
            capacity: list[str], samples: dict[str, int], left: dict[str, int],
            fuzz: list[Any]) -> dict[str, Any]:
    failures = record.failures + drained.failures
    during = [a for a in failures if in_outage(a.at, a.took, faults.db_down)]
    outside = [a for a in failures if not in_outage(a.at, a.took, faults.db_down)]
    errors_500 = [a for a in failures if a.status == 500]
    statuses = {f"{op} {status or 'no answer'}": n for (op, status), n in sorted(
        (record.statuses + drained.statuses).items())}
    return {
        "plan": asdict(plan),
        "submitted (201)": len(record.created),
        "cancelled (200, load)": len(record.cancelled),
        "cancelled (200, drain)": len(drained.cancelled),
        "answers": statuses,
        "answers during database outages": _count(during),
        "slowest answer s": round(record.slowest(), 2),
        "slowest answer during broker outages s": round(record.slowest(faults.broker_down), 2),
        # Workers that exited by themselves (the supervisor restarted them): a finding.
        "worker exits": len(faults.worker_exits),
        "faults": {"kills": faults.kills, "worker exits": faults.worker_exits,
                   "db outages s": [round(u - d, 1) for d, u in faults.db_down],
                   "broker outages s": [round(u - d, 1) for d, u in faults.broker_down],
                   "errors": faults.errors},
        "workloads": history.workloads, "events": history.events,
        "capacity samples": samples,
        # The targets: each 0.
        "lost workloads": len(history.lost),
        "lost cancels": len(history.undone_cancels),
        "illegal transitions": len(history.illegal_transitions),
        "states not their last event": len(history.state_not_last_event),
        "capacity violations": len(capacity),
        "500 answers": len(errors_500),
        "5xx or no answer outside database outages": len(outside),
        "cancel answers not cancelled": len(record.cancel_bodies_not_cancelled),
        "left after settling": sum(left.values()),
        "schemathesis 5xx": {f.role: f.count_5xx for f in fuzz},
        "schemathesis requests": {f.role: f.requests for f in fuzz},
        # Findings, not targets.
        "events out of time order": len(history.events_out_of_time_order),
        "admissions ending before they start": len(history.admissions_ending_before_start),
        "details": {
            "lost": history.lost[:20], "undone cancels": history.undone_cancels[:20],
            "illegal transitions": history.illegal_transitions[:20],
            "states not their last event": history.state_not_last_event[:20],
            "capacity": capacity[:20], "left": left,
            "500 answers": [_show(a) for a in errors_500[:20]],
            "5xx or no answer outside outages": [_show(a) for a in outside[:20]],
            "schemathesis 5xx": {f.role: dict(f.server_errors) for f in fuzz},
            "events out of time order": history.events_out_of_time_order[:10],
            "admissions ending before they start": history.admissions_ending_before_start[:10],
        },
    }


def _show(a: Any) -> str:
    return f"{a.op} {a.path} -> {a.status or 'no answer'}: {a.body[:200]}"


def _count(answers: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in answers:
        key = f"{a.op} {a.status or 'no answer'}"
        out[key] = out.get(key, 0) + 1
    return out


TARGETS = ("lost workloads", "lost cancels", "illegal transitions", "states not their last event",
           "capacity violations", "500 answers", "5xx or no answer outside database outages",
           "cancel answers not cancelled", "left after settling")


def failed(figs: dict[str, Any]) -> list[str]:
    bad = [k for k in TARGETS if figs[k]]
    bad += [f"schemathesis 5xx ({role})" for role, n in figs["schemathesis 5xx"].items() if n]
    if figs["faults"]["errors"]:
        bad.append("fault injection errors")
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="the CI version")
    parser.add_argument("--clients", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--fuzz-seconds", type=int, help="schemathesis' budget per role")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--keep-logs", action="store_true", help="even when all holds")
    args = parser.parse_args(argv)
    plan = SHORT if args.short else FULL
    overrides = {"clients": args.clients, "seconds": args.seconds, "fuzz_s": args.fuzz_seconds}
    plan = Plan(**{**asdict(plan), **{k: v for k, v in overrides.items() if v is not None}})
    # A SIGTERM (a test runner's timeout) still stops every server and process started here.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack, phases = Stack(), Phases()
    bad = ["the suite did not finish"]
    try:
        users = stack.setup(workers=plan.workers)
        phases.done("setup")
        print(f"stack up (logs: {stack.logs}); {plan.clients} clients for {plan.seconds:g} s",
              flush=True)
        figs = exercise(stack, plan, users, args, phases)
        figs["seconds"] = phases.seconds
        bad = failed(figs)
        text = json.dumps(figs, indent=2, default=str)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text)
    finally:
        stack.teardown(keep_logs=bool(bad) or args.keep_logs)
    print(f"FAILED: {', '.join(bad)} (logs kept in {stack.logs})" if bad
          else "all invariants hold", flush=True)
    return 1 if bad else 0


class Phases:
    """Seconds each phase took."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.t0 = self.started = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self.t0, 1)
        self.seconds["total"] = round(now - self.started, 1)
        self.t0 = now


def exercise(stack: Stack, plan: Plan, users: Any, args: Any, phases: Phases) -> dict[str, Any]:
    from tests.chaos.invariants import capacity_violations, history

    record, faults = Record(), Faults()
    stop, seen, samples = threading.Event(), [], {"samples": 0, "skipped": 0}
    sampler = threading.Thread(target=sample_capacity, args=(stop, seen, samples))
    sampler.start()
    unsupervised, exits = threading.Event(), []
    supervisor = threading.Thread(target=stack.supervise,
                                  args=(unsupervised, exits, time.monotonic()))
    supervisor.start()
    injector = threading.Thread(target=fault_schedule,
                                args=(stack, plan, time.monotonic(), faults))
    injector.start()
    try:
        run_load(port=stack.port, researchers=users.researchers, clients=plan.clients,
                 seconds=plan.seconds, think_s=plan.think_s, seed=args.seed, record=record)
        injector.join()
    finally:
        stop.set()
        sampler.join()
    phases.done("load and faults")
    print(f"load done: {len(record.created)} created, {len(record.cancelled)} cancelled; "
          "settling", flush=True)
    try:
        drained, left, passes = drain(stack, plan)
    finally:
        unsupervised.set()
        supervisor.join()
    faults.worker_exits = exits
    phases.done("settle")
    with contextlib.suppress(Exception):
        seen.extend(capacity_violations())
    hist = history(record.created, [*record.cancelled, *drained.cancelled])
    phases.done("invariants")
    fuzz = [run_schemathesis(port=stack.port, token=token, role=role, max_time=plan.fuzz_s,
                             max_examples=plan.fuzz_examples, phases=plan.fuzz_phases,
                             access_log=stack.logs / "access.log", logs=stack.logs,
                             seed=args.seed)
            for role, token in (("admin", users.admin), ("researcher", users.researchers[0][0]))
            if plan.fuzz_s > 0]
    phases.done("schemathesis")
    figs = figures(plan, record, drained, faults, hist, seen, samples, left, fuzz)
    figs["details"]["settle passes"] = passes
    return figs


if __name__ == "__main__":
    sys.exit(main())
