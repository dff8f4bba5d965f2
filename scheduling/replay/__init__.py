"""The scenario runner: load a scenario (YAML or JSON), replay it through the engine.

    from scheduling.replay import load_scenario, run_scenario, ScenarioError
    result = run_scenario(load_scenario("tests/scenarios/04-borrow-and-reclaim.yaml"))

No database: the command `python manage.py simulate FILE [--out F]` is pure too.

`loader` reads the file and its top level, `clusters`, `queues` and `workloads` its sections,
with the field checks of `checker`, into a `scenario.Scenario`; `runner` replays it, keeping a
`record` per workload and the `metrics` its output ends with.
"""

from scheduling.replay.eta import EtaOptions
from scheduling.replay.loader import load_scenario
from scheduling.replay.runner import run_scenario
from scheduling.replay.scenario import Scenario, ScenarioError

__all__ = ["EtaOptions", "Scenario", "ScenarioError", "load_scenario", "run_scenario"]
