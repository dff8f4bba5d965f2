"""Running one policy's expressions: a rule's value must have its kind's type."""

from policies.evaluation import evaluate_request
from policies.rules import PolicySpec

from .test_evaluation import request_on


def test_wrong_rule_type_is_an_error():
    spec = PolicySpec(name="typo", kind="validate", mode="enforce", rule="request.gpus")
    out = evaluate_request([spec], request_on())
    assert "rule returned int, expected bool" in out.denials[0].message
