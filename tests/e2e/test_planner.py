"""The capacity planner in a real browser: an admin uploads a Philly-style trace, edits a
queue's max, watches the replay finish and sees the four charts drawn; the recommendations
page."""

import pytest

from scheduling.models import TraceReplay
from tests.e2e.test_portal_flow import sign_in
from tests.integration.scheduling.planner.test_trace_replay import PHILLY
from tests.integration.scheduling.world import make_world

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_admin_replays_a_trace_and_sees_the_plots(browser, live_server, shots, eager_celery):
    make_world()
    base = live_server.url
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, base, "root")
    page.goto(f"{base}/planner/replay/")
    page.set_input_files("#trace-file", files=[{
        "name": "philly.csv", "mimeType": "text/csv", "buffer": PHILLY.encode()}])
    page.get_by_label("max of rd/vision a100-80g/gpu").fill("16")
    shots(page, "planner-01-upload")
    page.click("#start-trace-replay")
    page.wait_for_selector("#trace-replay-summary", timeout=60_000)
    for chart in ("waits", "wait-dist", "allocation", "fairness"):
        page.wait_for_selector(f"#chart-{chart} .main-svg", timeout=20_000)
    shots(page, "planner-02-result")
    run = TraceReplay.objects.get()
    assert run.state == "done" and run.changes["quotas"][0]["max"] == 16
    assert "rd/vision" in page.inner_text("#trace-replay-queues")
    # No usage yet: every queue with a quota is listed, with no demand (min 0, max kept).
    page.goto(f"{base}/planner/recommendations/")
    page.wait_for_selector("#chart-profile-0 .main-svg", timeout=20_000)
    assert "rd/vision" in page.inner_text("#recommendations")
    shots(page, "planner-03-recommendations")
    assert errors == []
    ctx.close()
