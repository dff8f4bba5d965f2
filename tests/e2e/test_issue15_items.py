"""Issue #15, items 1-4 and 6-8, walked in a real Chromium on the demo (seed_demo, with a day of
history) as its users alice (researcher, vision), bob (lead of nlp) and admin, with a
screenshot of each step kept under var/e2e-issue15/ (gitignored; the path is printed):

1. live refresh with an "as of" time at the one configured rate, and no polling once ended;
2. reasons in plain words with a "details" toggle holding the engine's text;
3. approvals with four eyes (nobody decides their own; another team's lead does not see it;
   an admin decides) and the portal's own 404 page;
4. provisional cost while the rollup has not run;
6. the demo's history in the charts;
7. the navigation behind a Menu button on a phone;
8. a chart page's first render under a second.
(Item 5's views are another change's.)
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from portal.demo import USERS
from tests.integration.portal.conftest import priority_classes  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parents[2] / "var" / "e2e-issue15"


@pytest.fixture
def shot():
    """shot(page, "01-live") -> the saved full-page screenshot (var/e2e-issue15/01-live.png)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nissue #15 screenshots: {SHOTS}")  # noqa: T201 (the brief: print the path)

    def take(page, name: str) -> Path:
        path = SHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture
def demo(db, settings, priority_classes):  # noqa: F811
    """The demo with a day of history; the live pages poll every second (so a test sees a
    refresh), and nothing is queued to a broker no worker reads."""
    from portal.demo import seed_demo
    from portal.demo_history import seed_history

    settings.ALLOT_LIVE_POLL_SECONDS = 1
    seed_demo()
    seed_history(timedelta(hours=24))


@pytest.fixture(autouse=True)
def _no_nudges(monkeypatch):
    from scheduling import enqueue

    for name in ("cycle_nudge", "cycle_nudge_at", "outbox_nudge"):
        monkeypatch.setattr(enqueue, name, lambda *a, **k: None)


def _user(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=name)


def sign_in(browser, base: str, username: str, width: int = 1280):
    ctx = browser.new_context(viewport={"width": width, "height": 900 if width > 600 else 844})
    page = ctx.new_page()
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(USERS[username][0])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state("networkidle")
    return ctx, page


def _submit(user, name: str, gpus: int = 4, **over):
    from scheduling.services import workload_submit

    data = {"name": name, "queue": "research/vision/detection", "priority_class": "training",
            "preemptible": True, "checkpoint": True, "image": "registry.local/train:1.4",
            "command": ["python", "train.py"], "duration_hint_s": 3600,
            "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": gpus, "cpu": 8,
                      "memory_gib": 64}], **over}
    return workload_submit(user=user, data=data, nudge=False)


def test_item_1_live_refresh_with_as_of(browser, live_server, demo, shot):
    from scheduling.models import Workload
    from scheduling.services import workload_cancel

    alice = _user("alice")
    live = _submit(alice, "e2e-live")
    ended = _submit(alice, "e2e-ended")
    workload_cancel(user=alice, workload=ended)
    ctx, page = sign_in(browser, live_server.url, "alice")
    page.goto(f"{live_server.url}/dashboard/")
    as_of = page.locator("#dashboard-as-of")
    first = as_of.inner_text()
    assert re.search(r"As of \d\d:\d\d:\d\d UTC · updates every 1 s", first), first
    page.wait_for_function(
        "t => document.querySelector('#dashboard-as-of').innerText !== t", arg=first,
        timeout=10_000)
    shot(page, "01-live-dashboard")
    page.goto(f"{live_server.url}/workloads/{live.pk}/")
    assert page.locator("#workload-live").get_attribute("data-live") == "true"
    before = page.locator("#workload-as-of").inner_text()
    Workload.objects.filter(pk=live.pk).update(reason_code="NO_CAPACITY",
                                               reason_message="no preemptible victims")
    page.locator("#current-reason").wait_for(timeout=10_000)
    assert page.locator("#workload-as-of").inner_text() != before
    shot(page, "01-live-workload")
    # An ended workload's page does not poll, and says why.
    page.goto(f"{live_server.url}/workloads/{ended.pk}/")
    box = page.locator("#workload-live")
    assert box.get_attribute("data-live") == "false" and box.get_attribute("hx-trigger") is None
    assert "nothing here can change" in page.locator("#workload-as-of").inner_text()
    shot(page, "01-ended-no-polling")
    ctx.close()


def test_item_2_reasons_in_plain_words_with_details(browser, live_server, demo, shot):
    from scheduling.models import Workload

    alice = _user("alice")
    blocker = _submit(alice, "e2e-blocker")
    waits = _submit(alice, "e2e-waits")
    until = (timezone.now() + timedelta(minutes=2)).timestamp()
    message = f"waiting for {blocker.pk} to stop (grace until {until})"
    Workload.objects.filter(pk=waits.pk).update(reason_code="WAITING_FOR_PREEMPTION",
                                                reason_message=message)
    ctx, page = sign_in(browser, live_server.url, "alice")
    page.goto(f"{live_server.url}/workloads/{waits.pk}/")
    reason = page.locator("#current-reason")
    plain = reason.locator(".reason-plain").inner_text()
    assert "e2e-blocker" in plain and "in 2 min" in plain or "in 1 min" in plain, plain
    assert str(int(until)) not in plain
    details = reason.locator("details.reason-details")
    assert not details.locator("code").is_visible()
    shot(page, "02-reason-plain")
    details.locator("summary").click()
    assert details.locator("code").inner_text() == "WAITING_FOR_PREEMPTION"
    assert str(int(until)) in details.inner_text()
    shot(page, "02-reason-details")
    # The link goes to the workload by name.
    reason.get_by_role("link", name="e2e-blocker").click()
    page.wait_for_url(re.compile(rf"/workloads/{blocker.pk}/$"))
    ctx.close()


def test_item_3_approvals_with_four_eyes(browser, live_server, demo, shot):
    from scheduling.models import Workload

    alice = _user("alice")
    big = _submit(alice, "e2e-long-run", duration_hint_s=100 * 3600)
    big.refresh_from_db()
    assert big.needs_approval, "a 100 h workload waits for an approval"
    base = live_server.url
    # bob leads nlp: alice's vision request is not his to decide.
    ctx, page = sign_in(browser, base, "bob")
    page.goto(f"{base}/approvals/")
    assert "e2e-long-run" not in page.content()
    shot(page, "03-bob-inbox-without-it")
    page.goto(f"{base}/no-such-page/")
    assert page.locator("h1").inner_text().strip() != "Page not found at /no-such-page/"
    assert "Traceback" not in page.content() and "URLconf" not in page.content()
    shot(page, "03-own-404")
    ctx.close()
    # The requester cannot approve her own request.
    ctx, page = sign_in(browser, base, "alice")
    page.goto(f"{base}/approvals/")
    assert not page.locator(f"form[action='/approvals/workloads/{big.pk}/approve/']").count()
    ctx.close()
    # An admin approves it from the inbox.
    ctx, page = sign_in(browser, base, "admin")
    page.goto(f"{base}/approvals/")
    row = page.locator("tr", has_text="e2e-long-run")
    assert row.count() == 1
    shot(page, "03-admin-inbox")
    row.get_by_role("button", name=re.compile("Approve")).click()
    page.wait_for_load_state("networkidle")
    shot(page, "03-admin-approved")
    big.refresh_from_db()
    assert not big.needs_approval or Workload.objects.get(pk=big.pk).state != "pending"
    ctx.close()


def test_item_4_provisional_cost(browser, live_server, demo, shot):
    from scheduling.models import Admission, Cluster, Workload
    from tests.factories import workloads_set_state

    alice = _user("alice")
    w = _submit(alice, "e2e-costly", gpus=8)
    since = timezone.now() - timedelta(minutes=40)
    workloads_set_state(Workload.objects.filter(pk=w.pk), "running", state_changed_at=since)
    cluster = Cluster.objects.order_by("name").first()
    node = cluster.nodes.filter(flavor__name="a100-80g").first()
    Admission.objects.create(workload=w, cluster=cluster, flavor=node.flavor, nodes=[node.name],
                             gpus=8, reserved_at=since, running_at=since)
    ctx, page = sign_in(browser, live_server.url, "alice")
    page.goto(f"{live_server.url}/workloads/{w.pk}/")
    so_far = page.locator(".cost-so-far").inner_text()
    assert not so_far.startswith("0.00"), so_far
    assert "provisional until the hourly rollup" in page.locator("#cost-provisional").inner_text()
    shot(page, "04-provisional-cost")
    page.goto(f"{live_server.url}/dashboard/")
    assert page.locator(".mtd-spent").first.inner_text() != ""
    shot(page, "04-dashboard-month-to-date")
    ctx.close()


def test_item_6_demo_history_in_the_charts(browser, live_server, demo, shot):
    ctx, page = sign_in(browser, live_server.url, "admin")
    page.goto(f"{live_server.url}/billing/")
    spend = json.loads(page.locator("#chart-spend-data").inner_text())
    values = [v for trace in spend["data"] for v in trace.get("y", []) if v]
    assert values, "a day of history gives the spend chart values"
    page.locator("#chart-spend .main-svg").first.wait_for(timeout=15_000)
    shot(page, "06-billing-history")
    page.goto(f"{live_server.url}/queues/q/research/vision/")
    chart = json.loads(page.locator("script[id$='-24h-data']").first.inner_text())
    assert any(any(v for v in trace.get("y", []) if v) for trace in chart["data"])
    shot(page, "06-queue-history")
    ctx.close()


def test_item_7_phone_menu(browser, live_server, demo, shot):
    ctx, page = sign_in(browser, live_server.url, "bob", width=390)
    page.goto(f"{live_server.url}/dashboard/")
    nav, menu = page.locator("#main-nav"), page.get_by_role("button", name="Menu")
    assert not nav.is_visible() and menu.get_attribute("aria-expanded") == "false"
    shot(page, "07-phone-folded")
    menu.click()
    assert nav.is_visible() and menu.get_attribute("aria-expanded") == "true"
    shot(page, "07-phone-menu-open")
    ctx.close()


def test_item_8_chart_pages_render_within_a_second(browser, live_server, demo, shot):
    """The chart pages load the partial plotly bundle (not the 4.8 MB full one) and paint
    before their charts are drawn. First contentful paint and the server's time are printed
    for a first visit (bundle not cached) and a second; a second visit must paint within a
    second, checked when the machine is not overloaded (load average at most its cores: the
    e2e browser shares it with the live server and whatever else runs)."""
    ctx, page = sign_in(browser, live_server.url, "admin")
    timing_js = """() => {
        const n = performance.getEntriesByType('navigation')[0];
        const p = performance.getEntriesByName('first-contentful-paint')[0];
        return [Math.round(p ? p.startTime : n.domContentLoadedEventEnd),
                Math.round(n.responseEnd - n.requestStart)]; }"""
    cold, warm = {}, {}
    for url in ("/fleet/", "/billing/", "/queues/q/research/vision/"):
        for timings in (cold, warm):
            page.goto(f"{live_server.url}{url}")
            page.wait_for_load_state("load")
            timings[url] = page.evaluate(timing_js)
        bundles = page.evaluate("() => Array.from(document.scripts).map(s => s.src)"
                                ".filter(s => s.includes('plotly'))")
        assert bundles and all("plotly-basic" in b for b in bundles), bundles
        shot(page, f"08-render{url.strip('/').replace('/', '-')}")
    load = os.getloadavg()[0]
    print(f"first paint / server ms, first visit: {cold}; second: {warm}; "  # noqa: T201
          f"load average {load:.1f} on {os.cpu_count()} cores")
    if load <= (os.cpu_count() or 1):
        assert all(paint < 1000 for paint, _server in warm.values()), warm
    ctx.close()
