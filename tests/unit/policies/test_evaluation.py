"""What policies decide on hand-made contexts: kinds, modes, scope, errors, grandfathering."""

from policies.evaluation import evaluate_limits, evaluate_placements, evaluate_request
from policies.rules import PolicySpec
from policies.variables import deep_merge, sample_variables

H100 = PolicySpec(
    name="h100-approved", kind="validate", mode="enforce",
    match='request.flavors.exists(f, f.startsWith("h100"))', rule='"h100" in team.approvals',
    message='"team " + team.name + " lacks h100 for " + string(request.gpus) + " GPUs"',
)


def variables(**override):
    return deep_merge(sample_variables(), override)


def request_on(queue="rd/vision", flavors=("h100-80g",), gpus=8, approvals=(), **extra):
    return variables(request={"queue": queue, "flavors": list(flavors), "gpus": gpus, **extra},
                     team={"name": "vision", "approvals": list(approvals)})


def test_validate_denies_with_the_message():
    out = evaluate_request([H100], request_on())
    assert not out.allowed
    assert out.denials[0].code == "POLICY_DENIED"
    assert out.denials[0].message == "team vision lacks h100 for 8 GPUs"
    assert [p.name for p in out.matched] == ["h100-approved"]


def test_validate_allows_when_rule_holds_or_match_fails():
    assert evaluate_request([H100], request_on(approvals=["h100"])).allowed
    out = evaluate_request([H100], request_on(flavors=["a100-80g"]))
    assert out.allowed and out.matched == []


def test_audit_mode_records_and_allows():
    spec = PolicySpec(**{**H100.__dict__, "mode": "audit"})
    out = evaluate_request([spec], request_on())
    assert out.allowed
    assert [(f.outcome, f.message) for f in out.findings] == [
        ("audited", "team vision lacks h100 for 8 GPUs")]


def test_off_mode_is_skipped():
    spec = PolicySpec(**{**H100.__dict__, "mode": "off"})
    out = evaluate_request([spec], request_on())
    assert out.allowed and out.findings == [] and out.matched == []


def test_canary_scope_applies_to_the_subtree_only():
    spec = PolicySpec(**{**H100.__dict__, "scope": ("rd/vision",)})
    assert not evaluate_request([spec], request_on(queue="rd/vision")).allowed
    assert not evaluate_request([spec], request_on(queue="rd/vision/exp")).allowed
    assert evaluate_request([spec], request_on(queue="rd/visionary")).allowed
    assert evaluate_request([spec], request_on(queue="ops/infra")).allowed


def test_grandfathered_update_is_recorded_not_denied():
    out = evaluate_request([H100], request_on(is_update=True), grandfathered=True)
    assert out.allowed
    assert [f.outcome for f in out.findings] == ["grandfathered"]


def test_evaluation_error_fails_closed_by_default():
    broken = PolicySpec(name="broken", kind="validate", mode="enforce",
                        rule='fleet.utilisation["h100-80g"] < 0.5')
    out = evaluate_request([broken], request_on())
    assert not out.allowed
    finding = out.denials[0]
    assert finding.code == "POLICY_ERROR"
    assert finding.expression == 'fleet.utilisation["h100-80g"] < 0.5'
    assert "no such key" in finding.message and "policy broken" in finding.message


def test_evaluation_error_fails_open_when_set():
    broken = PolicySpec(name="broken", kind="validate", mode="enforce",
                        rule='fleet.utilisation["h100-80g"] < 0.5')
    out = evaluate_request([broken], request_on(), fail_open=True)
    assert out.allowed
    assert [f.outcome for f in out.findings] == ["error"]


def test_priority_first_enforced_policy_wins_and_audit_reports():
    serving = PolicySpec(name="a-serving", kind="priority", mode="enforce", order=10,
                         match='request.labels["role"] == "serving"', rule='"inference-high"')
    batch = PolicySpec(name="b-batch", kind="priority", mode="enforce", order=20,
                       rule='"batch-low"')
    audit = PolicySpec(name="c-audit", kind="priority", mode="audit", rule='"batch-low"')
    out = evaluate_request([batch, audit, serving],
                           request_on(labels={"role": "serving"}, priority_class="training"))
    assert (out.priority_class, out.priority_policy) == ("inference-high", "a-serving")
    audited = [f for f in out.findings if f.outcome == "audited"]
    assert audited[0].message == ("policy c-audit would set priority class batch-low "
                                  "(requested training)")


LIMIT = PolicySpec(name="burst", kind="limit", mode="enforce", key="a100-80g/gpu",
                   match='queue.path == "rd/team-a"',
                   rule='fleet.utilisation["a100-80g"] < 0.4 ? 32 : 16')


def queue(path="rd/team-a", max_=40):
    return {"path": path, "max": {"a100-80g/gpu": max_}, "min": {}, "used": {}}


def test_limit_caps_by_utilisation():
    quiet = {**sample_variables(), "fleet": {"utilisation": {"a100-80g": 0.3}}}
    busy = {**sample_variables(), "fleet": {"utilisation": {"a100-80g": 0.5}}}
    assert evaluate_limits([LIMIT], [queue()], quiet).caps == {
        ("rd/team-a", "a100-80g/gpu"): (32, "burst")}
    out = evaluate_limits([LIMIT], [queue(), queue("rd/team-b")], busy)
    assert out.caps == {("rd/team-a", "a100-80g/gpu"): (16, "burst")}
    assert out.findings[0].outcome == "capped"
    assert "caps rd/team-a a100-80g/gpu at 16 (configured max 40)" in out.findings[0].message


def test_limit_error_fails_closed_at_zero():
    spec = PolicySpec(**{**LIMIT.__dict__, "rule": 'fleet.utilisation["x"] < 0.4 ? 32 : 16'})
    base = {**sample_variables(), "fleet": {"utilisation": {}}}
    out = evaluate_limits([spec], [queue()], base)
    assert out.caps == {("rd/team-a", "a100-80g/gpu"): (0, "burst")}
    out = evaluate_limits([spec], [queue()], base, fail_open=True)
    assert out.caps == {}


def test_limit_in_audit_mode_does_not_cap():
    spec = PolicySpec(**{**LIMIT.__dict__, "mode": "audit"})
    base = {**sample_variables(), "fleet": {"utilisation": {"a100-80g": 0.9}}}
    out = evaluate_limits([spec], [queue()], base)
    assert out.caps == {} and out.findings[0].outcome == "audited"


CLUSTERS = [{"name": "sh-1", "region": "east"}, {"name": "sh-2", "region": "east"},
            {"name": "bj-1", "region": "north"}]
EAST = PolicySpec(name="east", kind="placement", mode="enforce",
                  match='"kind" in request.labels && request.labels["kind"] == "data-labelling"',
                  rule='["east"]')


def test_placement_by_region_and_by_name_intersect():
    by_name = PolicySpec(name="sh-2-only", kind="placement", mode="enforce",
                         rule='request.gpus > 4 ? ["sh-2", "bj-1"] : ["sh-1", "sh-2", "bj-1"]')
    work = [(1, {"queue": "rd/x", "labels": {"kind": "data-labelling"}, "gpus": 8}),
            (2, {"queue": "rd/x", "labels": {}, "gpus": 8})]
    out = evaluate_placements([EAST, by_name], work, sample_variables(), CLUSTERS)
    assert out.placements[1][0] == {"sh-2"}
    assert out.placements[2][0] == {"sh-2", "bj-1"}


def test_placement_answers_equal_requests_once_but_reports_each_workload():
    from policies.celexpr import fields_of
    from policies.evaluation import evaluate_placements
    from policies.rules import PolicySpec
    from policies.variables import sample_variables

    audit = PolicySpec(name="east", kind="placement", mode="audit", rule='["east"]',
                       match='"kind" in request.labels && request.labels["kind"] == "dl"')
    broken = PolicySpec(name="broken", kind="placement", mode="enforce",
                        rule='request.labels["missing"]')
    clusters = [{"name": "sh-1", "region": "east"}, {"name": "bj-1", "region": "north"}]
    workloads = [(i, {"name": f"w{i}", "queue": "rd/a", "labels": {"kind": "dl"}})
                 for i in range(3)] + [(9, {"name": "w9", "queue": "rd/a", "labels": {}})]
    fields = fields_of([audit.match, audit.rule, broken.rule], "request")
    assert fields == {"labels"}
    out = evaluate_placements([audit, broken], workloads, sample_variables(), clusters,
                              fields=fields)
    audited = [s for f, s in zip(out.findings, out.subjects, strict=True)
               if f.outcome == "audited"]
    errors = [s for f, s in zip(out.findings, out.subjects, strict=True) if f.outcome == "error"]
    assert audited == ["w0", "w1", "w2"]
    assert errors == ["w0", "w1", "w2", "w9"]
    assert all(out.placements[i][0] == set() for i in (0, 1, 2, 9))
