"""Session policies (policies/sessions.py): which apply to a queue and a user and how specific
each is, as scheduling.extensions offers them; their admin page refuses bad input naming the
field."""

from __future__ import annotations

import pytest

from policies.models import SessionPolicy
from policies.sessions import session_rules
from scheduling import extensions
from tests.factories import AdminFactory

pytestmark = pytest.mark.django_db


def test_rules_apply_by_queue_subtree_and_user_with_their_specificity():
    SessionPolicy.objects.create(name="all", idle_timeout_s=3600)
    SessionPolicy.objects.create(name="rd", queues=["rd", "ops"], idle_gpu_util_pct=20)
    SessionPolicy.objects.create(name="vision", queues=["rd/vision/"], max_time_s=7200)
    SessionPolicy.objects.create(name="alice", users=["alice"], queues=["rd"],
                                 idle_timeout_s=600)
    SessionPolicy.objects.create(name="rdx", queues=["rdx"], idle_timeout_s=60)
    SessionPolicy.objects.create(name="off", idle_timeout_s=60, enabled=False)
    rules = {r.source: (r.user_specific, r.depth) for r in session_rules("rd/vision", "alice")}
    assert rules == {"policy all": (False, 0), "policy rd": (False, 1),
                     "policy vision": (False, 2), "policy alice": (True, 1)}
    # "rdx" is no ancestor of rd/...; bob is not alice; the registered hook gives the same.
    assert {r.source for r in extensions.session_rules("rd/nlp", "bob")} == {
        "policy all", "policy rd"}


def test_the_admin_page_refuses_bad_lists_and_an_empty_policy(client):
    client.force_login(AdminFactory())
    url = "/admin/policies/sessionpolicy/add/"
    assert client.get(url).status_code == 200
    answer = client.post(url, {"name": "bad", "queues": '"rd"', "users": "[]",
                               "enabled": "on"})
    assert answer.status_code == 200
    errors = answer.context["adminform"].form.errors
    assert errors["queues"] == ["'rd' is not a list of names"]
    assert errors["idle_timeout_s"] == [
        "set at least one of idle_timeout_s, idle_gpu_util_pct, max_time_s"]
    assert not SessionPolicy.objects.exists()
    answer = client.post(url, {"name": "night", "queues": '["rd/vision"]', "users": "[]",
                               "idle_timeout_s": "900", "enabled": "on"})
    assert answer.status_code == 302
    assert SessionPolicy.objects.get().queues == ["rd/vision"]
