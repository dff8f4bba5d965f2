"""`allot extend ID --hours N` against a running portal: a session's time limit extended, and
an extension past its session policy's longest refused with the numbers (exit 1)."""

from __future__ import annotations

import json

import pytest

from policies.models import SessionPolicy
from scheduling.models import Workload
from scheduling.services import workload_submit

from .conftest import org, priority_classes  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_extend_a_session_then_hit_its_policy(cli, org, priority_classes, tokens):  # noqa: F811
    SessionPolicy.objects.create(name="day", queues=["rd"], max_time_s=4 * 3600)
    w = workload_submit(user=org.alice, nudge=False, data={
        "name": "lab", "queue": "rd/vision", "interactive": True, "time_limit_s": 3600,
        "image": "quay.io/jupyter/pytorch-notebook:2024-10-07",
        "pods": [{"count": 1, "gpus": 1, "flavors": ["a100-80g"]}]})
    ran = cli("extend", str(w.pk), "--hours", "2", token=tokens["alice"])
    assert (ran.code, ran.out.strip()) == (0, f"lab (#{w.pk}): time limit 3 h.")
    assert json.loads(cli("extend", str(w.pk), "--hours", "0.5", "-o", "json",
                          token=tokens["alice"]).out)["time_limit_s"] == 12600
    ran = cli("extend", str(w.pk), "--hours", "1", token=tokens["alice"])
    assert ran.code == 1
    assert "3.5 h + 1 h = 4.5 h is over the 4 h a session may run in rd/vision (policy day)" \
        in ran.err
    assert Workload.objects.get(pk=w.pk).time_limit_s == 12600
    assert cli("extend", str(w.pk), token=tokens["carol"]).code == 3  # not hers to see
