"""A rule is refused when saved (API, services) if it is too long, nests too deep or costs too
much to evaluate: the tester's inputs, each a 400 naming the limit, nothing saved, the process
alive."""

import pytest

from policies.models import Policy

from .test_api import H100

ONES = "[" + ", ".join(["1"] * 400) + "]"


@pytest.mark.parametrize(("rule", "message"), [
    ("(" * 100_000 + "true" + ")" * 100_000,
     "line 1, column 4097: the expression is 200004 characters long; the limit is 4096"),
    ("(" * 40 + "true" + ")" * 40,
     "line 1, column 33: brackets nested 33 deep; the limit is 32"),
    ("[1, 2].map(a, [3, 4].map(b, [5, 6].map(c, a * b * c))).size() > 0",
     "line 1, column 39: comprehensions (all, exists, exists_one, map, filter) nested 3 deep; "
     "the limit is 2"),
    (f"{ONES}.map(a, {ONES}.map(b, a + b)).size() > 0",
     "refused: its evaluation took longer than 0.25 s (stopped) on a sample request with the "
     "current fleet (fewer or smaller comprehensions?)"),
])
def test_the_testers_rules_are_refused_on_save(admin_api, org, rule, message):
    response = admin_api.post("/api/v1/policies", {**H100, "rule": rule}, format="json")
    assert response.status_code == 400
    assert response.json() == {"rule": [message]}
    assert not Policy.objects.exists()


def test_a_costly_rule_is_refused_when_tried(admin_api, org):
    admin_api.post("/api/v1/policies", H100, format="json")
    rule = f"{ONES}.map(a, {ONES}.map(b, a + b)).size() > 0"
    response = admin_api.post("/api/v1/policies/h100-approved/try",
                              {"input": {}, "policy": {"rule": rule}}, format="json")
    assert response.status_code == 400 and "took longer than" in response.json()["rule"][0]


def test_an_ordinary_rule_is_saved(admin_api, org):
    rule = 'request.flavors.all(f, fleet.clusters.exists(c, c.name != f)) || true'
    response = admin_api.post("/api/v1/policies", {**H100, "rule": rule}, format="json")
    assert response.status_code == 201, response.json()
