"""A researcher's day in a real browser: request GPUs, see why it waits, watch it admitted;
ask for capacity; an admin approves; the queue shows the new min."""

import re
from decimal import Decimal

import pytest

from quotas.models import QuotaEntry
from scheduling.models import Workload
from scheduling.services import workload_cancel
from scheduling.workers.cycle import cycle_run
from tests.factories import PASSWORD
from tests.integration.portal.conftest import org, priority_classes, submission  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def sign_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state("networkidle")


def test_researcher_flow(browser, live_server, org, priority_classes, shots,  # noqa: F811
                         eager_celery):
    from scheduling.services import workload_submit

    base = live_server.url
    # The team's queue is full: a 32-GPU job of bob's holds vision's max (and the whole fleet).
    blocker = workload_submit(user=org.bob, data=submission(
        name="blocker", pods=[{"count": 4, "flavors": ["a100-80g"], "gpus": 8, "cpu": 8,
                               "memory_gib": 64}]), nudge=False)
    cycle_run(wait=True)
    blocker.refresh_from_db()
    assert blocker.state in ("reserved", "running")

    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.goto(f"{base}/login/")
    shots(page, "01-login")
    sign_in(page, base, "alice")
    page.goto(f"{base}/dashboard/")
    assert "rd/vision" in page.content()
    shots(page, "02-dashboard")

    # Request GPUs: the form tells what would happen before submitting.
    page.goto(f"{base}/workloads/new/")
    page.get_by_label("Name", exact=True).fill("resnet-e2e")
    page.get_by_label("Pods", exact=True).fill("1")
    page.get_by_label("GPUs per pod", exact=True).fill("8")
    page.get_by_label("Command", exact=True).fill("python train.py")
    feedback = page.locator("#feedback")
    feedback.get_by_text("8 GPUs in total").wait_for()
    assert "The queue may take 0 more GPUs" in feedback.inner_text()
    shots(page, "03-request-form")
    page.get_by_role("button", name="Submit request").click()
    page.wait_for_url(re.compile(r"/workloads/\d+/$"))
    workload = Workload.objects.get(name="resnet-e2e")
    assert workload.state == "pending"

    # The cycle gives the reason, with numbers; the page shows it without a reload.
    cycle_run(wait=True)
    reason = page.locator("#current-reason")
    reason.wait_for(timeout=10_000)
    text = reason.inner_text()
    # In plain words with the numbers; the engine's exact text behind "details".
    assert "Queue rd/vision may use at most 32 a100-80g GPUs" in text, text
    assert "asks for 8 more" in text and "QUOTA_MAX" not in text, text
    assert "QUOTA_MAX" in reason.locator("details").text_content()
    assert "a100-80g GPUs are free now; it asks for 8" in page.locator("#wait-gap").inner_text()
    shots(page, "04-workload-pending")

    # bob's job ends: the next cycle admits alice's, and the page follows.
    workload_cancel(user=org.bob, workload=blocker)
    cycle_run(wait=True)
    page.locator("#admission").wait_for(timeout=10_000)
    state = page.locator("#workload-state").inner_text()
    assert state in ("Reserved", "Running"), state
    assert "bj" in page.locator("#admission").inner_text()
    shots(page, "05-workload-admitted")

    page.goto(f"{base}/workloads/")
    assert "resnet-e2e" in page.content()
    assert "As of " in page.locator("#workloads-as-of").inner_text()
    shots(page, "06-workload-list")

    # A capacity request: min 8 -> 16 on a100-80g.
    page.goto(f"{base}/capacity-requests/new/?queue=rd/vision")
    page.get_by_label("GPU model").select_option("a100-80g")
    page.get_by_label("New min (guaranteed)").fill("16")
    page.get_by_label("Justification").fill("CVPR deadline: two more nodes for six weeks")
    page.get_by_role("button", name="Submit request").click()
    page.wait_for_url(re.compile(r"/capacity-requests/\d+/$"))
    assert "Submitted" in page.locator("h1").inner_text()
    shots(page, "07-capacity-request")

    # The admin approves from the inbox.
    admin_ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    admin = admin_ctx.new_page()
    sign_in(admin, base, "root")
    admin.goto(f"{base}/approvals/")
    row = admin.locator("tr[id^=cr-]").first
    row.get_by_label("Comment").fill("approved for the deadline")
    shots(admin, "08-approvals")
    row.get_by_role("button", name="Approve").click()
    admin.wait_for_load_state("networkidle")
    assert "approved" in admin.content()
    assert QuotaEntry.objects.get(queue=org.vision, flavor=org.a100).min == Decimal(16)
    admin.goto(f"{base}/queues/")
    # The live check: a broken rule in plain words, once, in its queue's Problems cell.
    admin.locator(f'input[name="c|{org.vision.pk}|a100-80g|gpu|min"]').fill("40")
    cell = admin.locator(f"#problems-{org.rd.pk}")
    cell.get_by_text("The queues under rd are guaranteed").wait_for(timeout=10_000)
    # (40 > vision's max 32 too: two problems, each beside its own queue)
    assert "2 problems, shown beside their queues" in admin.locator("#tree-problems").inner_text()
    assert "is guaranteed 40 a100-80g GPUs but may use at most 32" in admin.locator(
        f"#problems-{org.vision.pk}").inner_text()
    assert admin.get_by_text("The queues under rd are guaranteed").count() == 1
    shots(admin, "09-tree-editor")
    admin.goto(f"{base}/no-such-page/")
    assert admin.locator("h1").inner_text() == "Not found"
    admin.goto(f"{base}/fleet/")
    admin.locator("#chart-allocation .main-svg").first.wait_for(timeout=10_000)
    shots(admin, "10-fleet")

    # alice's queue shows the new min.
    page.goto(f"{base}/queues/q/rd/vision/")
    assert page.locator("#key-a100-80g-gpu .quota-min").inner_text() == "16"
    shots(page, "11-queue")

    # On a phone the dashboard still reads.
    phone = browser.new_context(viewport={"width": 390, "height": 844})
    p = phone.new_page()
    sign_in(p, base, "alice")
    p.goto(f"{base}/dashboard/")
    shots(p, "12-dashboard-phone")
    width = p.evaluate("document.documentElement.scrollWidth")
    assert width <= 400, f"page is {width}px wide on a 390px phone"
    for c in (ctx, admin_ctx, phone):
        c.close()
