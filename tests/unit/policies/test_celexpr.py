"""CEL checking and evaluation (no database): the limits, panics of the CEL library as
errors, a costly expression stopped in its trial."""

import time

import cel
import pytest

from policies import celexpr
from policies.celexpr import (
    PolicyEvaluationError,
    check_expression,
    evaluate,
    make_context,
    referenced_roots,
    trial_evaluate,
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


def _panic_class():
    """pyo3's PanicException, as the CEL library raises it (not importable by name)."""
    try:
        cel.compile("(" * 100_000 + "1" + ")" * 100_000)
    except BaseException as exc:  # noqa: BLE001
        return type(exc)
    pytest.skip("this CEL library does not panic on it")


def test_the_testers_nesting_is_a_validation_error_not_a_crash():
    src = "(" * 100_000 + "true" + ")" * 100_000
    [error] = check_expression(src)
    assert (error.line, error.column) == (1, 4097)
    assert error.message == "the expression is 200004 characters long; the limit is 4096"
    with pytest.raises(PolicyEvaluationError, match="refused: the expression is 200004"):
        evaluate(src, make_context({}))


def test_a_panic_while_parsing_is_an_error_of_the_expression(monkeypatch):
    panic = _panic_class()

    def compile_panics(src):
        raise panic("Formatting argument out of range")

    monkeypatch.setattr(celexpr.cel, "compile", compile_panics)
    celexpr.compile_expression.cache_clear()
    assert [str(e) for e in check_expression("request.gpus > 1")] == [
        "line 1, column 1: the CEL parser failed on it (Formatting argument out of range)"]
    with pytest.raises(PolicyEvaluationError, match="the CEL library failed on it"):
        evaluate("request.gpus > 2", make_context({}))
    celexpr.compile_expression.cache_clear()


def test_a_panic_while_evaluating_is_a_policy_error(monkeypatch, caplog):
    panic = _panic_class()

    class Program:
        def execute(self, context):
            raise panic("index out of bounds")

    monkeypatch.setattr(celexpr, "compile_expression", lambda src: Program())
    with pytest.raises(PolicyEvaluationError) as info:
        evaluate("request.gpus > 1", make_context({}))
    assert str(info.value) == "the CEL library failed on it (index out of bounds)"
    assert "panicked" in caplog.text


def test_a_stored_expression_past_the_limits_is_refused_when_evaluated():
    deep = "(" * 40 + "1" + ")" * 40 + " == 1"
    with pytest.raises(PolicyEvaluationError, match="brackets nested 33 deep"):
        evaluate(deep, make_context({}))
    assert referenced_roots(deep) == frozenset()


def test_a_costly_expression_is_stopped_in_its_trial():
    ones = "[" + ", ".join(["1"] * 400) + "]"
    src = f"{ones}.map(a, {ones}.map(b, a + b)).size() > 0"
    assert check_expression(src) == []
    start = time.monotonic()
    assert trial_evaluate([src], {}, 0.3) == "its evaluation took longer than 0.3 s (stopped)"
    assert time.monotonic() - start < 10
    assert trial_evaluate(["request.gpus > 1", "no.such > 1"], {"request": {"gpus": 2}},
                          5.0) is None
