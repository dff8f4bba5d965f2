"""Phone and keyboard: every page checked by axe-core (vendored, tests/e2e/vendor/) in a real
Chromium at desktop and phone width with no serious or critical violation, no page wider
than a phone, the navigation folded behind its Menu button, filters behind their toggle, every
control of a page in the tab order, and a request submitted with the keyboard alone."""

import re
from pathlib import Path

import pytest

from scheduling.models import Workload
from scheduling.workers.cycle import cycle_run
from tests.e2e.test_portal_flow import sign_in
from tests.integration.portal.conftest import org, priority_classes, submission  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AXE = (Path(__file__).resolve().parent / "vendor" / "axe.min.js").read_text()
AXE_RUN = """async () => {
  const r = await axe.run(document, {runOnly: {type: 'tag',
    values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}});
  return r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => v.impact + ' ' + v.id + ': ' + v.help + ' at ' +
         v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', '));
}"""
RESEARCHER_PAGES = ["/dashboard/", "/workloads/", "/workloads/new/", "/workloads/{pk}/",
                    "/queues/", "/queues/q/rd/vision/", "/capacity-requests/",
                    "/capacity-requests/new/", "/fleet/", "/billing/", "/history/",
                    "/account/tokens/",
                    # the views users asked for (issue 15, item 5)
                    "/account/", "/account/notifications/", "/search/?q=run",
                    "/queues/borrowing/", "/tree/?sort=-used", "/workloads/?sort=name"]
ADMIN_PAGES = ["/approvals/", "/queues/", "/policies/", "/policies/new/", "/billing/rates/",
               "/billing/invoices/", "/billing/reconciliation/", "/fleet/bj/",
               "/queues/borrowing/", "/history/?sort=kind", "/approvals/?sort=-name"]
# Visible, enabled controls a keyboard user must be able to reach with Tab.
CONTROLS_JS = """() => Array.from(document.querySelectorAll(
    'a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex="0"]'))
  .filter(e => !e.disabled && e.offsetParent !== null && e.getClientRects().length
          && getComputedStyle(e).visibility !== 'hidden' && !e.closest('.modebar')
          && !e.closest('[aria-hidden=true]'))
  .map(e => e.outerHTML.slice(0, 120))"""
ACTIVE_JS = "() => document.activeElement ? document.activeElement.outerHTML.slice(0, 120) : ''"


@pytest.fixture
def data(org, priority_classes, eager_celery):  # noqa: F811
    from scheduling.services import workload_submit

    running = workload_submit(user=org.alice, data=submission(name="running"), nudge=False)
    cycle_run(wait=True)
    workload_submit(user=org.alice, data=submission(name="waiting", pods=[
        {"count": 8, "flavors": ["a100-80g"], "gpus": 8, "cpu": 8, "memory_gib": 64}]),
        nudge=False)
    return running


def _axe(page) -> list[str]:
    page.add_script_tag(content=AXE)
    return page.evaluate(AXE_RUN)


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_passes_axe_and_fits(browser, live_server, org, data, width, shots):  # noqa: F811
    base = live_server.url
    problems: list[str] = []
    for username, pages in (("alice", RESEARCHER_PAGES), ("root", ADMIN_PAGES)):
        # axe is injected as an inline script, which the pages' CSP (rightly) refuses.
        ctx = browser.new_context(viewport={"width": width, "height": 900}, bypass_csp=True)
        page = ctx.new_page()
        sign_in(page, base, username)
        for url in pages:
            url = url.format(pk=data.pk)
            response = page.goto(f"{base}{url}", wait_until="networkidle")
            assert response.status == 200, (username, url, response.status)
            problems += [f"{username} {url} @{width}: {v}" for v in _axe(page)]
            scroll = page.evaluate("document.documentElement.scrollWidth")
            if scroll > width + 10:
                problems.append(f"{username} {url} @{width}: page is {scroll}px wide")
        ctx.close()
    assert not problems, "\n".join(problems)


def test_phone_navigation_and_filters_fold(browser, live_server, org, data, shots):  # noqa: F811
    base = live_server.url
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = ctx.new_page()
    sign_in(page, base, "alice")
    page.goto(f"{base}/workloads/")
    nav, menu = page.locator("#main-nav"), page.get_by_role("button", name="Menu")
    assert not nav.is_visible() and menu.get_attribute("aria-expanded") == "false"
    filters = page.locator("details.filters-fold")
    assert not filters.locator("form").is_visible()  # folded on a phone
    # The first screen shows the list, not the filter form.
    assert page.get_by_role("link", name="running").bounding_box()["y"] < 844
    shots(page, "a11y-01-phone-folded")
    menu.click()
    assert nav.is_visible() and menu.get_attribute("aria-expanded") == "true"
    assert page.get_by_role("link", name="Fleet").is_visible()
    shots(page, "a11y-02-phone-menu")
    page.keyboard.press("Escape")
    assert not nav.is_visible() and menu.get_attribute("aria-expanded") == "false"
    filters.locator("summary").click()
    assert filters.locator("form").is_visible()
    # A filter in the address opens them at once.
    page.goto(f"{base}/workloads/?state=pending")
    assert page.locator("details.filters-fold form").is_visible()
    # On a wide screen they start open and the Menu button is not shown.
    wide = browser.new_context(viewport={"width": 1280, "height": 900})
    desk = wide.new_page()
    sign_in(desk, base, "alice")
    desk.goto(f"{base}/workloads/")
    assert desk.locator("details.filters-fold form").is_visible()
    assert not desk.get_by_role("button", name="Menu").is_visible()
    assert desk.locator("#main-nav").is_visible()
    for c in (ctx, wide):
        c.close()


def _tab_walk(page, limit: int = 400) -> set[str]:
    seen: set[str] = set()
    page.locator("body").focus()
    for _ in range(limit):
        page.keyboard.press("Tab")
        active = page.evaluate(ACTIVE_JS)
        if active in seen and len(seen) > 3:
            break  # back at the start: the tab order has been walked round
        seen.add(active)
    return seen


@pytest.mark.parametrize("username,url", [("alice", "/workloads/new/"),
                                          ("alice", "/dashboard/"),
                                          ("root", "/approvals/")])
def test_every_control_is_in_the_tab_order(browser, live_server, org, data, username, url):  # noqa: F811
    from decimal import Decimal

    from quotas.capacity.services import capacity_request_submit

    capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100, resource="gpu",
                            min=Decimal(16), justification="deadline")
    base = live_server.url
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    sign_in(page, base, username)
    page.goto(f"{base}{url}", wait_until="networkidle")
    controls = set(page.evaluate(CONTROLS_JS))
    assert controls
    missing = controls - _tab_walk(page)
    assert not missing, f"not reachable with Tab on {url}: {sorted(missing)}"
    ctx.close()


def test_a_request_submitted_with_the_keyboard_alone(browser, live_server, org, data):  # noqa: F811
    base = live_server.url
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    sign_in(page, base, "alice")
    page.goto(f"{base}/workloads/new/", wait_until="networkidle")
    page.locator("body").focus()

    def tab_to(label: str) -> None:
        target = page.get_by_label(label, exact=True)
        for _ in range(80):
            page.keyboard.press("Tab")
            if target.evaluate("e => e === document.activeElement"):
                return
        raise AssertionError(f"{label!r} is not reachable with Tab")

    tab_to("Name")
    page.keyboard.type("keyboard-only")
    tab_to("GPUs per pod")
    page.keyboard.press("Control+A")
    page.keyboard.type("1")
    tab_to("Command")
    page.keyboard.type("python train.py")
    page.locator("#feedback").get_by_text("1 GPUs in total").or_(
        page.locator("#feedback").get_by_text("1 GPU in total")).wait_for()
    submit = page.get_by_role("button", name="Submit request")
    for _ in range(40):
        page.keyboard.press("Tab")
        if submit.evaluate("e => e === document.activeElement"):
            break
    else:
        raise AssertionError("the Submit request button is not reachable with Tab")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/workloads/\d+/$"))
    assert Workload.objects.filter(name="keyboard-only", owner=org.alice).exists()
    ctx.close()
