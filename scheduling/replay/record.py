"""The runner's record of one workload: where it is in its life, and what the output reports."""

from __future__ import annotations

from typing import Any

from scheduling.replay.scenario import SimWorkload


class WorkloadRecord:
    """The simulator's record of one workload."""

    __slots__ = ("sim", "state", "admissions", "preemptions", "reasons", "finished_at",
                 "last_code", "token", "progress", "run_start", "first_admit", "gpus",
                 "admitted_at", "cancelled", "counted", "eta")

    def __init__(self, sim: SimWorkload) -> None:
        self.sim = sim
        self.state = "pending"
        self.admissions: list[dict[str, Any]] = []
        self.preemptions: list[dict[str, Any]] = []
        self.reasons: list[tuple[float, str, str]] = []  # dicts only in the output
        self.finished_at: float | None = None
        self.last_code = ""
        self.token = 0
        self.progress = 0.0
        self.run_start: float | None = None
        self.first_admit: float | None = None
        self.gpus: float = sum(ps.count * ps.gpus for ps in sim.spec.pod_sets)
        self.admitted_at: float | None = None
        self.cancelled = False
        self.counted = False  # in demand(t)
        self.eta: dict[str, Any] | None = None  # the start forecast made at submission
