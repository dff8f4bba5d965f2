"""A loaded scenario: what `load_scenario` returns and `run_scenario` replays, and the error
that lists every problem of a file it refuses."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling.engine import (
    ClusterSpec,
    DisruptionBudget,
    FlavorSpec,
    PriorityClassSpec,
    QueueSpec,
    Settings,
    WorkloadSpec,
)


class ScenarioError(Exception):
    """An invalid scenario: `problems` has one line per broken rule."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class SimWorkload:
    """A workload of the timeline: the engine's view plus what only the simulator needs."""

    spec: WorkloadSpec
    duration_s: float | None
    start_delay_s: float = 0.0
    cancel_at: float | None = None


@dataclass(frozen=True)
class FleetEvent:
    """A change to the fleet at `at`: a cluster's health and/or nodes down for a flavor."""

    at: float
    cluster: str
    health: float | None = None
    flavor: str | None = None
    nodes_down: int | None = None


@dataclass
class Scenario:
    """A validated scenario, ready for `run_scenario`."""

    name: str
    until: float
    settings: Settings
    flavors: tuple[FlavorSpec, ...]
    priority_classes: dict[str, PriorityClassSpec]
    clusters: tuple[ClusterSpec, ...]
    queues: tuple[QueueSpec, ...]
    leaves: dict[str, str]  # queue name -> path
    workloads: list[SimWorkload]
    budgets: tuple[DisruptionBudget, ...] = ()
    events: list[FleetEvent] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
