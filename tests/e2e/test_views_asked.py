"""The views users asked for (issue 15, item 5) in a real Chromium, with screenshots kept in
test-artifacts/e2e/ (not committed): the header's search, a queue's pending list, sorting a
list and its CSV link, who lends to whom, the profile's time zone, the notification bell with
mark-read, and a workload's utilisation card."""

import re

import pytest

from scheduling.models import WorkloadEvent
from scheduling.workers.cycle import cycle_run
from tests.e2e.test_portal_flow import sign_in
from tests.integration.portal.conftest import org, priority_classes, submission  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_views_users_asked_for(browser, live_server, org, priority_classes,  # noqa: F811
                                   eager_celery, shots):
    from django.utils import timezone

    from scheduling import extensions
    from scheduling.services import workload_submit

    running = workload_submit(user=org.alice, data=submission(
        name="running-big", pods=[{"count": 3, "flavors": ["a100-80g"], "gpus": 4, "cpu": 8,
                                   "memory_gib": 64}]), nudge=False)
    cycle_run(wait=True)  # 12 of vision's min 8: it borrows 4, lent by nlp's idle guarantee
    waiting = workload_submit(user=org.alice, data=submission(name="waiting", pods=[
        {"count": 2, "flavors": ["a100-80g"], "gpus": 8, "cpu": 8, "memory_gib": 64}]),
        nudge=False)
    base = live_server.url
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    sign_in(page, base, "alice")

    # Search from the header: grouped results, only what alice may see.
    page.get_by_label("Search workloads, queues and users").fill("running")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    page.wait_for_load_state("networkidle")
    assert page.url.startswith(f"{base}/search/?q=running")
    assert page.locator("#search-workloads a", has_text="running-big").count() == 1
    shots(page, "views-01-search")

    # The queue's pending list: the waiting workload first in its queue.
    page.goto(f"{base}/queues/q/rd/vision/", wait_until="networkidle")
    row = page.locator(f"#pending-{waiting.pk}")
    assert row.locator(".pos-queue").inner_text() == "1"
    shots(page, "views-02-pending-list")

    # Sorting the workloads list by name, then descending; the CSV link keeps the sort.
    page.goto(f"{base}/workloads/", wait_until="networkidle")
    page.get_by_role("link", name=re.compile(r"^Name")).first.click()
    page.wait_for_load_state("networkidle")
    header = page.locator("th", has=page.get_by_role("link", name=re.compile(r"^Name")))
    assert header.get_attribute("aria-sort") == "ascending"
    names = page.locator('td[data-label="Name"] a').all_inner_texts()
    assert names == sorted(names)
    page.get_by_role("link", name=re.compile(r"^Name")).first.click()
    page.wait_for_load_state("networkidle")
    assert header.get_attribute("aria-sort") == "descending"
    assert "sort=-name" in page.locator("a.csv-link").get_attribute("href")
    shots(page, "views-03-sorted-list")

    # Who lends to whom, reached from the tree.
    page.goto(f"{base}/tree/", wait_until="networkidle")
    page.locator("#borrowing-link").click()
    page.wait_for_load_state("networkidle")
    # rd is alice's department, not hers to see: the group is named by its borrower.
    group = page.locator('section.borrow-group[data-flavor="a100-80g"]').filter(
        has=page.locator('tr.borrower[data-path="rd/vision"]'))
    assert group.locator("tr.borrower .b-borrowed").inner_text() == "4"
    assert group.locator("tr.lender .l-lent").inner_text() == "4"
    shots(page, "views-04-borrowing")

    # The workload page: utilisation (no telemetry yet: no hourly rollup has run).
    page.goto(f"{base}/workloads/{running.pk}/", wait_until="networkidle")
    assert page.locator("#util-none").is_visible()
    shots(page, "views-05-utilisation")

    # The profile: a time zone, then the workload page shows times in it.
    page.locator("a.who").click()
    page.wait_for_load_state("networkidle")
    page.get_by_label("Time zone").select_option("Asia/Kolkata")
    page.get_by_label("My workload finished").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Save settings").click()
    page.wait_for_load_state("networkidle")
    assert "IST" in page.locator("#time-now").inner_text()
    shots(page, "views-06-profile")
    page.goto(f"{base}/workloads/{running.pk}/", wait_until="networkidle")
    submitted = "xpath=//dt[normalize-space()='Submitted']/following-sibling::dd[1]"
    assert "IST" in page.locator(submitted).inner_text()

    # Notifications: a preemption is told under the bell (finished is muted); mark read.
    extensions.events_written([
        WorkloadEvent(workload=running, at=timezone.now(), type="preempted", message="reclaim"),
        WorkloadEvent(workload=running, at=timezone.now(), type="finished", message="done")])
    page.goto(f"{base}/dashboard/", wait_until="networkidle")
    assert page.locator("#notifications-bell .badge").inner_text().startswith("1")
    page.locator("#notifications-bell").click()
    page.wait_for_load_state("networkidle")
    assert page.locator("tr.unread").count() == 1
    assert "was preempted" in page.locator("tr.unread").inner_text()
    shots(page, "views-07-notifications")
    with page.expect_navigation():
        page.get_by_role("button", name=re.compile("^Mark read")).click()
    page.wait_for_load_state("networkidle")
    assert page.locator("tr.unread").count() == 0
    assert page.locator("#notifications-bell .badge").count() == 0
    ctx.close()
