"""Reasons in plain words outside the pages: the API's `reason_text` (and each reason's
`text`) says what the `{% reason %}` tag says, with times as ISO 8601 and workloads by name;
`reason` keeps the engine's exact text; `allot why` prints the plain words."""

from __future__ import annotations

import json
import re

import pytest
from django.utils import timezone

from scheduling.models import EventType, Workload, WorkloadEvent
from scheduling.reasons import reason_plain
from tests.integration.portal.conftest import api_for, submit

pytestmark = pytest.mark.django_db

UNTIL = 1796154444.278  # 2026-12-01T19:47:24Z on the workers' clock
ISO = "2026-12-01T19:47:24Z"


def _waiting(org):
    """alice's `blocker` and her `waits`, which waits for the blocker to stop (a message
    naming it by id, with an epoch deadline), recorded as the cycle records reasons."""
    blocker = submit(org.alice, name="blocker")
    waits = submit(org.alice, name="waits")
    message = f"waiting for {blocker.pk} to stop (grace until {UNTIL})"
    Workload.objects.filter(pk=waits.pk).update(reason_code="WAITING_FOR_PREEMPTION",
                                                reason_message=message)
    WorkloadEvent.objects.create(workload=waits, type=EventType.REASON, at=timezone.now(),
                                 code="WAITING_FOR_PREEMPTION", message=message)
    return blocker, waits, message


def test_the_api_gives_plain_words_beside_the_engines_text(org, priority_classes):
    blocker, waits, message = _waiting(org)
    assert reason_plain("WAITING_FOR_PREEMPTION", message).text  # what the page says
    api = api_for(org.alice)
    detail = api.get(f"/api/v1/workloads/{waits.pk}").json()
    # Backward compatible: `reason` is still the engine's code and exact text.
    assert detail["reason"] == {"code": "WAITING_FOR_PREEMPTION", "message": message}
    text = detail["reason_text"]
    assert "blocker" in text and ISO in text, text
    assert str(UNTIL) not in text and "1796154444" not in text
    assert not re.search(rf"\b{blocker.pk}\b", text.replace(ISO, ""))
    assert detail["reasons"][-1]["text"] == text
    assert detail["reasons"][-1]["message"] == message
    listed = {w["id"]: w for w in api.get("/api/v1/workloads").json()["results"]}
    assert listed[waits.pk]["reason_text"] == text
    assert listed[blocker.pk]["reason_text"] is None
    # Another team's reader learns no name: carol sees neither workload at all; an admin
    # sees the name.
    admin = api_for(org.admin).get(f"/api/v1/workloads/{waits.pk}").json()
    assert "blocker" in admin["reason_text"]


def test_a_workload_of_another_team_is_not_named(org, priority_classes):
    theirs = submit(org.carol, name="secret-run", queue="rd/nlp")
    mine = submit(org.alice, name="mine")
    message = f"waiting for {theirs.pk} to stop (grace until {UNTIL})"
    Workload.objects.filter(pk=mine.pk).update(reason_code="WAITING_FOR_PREEMPTION",
                                               reason_message=message)
    text = api_for(org.alice).get(f"/api/v1/workloads/{mine.pk}").json()["reason_text"]
    assert "secret-run" not in text and "a workload of another team" in text


@pytest.mark.django_db(transaction=True)  # the live server reads what the test wrote
def test_allot_why_prints_plain_words(org, priority_classes, cli, tokens):
    _blocker, waits, _message = _waiting(org)
    ran = cli("why", str(waits.pk), token=tokens["alice"])
    assert ran.code == 0, ran.err
    line = next(x for x in ran.out.splitlines() if x.startswith("It waits: "))
    assert "blocker" in line and "2026-12-01 19:47 UTC" in line, line
    assert line.endswith("[WAITING_FOR_PREEMPTION]")
    assert "1796154444" not in ran.out and "grace until" not in ran.out
    data = json.loads(cli("why", str(waits.pk), "-o", "json", token=tokens["alice"]).out)
    assert ISO in data["reason_text"] and data["reason"]["message"].endswith(f"{UNTIL})")
