"""Policy files and their test cases; the policies_test command (no database)."""

from pathlib import Path

import pytest
from django.core.management import call_command

from policies.specs import check_fields, read_dir

EXAMPLES = Path(__file__).resolve().parents[3] / "policies" / "examples"


def test_the_five_examples_are_valid_and_their_cases_pass(capsys):
    files = read_dir(EXAMPLES)
    assert sorted(p["name"] for f in files for p in f.policies) == [
        "h100-approved-projects", "labelling-east-only", "over-budget-no-new-work",
        "serving-inference-high", "vision-a100-burst"]
    assert sorted({p["kind"] for f in files for p in f.policies}) == [
        "limit", "placement", "priority", "validate"]
    call_command("policies_test", str(EXAMPLES))
    out = capsys.readouterr().out
    assert "14 passed, 0 failed (5 policies in 5 files)" in out


def test_check_fields_reports_cel_errors_with_position():
    errors = check_fields({"name": "x", "kind": "validate", "mode": "enforce",
                           "rule": "request.gpus >", "message": '"a" +'})
    assert errors["rule"][0].startswith("line 1, column 15: Syntax error")
    assert errors["message"][0].startswith("line 1, column 6: Syntax error")


def test_check_fields_limit_needs_a_key_and_names_bad_values():
    errors = check_fields({"name": "Bad Name", "kind": "limit", "mode": "loud", "rule": "16"})
    assert "'Bad Name' is not a valid name" in errors["name"][0]
    assert "'loud' is not a mode" in errors["mode"][0]
    assert "needs the quota key" in errors["key"][0]


FAILING = """
name: gpu-cap
kind: validate
mode: enforce
rule: request.gpus <= 16
message: '"asked " + string(request.gpus) + " GPUs, at most 16"'
tests:
  - name: small passes
    input: {request: {gpus: 8}}
    expect: allow
  - name: wrong expectation
    input: {request: {gpus: 32}}
    expect: allow
  - name: wrong message
    input: {request: {gpus: 32}}
    expect: deny
    message: "too many"
"""


def test_policies_test_exits_non_zero_on_a_failing_case(tmp_path, capsys):
    (tmp_path / "cap.yaml").write_text(FAILING)
    with pytest.raises(SystemExit) as info:
        call_command("policies_test", str(tmp_path))
    assert info.value.code == 1
    captured = capsys.readouterr()
    assert "1 passed, 2 failed" in captured.out
    assert "FAIL gpu-cap: wrong expectation: expected allow, got deny: asked 32 GPUs, at most 16" \
        in captured.err
    assert "FAIL gpu-cap: wrong message: expected message 'too many', got 'asked 32 GPUs, " \
        "at most 16'" in captured.err


def test_policies_test_fails_on_invalid_cel(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("name: bad\nkind: validate\nrule: 'request.gpus <'\n")
    with pytest.raises(SystemExit) as info:
        call_command("policies_test", str(tmp_path))
    assert info.value.code == 1
    assert "FAIL bad: (definition): rule: line 1, column 15" in capsys.readouterr().err


def test_policies_test_unreadable_file_exits_2(tmp_path, capsys):
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(SystemExit) as info:
        call_command("policies_test", str(tmp_path))
    assert info.value.code == 2


def test_check_fields_bounds_the_order():
    base = {"name": "x", "kind": "validate", "rule": "true"}
    assert check_fields({**base, "order": 1_000_000}) == {}
    assert check_fields({**base, "order": 2**31}) == {
        "order": ["order 2147483648 is out of range: from -1000000 to 1000000"]}
