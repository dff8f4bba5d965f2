"""CEL checking and evaluation (no database)."""

import pytest

from policies.celexpr import (
    PolicyEvaluationError,
    check_expression,
    evaluate,
    make_context,
)


def test_valid_expression_has_no_errors():
    assert check_expression('request.gpus <= 16 && "h100" in team.approvals') == []


def test_syntax_error_names_line_and_column():
    errors = check_expression("request.gpus > ")
    assert len(errors) == 1
    assert (errors[0].line, errors[0].column) == (1, 16)
    assert "Syntax error" in errors[0].message
    assert str(errors[0]).startswith("line 1, column 16: ")


def test_syntax_error_on_second_line():
    errors = check_expression("request.gpus > 2 &&\n  team.approvals.size() >")
    assert errors[0].line == 2


def test_unknown_variable_is_refused_with_its_position():
    errors = check_expression("request.gpus > 2 && reqest.pods > 1")
    assert len(errors) == 1
    assert errors[0].column == 21
    assert "unknown variable 'reqest'" in errors[0].message


def test_comprehension_variables_are_not_unknown():
    assert check_expression('request.flavors.exists(f, f.startsWith("h100"))') == []


def test_empty_expression_is_refused():
    assert check_expression("  ")[0].message == "empty expression"


def test_evaluate_with_decimal_and_helpers():
    from decimal import Decimal

    ctx = make_context({"cost_center": {"spent": Decimal("10250.50"), "budget": Decimal(10000)},
                        "team": {"approvals": ["h100", "export"]},
                        "fleet": {"utilisation": {"a100-80g": 0.554}}})
    assert evaluate("cost_center.spent >= cost_center.budget", ctx) is True
    assert evaluate("fmt(cost_center.spent)", ctx) == "10250.5"
    assert evaluate("fmt(cost_center.budget)", ctx) == "10000"
    assert evaluate('join(team.approvals, " + ")', ctx) == "h100 + export"
    assert evaluate('pct(fleet.utilisation["a100-80g"])', ctx) == "55%"


@pytest.mark.parametrize(("src", "fragment"), [
    ('fleet.utilisation["h100-80g"] < 0.4', "no such key"),
    ("request.gpus + 'a'", "TypeError"),
    ("1 / request.pods", "division by zero"),
])
def test_evaluation_errors_are_policy_errors(src, fragment):
    ctx = make_context({"fleet": {"utilisation": {}}, "request": {"gpus": 2, "pods": 0}})
    with pytest.raises(PolicyEvaluationError) as info:
        evaluate(src, ctx)
    assert fragment in str(info.value)


def test_referenced_fields_of_a_variable():
    from policies.celexpr import fields_of, referenced_fields

    assert referenced_fields('"kind" in request.labels && request.labels["kind"] == "x"',
                             "request") == {"labels"}
    assert referenced_fields('"the request " + string(request . gpus)', "request") == {"gpus"}
    assert referenced_fields("size(request) > 0", "request") is None
    assert referenced_fields('request["gpus"] > 0', "request") is None
    assert referenced_fields("queue.path.startsWith('d1/')", "request") == frozenset()
    assert fields_of(["request.gpus", "request.pods > 0", "true"], "request") == {"gpus",
                                                                                  "pods"}
    assert fields_of(["request.gpus", "has(request)"], "request") is None
