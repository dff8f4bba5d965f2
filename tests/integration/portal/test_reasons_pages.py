"""Reasons in plain words on the pages: the workload page, the lists, the tree editor."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduling.models import Workload
from tests.factories import PASSWORD
from tests.integration.portal.conftest import submit

pytestmark = pytest.mark.django_db


def login(client: Client, user) -> Client:
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _visible_text(html: str) -> str:
    """The page's text outside the details toggles (what a reader sees before opening one)."""
    html = re.sub(r"<details.*?</details>", "", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def test_workload_page_shows_the_reason_in_plain_words_with_details(client, org,
                                                                    priority_classes):
    other = submit(org.alice, name="train-bert")
    w = submit(org.alice, name="waiting")
    until = timezone.now().timestamp() + 125
    Workload.objects.filter(pk=w.pk).update(
        reason_code="WAITING_FOR_PREEMPTION",
        reason_message=f"waiting for {other.pk} to stop (grace until {until:.3f})")
    html = login(client, org.alice).get(f"/workloads/{w.pk}/").content.decode()
    text = _visible_text(html)
    assert "Room is being made for it" in text and "asked to stop" in text
    assert re.search(r"until \d\d:\d\d UTC, in 2 min", text)
    assert f"{until:.3f}"[:10] not in text  # no epoch seconds outside the details
    assert f'<a href="/workloads/{other.pk}/">train-bert</a>' in html
    assert f"waiting for {other.pk} to stop (grace until {until:.3f})" in html  # details
    # the gap between free GPUs and the wait: 32 a100 GPUs free, it asks for 4
    assert "32 of the fleet's 32 a100-80g GPUs are free now; it asks for 4" in html
    assert "room is being made" in html


def test_another_teams_workload_is_not_named(client, org, priority_classes):
    theirs = submit(org.carol, name="secret-nlp", queue="rd/nlp")
    w = submit(org.alice, name="mine")
    Workload.objects.filter(pk=w.pk).update(
        reason_code="NO_CAPACITY",
        reason_message=f"flavor a100-80g: capacity held for starving workload {theirs.pk}")
    html = login(client, org.alice).get(f"/workloads/{w.pk}/").content.decode()
    assert "secret-nlp" not in html
    assert "kept for a workload of another team" in _visible_text(html)


def test_lists_show_plain_reasons_with_the_exact_text_behind_a_toggle(client, org,
                                                                     priority_classes):
    w = submit(org.alice, name="cool")
    until = (timezone.now() + timedelta(minutes=2)).timestamp()
    message = (f"queue rd/vision: a workload was reclaimed; no borrowing admissions until "
               f"{until:.3f} (reclaim_cooldown_s 120)")
    Workload.objects.filter(pk=w.pk).update(reason_code="COOLDOWN", reason_message=message)
    login(client, org.alice)
    for url in ("/workloads/", "/dashboard/"):
        html = client.get(url).content.decode()
        text = _visible_text(html)
        assert "may not borrow again until" in text, url
        assert "reclaim_cooldown_s" not in text, url
        assert message in html, url  # in the details toggle
        assert 'class="small why"' in html, url


def test_tree_editor_errors_are_plain_once_and_beside_their_queue(client, org):
    admin = login(client, org.admin)
    vid = org.vision.pk
    r = admin.post("/queues/check/", {f"c|{vid}|a100-80g|gpu|min": "30",
                                      f"c|{vid}|a100-80g|gpu|max": "32"})
    html = r.content.decode()
    plain = ("The queues under rd are guaranteed 38 a100-80g GPUs together, more than the 32 "
             "rd itself is guaranteed")
    assert html.count(plain) == 1
    cell = re.search(rf'<template><td id="problems-{org.rd.pk}"[^>]*>(.*?)</td></template>',
                     html, re.S)
    assert cell and plain in cell.group(1)
    assert "1 problem, shown beside its queue" in html
    assert "children&#x27;s min" not in _visible_text(html)
    # the saved page (400) shows the same problem in the rd row
    r = admin.post("/queues/", {f"c|{vid}|a100-80g|gpu|min": "30",
                                f"c|{vid}|a100-80g|gpu|max": "32"})
    page = r.content.decode()
    row = re.search(rf'<td id="problems-{org.rd.pk}"[^>]*>(.*?)</td>', page, re.S)
    assert r.status_code == 400 and row and plain in row.group(1)
