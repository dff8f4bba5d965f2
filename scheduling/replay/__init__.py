"""The scenario runner: load a scenario (YAML or JSON), replay it through the engine.

    from scheduling.replay import load_scenario, run_scenario, ScenarioError
    result = run_scenario(load_scenario("tests/scenarios/reclaim-basic.yaml"))

No database: the command `python manage.py simulate FILE [--out F]` is pure too.
"""

from scheduling.replay.loader import load_scenario
from scheduling.replay.runner import run_scenario
from scheduling.replay.scenario import Scenario, ScenarioError

__all__ = ["Scenario", "ScenarioError", "load_scenario", "run_scenario"]
