"""Replay a scenario through the engine on a simulated clock (SCENARIO-FORMAT.md).

Event-driven: the clock jumps from event to event (submissions, finishes, cancellations, ends
of grace periods, fleet events, pods becoming ready, backoffs and cooldowns running out). At
each event time what ends is applied first, then one scheduling cycle runs. While anything is
pending a cycle also runs every `cycle_interval_s` (on multiples of it); a periodic cycle is
skipped when nothing happened since the last one and no time threshold (starvation, cooldown,
backoff, pods-ready timeout) was crossed, because it would decide exactly the same. So the cost
grows with events and decisions, not with simulated seconds.

Choices where the format is silent:
- `nodes_down: N` is absolute: the last N nodes of that flavor in that cluster (by index) are
  down, the others up. Workloads with pods on a node that goes down are released at once and
  requeued (keeping checkpointed progress), with a NO_CAPACITY reason naming the node.
- A workload preempted and then cancelled during its grace keeps its capacity until the grace
  ends (deleting a terminating pod does not cut its grace), then stays cancelled; a reserved
  or running workload cancelled outside a grace frees its capacity at once.
- `rebuild` (Python API, not a scenario key) replays as the workers do: before every cycle the
  engine is rebuilt from a snapshot of itself (`scheduling.engine.export`), so nothing but what
  a snapshot carries survives from one cycle to the next. It must give the same result.

The metrics are defined in `scheduling.replay.metrics`.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections import deque
from typing import Any

from scheduling.engine import Engine, Reason, ReasonCode, WorkloadSpec, gpu_equivalent
from scheduling.engine.accounting import EPS
from scheduling.engine.export import snapshot_of
from scheduling.engine.forecast import gpus_of
from scheduling.replay.eta import EtaOptions, FirstForecasts, RunHistory, eta_at_submit
from scheduling.replay.metrics import Metrics, num
from scheduling.replay.record import WorkloadRecord
from scheduling.replay.scenario import Scenario

# Event kinds in the order they apply at one instant: what ends first, then what begins.
FINISH, CANCEL, GRACE_END, FLEET, RUNNING, SUBMIT, WAKE = range(7)


class Runner(Metrics):
    """One replay of one scenario."""

    def __init__(self, sc: Scenario, *, rebuild: bool = False,
                 eta: EtaOptions | None = None) -> None:
        self.sc = sc
        self.rebuild = rebuild
        self.eta = eta
        self.history = RunHistory(eta or EtaOptions())
        self.submitted = 0
        self.first = FirstForecasts()  # each workload's first forecast (eta.all_pending)
        self.recent: deque[WorkloadSpec] = deque()  # submissions within eta.arrivals_s
        self.eng = Engine(queues=sc.queues, clusters=sc.clusters, flavors=sc.flavors,
                          settings=sc.settings, budgets=sc.budgets)
        self.ws = {w.spec.name: WorkloadRecord(w) for w in sc.workloads}
        flavors = {f.name: f for f in sc.flavors}
        for record in self.ws.values():  # MIG slices count as their GPU-equivalents
            record.gpus += sum(
                ps.count * amount * gpu_equivalent(flavors.get(ps.flavors[0]), res)
                for ps in record.sim.spec.pod_sets if ps.resources and ps.flavors
                for res, amount in ps.resources)
        self.heap: list[tuple[float, int, int, str, int]] = []
        self.seq = 0
        self.now = 0.0
        self.changed = True
        self.preemption_count = 0
        self.reserved_at: dict[str, float] = {}
        self._start_metrics()

    # ---- events ------------------------------------------------------------------------

    def push(self, at: float, kind: int, name: str = "", token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, kind, self.seq, name, token))

    def _reason(self, w: WorkloadRecord, at: float, reason: Reason) -> None:
        code = str(reason.code)
        if code == w.last_code:
            return
        w.last_code = code
        w.reasons.append((at, code, reason.message))

    # ---- the replay --------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        sc = self.sc
        until = sc.until
        for name, w in self.ws.items():
            if w.sim.spec.submitted_at <= until:
                self.push(w.sim.spec.submitted_at, SUBMIT, name)
            if w.sim.cancel_at is not None and w.sim.cancel_at <= until:
                self.push(w.sim.cancel_at, CANCEL, name)
        for i, ev in enumerate(sc.events):
            if ev.at <= until:
                self.push(ev.at, FLEET, str(i))
        interval = sc.settings.cycle_interval_s
        next_wake = math.inf
        while self.heap:
            t = self.heap[0][0]
            if t > until:
                break
            self._advance(t)
            self.now = t
            while self.heap and self.heap[0][0] <= t + EPS:
                _, kind, _, name, token = heapq.heappop(self.heap)
                self._apply(kind, name, token, t)
            if not self.changed and t + EPS < next_wake:
                # A periodic tick with nothing new: the cycle would decide the same.
                self._schedule_tick(t, interval, next_wake)
                continue
            self._cycle(t)
            next_wake = self._next_threshold(t)
            self._schedule_tick(t, interval, next_wake)
        self._advance(until)
        return self._output()

    def _schedule_tick(self, t: float, interval: float, next_wake: float) -> None:
        if not self.eng.pending and not self._any_reserved():
            return
        tick = (math.floor(t / interval + EPS) + 1) * interval
        if not self.changed and next_wake > tick:
            if next_wake == math.inf:
                return
            tick = math.ceil(next_wake / interval - EPS) * interval
        if self.heap and self.heap[0][0] <= tick and self.heap[0][1] == WAKE:
            return
        self.push(tick, WAKE)

    def _any_reserved(self) -> bool:
        return bool(self.reserved_at)

    def _next_threshold(self, t: float) -> float:
        """The earliest future time a cycle could decide differently with no event."""
        s = self.sc.settings
        eng = self.eng
        nxt = math.inf
        for not_before, _ in eng.backoff[:1]:
            nxt = min(nxt, not_before)
        for g in eng.groups.values():
            st = g.members[0].spec.submitted_at + s.starvation_s
            if st >= t - EPS:
                nxt = min(nxt, st + 1e-6)
        for until in eng.cooldown.values():
            if until > t + EPS:
                nxt = min(nxt, until)
        for at in self.reserved_at.values():
            nxt = min(nxt, at + s.pods_ready_timeout_s)
        return nxt

    def _apply(self, kind: int, name: str, token: int, t: float) -> None:
        """Apply one event at t; a finish, a running or a grace end of a workload's earlier
        life (an older token) is dropped."""
        if kind == WAKE:
            return
        self.changed = True
        if kind == FLEET:
            self._fleet(self.sc.events[int(name)], t)
            return
        w = self.ws[name]
        if kind == SUBMIT:
            self._submit(w, t)
        elif kind == RUNNING:
            if token == w.token and w.state == "reserved":
                self._running(w, name, t)
        elif kind == FINISH:
            if token == w.token and w.state == "running":
                self._finish(w, name, t)
        elif kind == CANCEL:
            self._cancel(w, name, t)
        elif kind == GRACE_END:
            if token == w.token:
                self._grace_end(w, name, t)

    def _submit(self, w: WorkloadRecord, t: float) -> None:
        """Rejected with its reasons when it can never fit, else pending."""
        eng = self.eng
        reasons = eng.check(w.sim.spec)
        if reasons:
            w.state = "rejected"
            for r in reasons:
                w.reasons.append((t, str(r.code), r.message))
            return
        eng.submit(w.sim.spec)
        w.counted = True
        self.demand += w.gpus
        self.leaf_demand.add(w.sim.spec.queue)
        if self.eta is not None:
            self.submitted += 1
            recent = self.recent
            if self.eta.arrivals_s > 0:
                recent.append(w.sim.spec)
                while recent and recent[0].submitted_at < t - self.eta.arrivals_s:
                    recent.popleft()
            if (self.submitted - 1) % self.eta.every == 0:
                w.eta = eta_at_submit(eng, self.ws, self.history, self.eta, w.sim.spec.name, t,
                                      recent, self.first)

    def _running(self, w: WorkloadRecord, name: str, t: float) -> None:
        """Its pods all run: its progress counts from now."""
        self.eng.mark_running(name)
        self.reserved_at.pop(name, None)
        w.state = "running"
        w.run_start = t
        self._schedule_finish(w, t)

    def _finish(self, w: WorkloadRecord, name: str, t: float) -> None:
        eng = self.eng
        a = eng.admitted.get(name)
        if a is not None and a.grace_until is not None:
            return  # in grace: the grace end decides
        eng.end(name, t)
        self._alloc_end(w, t)
        self._drop_demand(w)
        w.state = "finished"
        w.finished_at = t
        if w.run_start is not None:
            self.history.add(w.sim.spec.queue, t, t - w.run_start, gpus_of(w.sim.spec))

    def _cancel(self, w: WorkloadRecord, name: str, t: float) -> None:
        """Pending: gone. Holding capacity outside a grace: freed now. In grace: it keeps the
        capacity until the grace ends, then stays cancelled."""
        eng = self.eng
        if w.state in ("finished", "rejected", "cancelled"):
            return
        w.cancelled = True
        self._drop_demand(w)
        if name in eng.pending:
            eng.remove_pending(name)
            w.state = "cancelled"
            return
        a = eng.admitted.get(name)
        if a is not None and a.grace_until is None:
            eng.end(name, t)
            self._alloc_end(w, t)
            w.token += 1
            w.state = "cancelled"
        elif a is None:
            w.state = "cancelled"

    def _grace_end(self, w: WorkloadRecord, name: str, t: float) -> None:
        """A preempted workload's grace is over: its capacity is freed and it is pending again
        (unless it was cancelled meanwhile)."""
        eng = self.eng
        eng.end(name, t)
        self._alloc_end(w, t)
        w.run_start = None
        if w.cancelled:
            w.state = "cancelled"
            return
        w.state = "pending"
        eng.submit(w.sim.spec)

    def _schedule_finish(self, w: WorkloadRecord, t: float) -> None:
        if w.sim.duration_s is None:
            return
        remaining = max(0.0, w.sim.duration_s - w.progress)
        self.push(t + remaining, FINISH, w.sim.spec.name, w.token)

    def _fleet(self, ev: Any, t: float) -> None:
        eng = self.eng
        if ev.health is not None:
            eng.set_health(ev.cluster, ev.health)
        if ev.nodes_down is not None:
            pool = eng.fleet.by_name[ev.cluster].pools[ev.flavor]
            n = len(pool.names)
            evicted: set[str] = set()
            for i, node in enumerate(pool.names):
                ready = i < n - ev.nodes_down
                if pool.ready[i] != ready:
                    hit = eng.set_node_ready(node, ready)
                    if not ready:
                        for name in hit:
                            if name not in evicted:
                                evicted.add(name)
                                self._evict(name, node, t)
            self.cap = self._ready_gpus()

    def _evict(self, name: str, node: str, t: float) -> None:
        w = self.ws[name]
        self._stop_progress(w, t)
        self.eng.end(name, t)
        self._alloc_end(w, t)
        w.token += 1
        if w.cancelled:
            w.state = "cancelled"
            return
        w.state = "pending"
        self._reason(w, t, Reason(ReasonCode.NO_CAPACITY, f"node {node} went down"))
        self.eng.submit(w.sim.spec)

    def _stop_progress(self, w: WorkloadRecord, t: float) -> None:
        if w.run_start is not None:
            if w.sim.spec.checkpoint:
                w.progress += t - w.run_start
            else:
                w.progress = 0.0
        w.run_start = None

    def _cycle(self, t: float) -> None:
        if self.rebuild:
            self.eng = Engine.from_snapshot(snapshot_of(self.eng, t))
        eng = self.eng
        res = eng.cycle(t)
        self.changed = False
        for rel in res.released:
            self.reserved_at.pop(rel.workload, None)
            w = self.ws[rel.workload]
            self._alloc_end(w, t)
            w.token += 1
            w.state = "pending"
            self._reason(w, t, rel.reason)
            self.push(rel.not_before, WAKE)
        for adm in res.admitted:
            w = self.ws[adm.workload]
            w.state = "reserved"
            w.last_code = ""
            entry: dict[str, object] = {"at": num(t), "cluster": adm.cluster, "flavor": adm.flavor,
                     "borrowed": adm.borrowed, "nodes": list(adm.nodes)}
            if adm.cards:
                entry["cards"] = list(adm.cards)
            w.admissions.append(entry)
            if w.first_admit is None:
                w.first_admit = t
            w.admitted_at = t
            self.alloc += w.gpus
            w.token += 1
            delay = w.sim.start_delay_s
            if delay <= 0:
                eng.mark_running(adm.workload)
                w.state = "running"
                w.run_start = t
                self._schedule_finish(w, t)
            else:
                self.reserved_at[adm.workload] = t
                self.push(t + delay, RUNNING, adm.workload, w.token)
        for pre in res.preempted:
            self.reserved_at.pop(pre.workload, None)
            w = self.ws[pre.workload]
            self.preemption_count += 1
            w.preemptions.append({"at": num(t), "by": pre.by, "kind": str(pre.kind)})
            w.last_code = ""
            self._reason(w, t, pre.reason)
            self._stop_progress(w, t)
            w.token += 1
            if w.state == "reserved":
                w.state = "running"  # holding capacity until the grace ends
            self.push(pre.grace_until, GRACE_END, pre.workload, w.token)
        for name, reason in res.reasons.items():
            self._reason(self.ws[name], t, reason)
        self._track_violations(t)
        # Preemptions free nothing until their graces end, which are events of their own.
        self.changed = bool(res.admitted or res.released)


def run_scenario(scenario: Scenario, *, rebuild: bool = False,
                 eta: EtaOptions | None = None) -> dict[str, Any]:
    """Replay a loaded scenario; return the output JSON as a dict (`rebuild`: as the workers
    do, from a fresh snapshot every cycle; `eta`: record each workload's start forecast at
    its submission, `eta_at_submit`, scheduling.replay.eta)."""
    # The replay allocates many small long-lived objects and frees them by reference counting;
    # a frequent cyclic collector would only rescan them, so it runs rarely.
    threshold = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(500_000, 50, 1000)
    try:
        runner = Runner(scenario, rebuild=rebuild, eta=eta)
        out = runner.run()
        if eta is not None and eta.record_starts and runner.first.rows:
            # each pending workload's first forecast, for studying the calibration
            out["first_forecasts"] = [
                {"queue": q, "name": n, "at": at, "starts": list(st)}
                for q, n, at, st in runner.first.rows]
        return out
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
