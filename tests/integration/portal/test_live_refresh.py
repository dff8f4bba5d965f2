"""Live pages refresh at one rate (ALLOT_LIVE_POLL_SECONDS, given to templates by one context
processor), show the time of their data ("as of"), and stop polling once nothing on them can
change (htmx: HTTP 286 and no trigger)."""

import re

import pytest

from scheduling.services import workload_cancel
from tests.integration.portal.conftest import submit
from tests.integration.portal.test_pages import login

pytestmark = pytest.mark.django_db


def _triggers(html: str) -> set[str]:
    # Polling triggers only (the forms' live checks react to input, not to time).
    return {t for t in re.findall(r'hx-trigger="([^"]*)"', html) if "every" in t}


def test_every_live_page_polls_at_the_one_configured_rate(client, org, priority_classes,
                                                          settings):
    settings.ALLOT_LIVE_POLL_SECONDS = 7
    w = submit(org.alice, name="job")
    c = login(client, org.alice)
    pages = {url: c.get(url).content.decode() for url in (
        "/dashboard/", "/tree/", "/workloads/", f"/workloads/{w.pk}/")}
    for url, html in pages.items():
        triggers = _triggers(html)
        assert triggers, f"{url} does not poll"
        assert all(re.fullmatch(r"(load, )?every 7s", t) for t in triggers), (url, triggers)
        assert "updates every 7 s" in html, url
    tree = c.get("/tree/partial/").content.decode()
    assert re.search(r'id="tree-as-of">As of \d\d:\d\d:\d\d UTC', tree)
    assert re.search(r'id="dashboard-as-of">As of \d\d:\d\d:\d\d UTC', pages["/dashboard/"])
    assert re.search(r'id="workloads-as-of">As of \d\d:\d\d:\d\d UTC', pages["/workloads/"])
    assert re.search(r'id="workload-as-of">As of \d\d:\d\d:\d\d UTC',
                     pages[f"/workloads/{w.pk}/"])


def test_polling_stops_when_nothing_can_change(client, org, priority_classes):
    w = submit(org.alice, name="job")
    c = login(client, org.alice)
    live = c.get(f"/workloads/{w.pk}/live/", HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and _triggers(live.content.decode())
    table = c.get("/workloads/", HTTP_HX_REQUEST="true")
    assert table.status_code == 200 and _triggers(table.content.decode())
    workload_cancel(user=org.alice, workload=w)
    # 286: htmx swaps the answer in and stops polling; the answer has no trigger either.
    ended = c.get(f"/workloads/{w.pk}/live/", HTTP_HX_REQUEST="true")
    assert ended.status_code == 286
    html = ended.content.decode()
    assert not _triggers(html) and "it has ended: nothing here can change" in html
    table = c.get("/workloads/", HTTP_HX_REQUEST="true")
    assert table.status_code == 286 and not _triggers(table.content.decode())
    # The full page of an ended workload is a normal 200, without a trigger.
    page = c.get(f"/workloads/{w.pk}/")
    assert page.status_code == 200 and not _triggers(page.content.decode())


def test_the_rate_must_be_at_least_a_second(monkeypatch):
    import importlib

    from django.core.exceptions import ImproperlyConfigured

    import portal.settings

    monkeypatch.setenv("ALLOT_LIVE_POLL_SECONDS", "0")
    with pytest.raises(ImproperlyConfigured, match="ALLOT_LIVE_POLL_SECONDS must be at least 1"):
        importlib.reload(portal.settings)
    monkeypatch.delenv("ALLOT_LIVE_POLL_SECONDS")
    importlib.reload(portal.settings)
