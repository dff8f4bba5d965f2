"""The views users asked for (issue 15, item 5): a queue's pending list with places, who lends
to whom, a workload's GPU utilisation, sortable lists with CSV export, global search, the time
zone setting and notifications with per-kind mute; pages and API, including bad input."""

import csv
import io
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import timezone

from portal.models import Notification, UserSettings
from scheduling.models import Admission, Workload, WorkloadEstimate, WorkloadEvent
from scheduling.selectors import workload_queue_position
from tests.factories import PASSWORD, workloads_set_state
from tests.integration.portal.conftest import api_for, held, submit

pytestmark = pytest.mark.django_db


def _pods(gpus):
    return [{"count": 1, "flavors": ["a100-80g"], "gpus": gpus, "cpu": 8, "memory_gib": 64}]


def _admit(workload, cluster, flavor):
    now = timezone.now()
    gpus = sum(p.count * p.gpus for p in workload.pod_sets.all())
    workloads_set_state(Workload.objects.filter(pk=workload.pk), "running", state_changed_at=now)
    return Admission.objects.create(workload=workload, cluster=cluster, flavor=flavor,
                                    nodes=["bj-a100-0"], gpus=gpus, reserved_at=now,
                                    running_at=now)


def _login(client, user):
    assert client.login(username=user.username, password=PASSWORD)


def _csv(response):
    """A list's CSV export: streamed (not built in memory), read as rows."""
    assert response["Content-Type"].startswith("text/csv"), response.status_code
    assert response.streaming
    body = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(body)))


# --- 1. a queue's pending list ---------------------------------------------------------------

def test_pending_list_is_in_admission_order_with_the_selectors_positions(client, org,
                                                                         priority_classes):
    low = submit(org.alice, name="low", priority_class="batch-low", pods=_pods(2))
    first = submit(org.alice, name="first", pods=_pods(4))
    second = submit(org.bob, name="second", pods=_pods(1))
    other = submit(org.carol, name="nlp-one", queue="rd/nlp", pods=_pods(1))
    now = timezone.now()
    for w, minutes in ((first, 5), (second, 10), (other, 7)):
        WorkloadEstimate.objects.create(workload=w, start=now + timedelta(minutes=minutes),
                                        computed_at=now)
    _login(client, org.alice)
    html = client.get("/queues/q/rd/vision/").content.decode()
    table = re.search(r'<table class="stack" id="pending-table">.*?</table>', html, re.S).group(0)
    ids = [int(i) for i in re.findall(r'<tr id="pending-(\d+)">', table)]
    assert ids == [first.pk, second.pk, low.pk]  # priority, then submission
    for w in (first, second, low):
        row = re.search(rf'<tr id="pending-{w.pk}">.*?</tr>', table, re.S).group(0)
        in_queue = re.search(r'class="num pos-queue">(\d+)<', row).group(1)
        assert int(in_queue) == workload_queue_position(Workload.objects.get(pk=w.pk))[
            "in_queue"]
    # Across the fleet, by the forecast: first (5 min), nlp-one (7), second (10); low none.
    fleet = {int(i): p for i, p in re.findall(
        r'<tr id="pending-(\d+)">.*?class="num pos-fleet">([^<]+)<', table, re.S)}
    assert fleet == {first.pk: "1", second.pk: "3", low.pk: "—"}

    api = api_for(org.alice).get("/api/v1/queues/rd/vision/pending").json()
    assert [r["id"] for r in api["results"]] == ids
    assert [r["position_in_queue"] for r in api["results"]] == [1, 2, 3]
    assert [r["position_in_fleet"] for r in api["results"]] == [1, 3, None]
    assert api["total"] == 3
    # Another team's queue is 404 (the API's rule), on the page and in the API.
    assert api_for(org.carol).get("/api/v1/queues/rd/vision/pending").status_code == 404
    assert api_for(org.alice).get("/api/v1/queues/rd/nope/pending").status_code == 404


def test_pending_list_keeps_other_teams_places_without_their_names(client, org,
                                                                     priority_classes):
    org.nlp_team.queues.add(org.vision)  # a queue two teams share
    theirs = submit(org.carol, name="secret-nlp", pods=_pods(1))
    assert Workload.objects.get(pk=theirs.pk).team == org.nlp_team
    submit(org.alice, name="mine", pods=_pods(1))
    data = api_for(org.alice).get("/api/v1/queues/rd/vision/pending").json()
    assert [(r["name"], r["position_in_queue"]) for r in data["results"]] == [
        (None, 1), ("mine", 2)]
    _login(client, org.alice)
    html = client.get("/queues/q/rd/vision/").content.decode()
    assert "secret-nlp" not in html and "a workload of another team" in html
    # An admin reads the whole department's list, each in its leaf's order.
    data = api_for(org.admin).get("/api/v1/queues/rd/pending").json()
    assert [r["name"] for r in data["results"]] == ["secret-nlp", "mine"]


# --- 2. who lends to whom ----------------------------------------------------------------------

def test_borrowing_view_shows_the_trees_borrowed_and_lent(client, org, priority_classes):
    big = submit(org.alice, name="big", pods=[{"count": 3, "flavors": ["a100-80g"], "gpus": 4,
                                               "cpu": 8, "memory_gib": 64}])
    _admit(big, org.cluster, org.a100)  # 12 used of min 8: borrows 4; nlp idle: lends 4
    admin = api_for(org.admin)
    vision = admin.get("/api/v1/queues/rd/vision").json()["quota"]["a100-80g"]["gpu"]
    nlp = admin.get("/api/v1/queues/rd/nlp").json()["quota"]["a100-80g"]["gpu"]
    groups = admin.get("/api/v1/borrowing").json()["results"]
    group = next(g for g in groups if g["parent_path"] == "rd" and g["flavor"] == "a100-80g")
    assert [(b["queue"], Decimal(b["borrowed"])) for b in group["borrowers"]] == [
        ("rd/vision", Decimal(str(vision["borrowed"])))]
    assert [(x["queue"], Decimal(x["lent"])) for x in group["lenders"]] == [
        ("rd/nlp", Decimal(str(nlp["lent"])))]
    assert Decimal(group["borrowed"]) == 4 and Decimal(group["from_above"]) == 0

    _login(client, org.admin)
    assert 'id="borrowing-link"' in client.get("/queues/").content.decode()
    html = client.get("/queues/borrowing/").content.decode()
    section = re.search(r'data-parent="rd" data-flavor="a100-80g">.*?</section>', html,
                        re.S).group(0)
    assert re.search(r'data-path="rd/vision">.*?class="num b-borrowed">4<', section, re.S)
    assert re.search(r'data-path="rd/nlp">.*?class="num l-lent">4<', section, re.S)
    # alice may not see nlp: the lender is "another team's queue".
    _login(client, org.alice)
    html = client.get("/queues/borrowing/").content.decode()
    assert "another team's queue" in html and "rd/nlp</a>" not in html
    assert 'id="borrowing-link"' in client.get("/tree/").content.decode()


def test_lent_is_attributed_once_when_several_siblings_are_idle(client, org, priority_classes):
    """vision borrows 4 while nlp, speech and audio are idle (min 8 each): the 4 lent are shared
    among them (docs/quota-tree.md: 2, 1, 1), the same on the tree page, its CSV, the borrowing
    page and both APIs; they add up to what is borrowed, not 4 per idle sibling."""
    from tests.factories import QueueFactory, QuotaEntryFactory

    for name in ("speech", "audio"):
        queue = QueueFactory(name=name, parent=org.rd, namespace=f"rd-{name}")
        QuotaEntryFactory(queue=queue, flavor=org.a100, min=Decimal(8), max=Decimal(32))
    big = submit(org.alice, name="big", pods=[{"count": 3, "flavors": ["a100-80g"], "gpus": 4,
                                               "cpu": 8, "memory_gib": 64}])
    _admit(big, org.cluster, org.a100)
    expected = {"rd/audio": Decimal(2), "rd/nlp": Decimal(1), "rd/speech": Decimal(1)}
    admin = api_for(org.admin)
    listed = {p: admin.get(f"/api/v1/queues/{p}").json()["quota"]["a100-80g"]["gpu"]
              for p in ("rd/vision", "rd/nlp", "rd/speech", "rd/audio")}
    assert {p: Decimal(str(c["lent"])) for p, c in listed.items() if c["lent"]} == expected
    assert sum(Decimal(str(c["lent"])) for c in listed.values()) == Decimal(
        str(listed["rd/vision"]["borrowed"])) == 4
    group = next(g for g in admin.get("/api/v1/borrowing").json()["results"]
                 if g["parent_path"] == "rd")
    assert {x["queue"]: Decimal(x["lent"]) for x in group["lenders"]} == expected
    assert Decimal(group["lent"]) == Decimal(group["borrowed"]) == 4
    assert Decimal(group["from_above"]) == 0

    _login(client, org.admin)
    rows = _csv(client.get("/tree/?format=csv"))
    lent_col = rows[0].index("a100-80g/gpu lent")
    assert {r[0]: Decimal(r[lent_col]) for r in rows[1:] if r[0] in expected} == expected
    html = client.get("/tree/").content.decode()
    for path, lent in expected.items():
        row = re.search(rf'<tr data-path="{path}">.*?</tr>', html, re.S).group(0)
        assert re.findall(r'<td class="num">([\d.]+)</td>', row)[1] == str(lent), row
    page = client.get("/queues/borrowing/").content.decode()
    for path, lent in expected.items():
        assert re.search(rf'data-path="{path}">.*?class="num l-lent">{lent}<', page, re.S)


def test_borrowing_view_says_when_nobody_borrows(client, org):
    _login(client, org.alice)
    assert 'id="no-borrowing"' in client.get("/queues/borrowing/").content.decode()


# --- 3. GPU utilisation -----------------------------------------------------------------------

def _record(workload, hour, *, active, gpu_hours=Decimal(4), gap=Decimal(0), minutes=60):
    from billing.models import UsageRecord

    return UsageRecord.objects.create(
        hour=hour, admission_id=1, workload_id=workload.pk, workload_name=workload.name,
        phase="running", start=hour, end=hour + timedelta(hours=1), cluster="bj",
        flavor="a100-80g", queue=workload.queue.path, gpus=Decimal(4), cpu=Decimal(8),
        memory_gib=Decimal(64), gpu_hours=gpu_hours, core_hours=Decimal(8),
        memory_gib_hours=Decimal(64), active_gpu_hours=active, gap_gpu_hours=gap,
        expected_minutes=60, telemetry_minutes=minutes if active is not None else 0,
        gap_minutes=0 if active is not None else 60, computed_at=timezone.now())


def test_utilisation_per_hour_and_overall_equal_the_cost_cards_efficiency(client, org,
                                                                         priority_classes):
    from billing.selectors import workload_cost

    w = submit(org.alice, name="busy", pods=_pods(4))
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    _record(w, hour, active=Decimal(3))        # 75 %
    _record(w, hour + timedelta(hours=1), active=Decimal(2))  # 50 %
    _record(w, hour + timedelta(hours=2), active=None, gap=Decimal(4))  # no telemetry
    data = api_for(org.alice).get(f"/api/v1/workloads/{w.pk}/utilisation").json()
    assert [h["utilisation"] for h in data["hours"]] == ["0.7500", "0.5000", None]
    assert Decimal(data["overall"]) == Decimal("0.625")
    assert Decimal(data["overall"]) == workload_cost(w)["efficiency"]
    _login(client, org.alice)
    html = client.get(f"/workloads/{w.pk}/").content.decode()
    assert re.search(r'id="util-overall">62%<', html) or re.search(
        r'id="util-overall">63%<', html)
    assert "no telemetry" in html
    assert api_for(org.carol).get(f"/api/v1/workloads/{w.pk}/utilisation").status_code == 404


def test_a_workload_without_telemetry_says_so(client, org, priority_classes):
    w = submit(org.alice, name="quiet", pods=_pods(1))
    _login(client, org.alice)
    html = client.get(f"/workloads/{w.pk}/").content.decode()
    assert 'id="util-none"' in html and "No telemetry" in html
    data = api_for(org.alice).get(f"/api/v1/workloads/{w.pk}/utilisation").json()
    assert data["telemetry"] is False and data["overall"] is None


# --- 4. sortable columns and CSV ---------------------------------------------------------------

def test_workload_list_sorts_by_whitelisted_columns_and_exports_csv(client, org,
                                                                    priority_classes):
    for name in ("bravo", "alpha", "charlie"):
        submit(org.alice, name=name, pods=_pods(1))
    done = submit(org.alice, name="delta", pods=_pods(1))
    workloads_set_state(Workload.objects.filter(pk=done.pk), "finished")
    _login(client, org.alice)

    def names(query):
        html = client.get(f"/workloads/?{query}").content.decode()
        return re.findall(r'<td data-label="Name"><a href="/workloads/\d+/">([^<]+)</a>', html)

    assert names("sort=name") == ["alpha", "bravo", "charlie", "delta"]
    assert names("sort=-name") == ["delta", "charlie", "bravo", "alpha"]
    html = client.get("/workloads/?sort=name").content.decode()
    assert re.search(r'<th aria-sort="ascending" scope="col"><a class="sort" href="\?sort=-name"',
                     html)
    assert 'aria-sort="none" scope="col"><a class="sort" href="?sort=queue"' in html
    bad = client.get("/workloads/?sort=password")
    assert bad.status_code == 400
    assert "sort: &#x27;password&#x27; is not a column of this list; one of name, queue" in (
        bad.content.decode())
    rows = _csv(client.get("/workloads/?format=csv&state=pending&sort=-name"))
    assert rows[0][:3] == ["id", "name", "queue"]
    assert [r[1] for r in rows[1:]] == ["charlie", "bravo", "alpha"]  # the filter holds
    assert client.get("/workloads/?format=csv&sort=nope").status_code == 400


def test_tree_invoices_history_and_approvals_sort_and_export(client, org, priority_classes):
    big = submit(org.alice, name="big", pods=_pods(4))
    _admit(big, org.cluster, org.a100)
    _login(client, org.admin)
    html = client.get("/tree/?sort=-used").content.decode()
    paths = re.findall(r'<tr data-path="([^"]+)">', html)
    assert paths[:2] == ["rd", "rd/vision"] and paths[-1] == "rd/nlp"
    rows = _csv(client.get("/tree/?format=csv"))
    assert rows[0][:3] == ["queue", "depth", "namespace"]
    vision = next(r for r in rows if r[0] == "rd/vision")
    assert vision[rows[0].index("a100-80g/gpu used")] == "4"
    assert client.get("/tree/?sort=secret").status_code == 400

    assert client.get("/billing/invoices/?sort=-total").status_code == 200
    assert _csv(client.get("/billing/invoices/?format=csv"))[0][0] == "number"
    assert client.get("/billing/invoices/?sort=owner").status_code == 400

    assert client.get("/history/?sort=kind").status_code == 200
    hist = _csv(client.get("/history/?format=csv&type=queue"))
    assert hist[0][:3] == ["when", "kind", "object"] and all(r[1] == "queue" for r in hist[1:])
    assert len(hist) > 1

    a = held(org.alice, name="zz-held", pods=_pods(2))
    b = held(org.carol, name="aa-held", queue="rd/nlp", pods=_pods(2))
    html = client.get("/approvals/?sort=name").content.decode()
    assert html.index(f'id="wl-{b.pk}"') < html.index(f'id="wl-{a.pk}"')
    held_rows = _csv(client.get("/approvals/?format=csv&table=workloads&sort=-name"))
    assert [r[1] for r in held_rows[1:]] == ["zz-held", "aa-held"]
    bad = client.get("/approvals/?format=csv&table=secrets")
    assert bad.status_code == 400 and "table: &#x27;secrets&#x27;" in bad.content.decode()


# --- 5. search ---------------------------------------------------------------------------------

def test_the_tree_keeps_its_sort_when_it_refreshes_and_the_dashboards_copy_has_none(
        client, org, priority_classes):
    """The tree page refreshes with its own sort; the dashboard's copy of the tree has no sort
    links or CSV (they would point at the dashboard), so every control it shows is the page's."""
    _login(client, org.admin)
    page = client.get("/tree/?sort=-used").content.decode()
    assert re.search(r'hx-get="/tree/partial/\?sort=-used"', page), page[:2000]
    embedded = client.get("/tree/partial/?embedded=1").content.decode()
    assert 'class="sort"' not in embedded and "csv-link" not in embedded
    assert '<th class="num" scope="col">GPUs used</th>' in embedded
    dashboard = client.get("/dashboard/").content.decode()
    assert "/tree/partial/?embedded=1" in dashboard
    assert 'class="sort"' in client.get("/tree/partial/").content.decode()


def test_search_finds_only_what_the_user_may_see(client, org, priority_classes):
    mine = submit(org.alice, name="resnet-vision", pods=_pods(1))
    theirs = submit(org.carol, name="resnet-nlp", queue="rd/nlp", pods=_pods(1))
    _login(client, org.alice)
    html = client.get("/search/?q=resnet").content.decode()
    assert f'href="/workloads/{mine.pk}/"' in html and "resnet-nlp" not in html
    html = client.get("/search/?q=rd/").content.decode()
    assert 'href="/queues/q/rd/vision/"' in html and 'href="/queues/q/rd/nlp/"' not in html
    data = api_for(org.alice).get("/api/v1/search?q=ob").json()
    assert [u["username"] for u in data["users"]] == ["bob"]  # a team mate
    assert api_for(org.alice).get("/api/v1/search?q=carol").json()["users"] == []
    admin = api_for(org.admin).get("/api/v1/search?q=resnet").json()
    assert {w["id"] for w in admin["workloads"]} == {mine.pk, theirs.pk}
    bad = api_for(org.alice).get("/api/v1/search?q=r")
    assert bad.status_code == 400 and "at least 2 characters (got 1)" in bad.content.decode()
    page = client.get("/search/?q=r")
    assert page.status_code == 400 and 'id="search-error"' in page.content.decode()
    assert 'role="search"' in page.content.decode()


# --- 6. time zone --------------------------------------------------------------------------------

def test_time_zone_setting_changes_how_pages_show_times(client, org, priority_classes):
    w = submit(org.alice, name="tz", pods=_pods(1))
    _login(client, org.alice)
    assert 'href="/account/tokens/"' in client.get("/account/").content.decode()
    before = client.get(f"/workloads/{w.pk}/").content.decode()
    assert re.search(r"<dt>Submitted</dt><dd>[\d-]+ [\d:]+ UTC</dd>", before)
    bad = client.post("/account/", {"time_zone": "Mars/Olympus"})
    assert bad.status_code == 400 and "Time zone:" in bad.content.decode()
    assert not UserSettings.objects.filter(user=org.alice, time_zone="Mars/Olympus").exists()
    assert client.post("/account/", {"time_zone": "Asia/Kolkata"}).status_code == 302
    after = client.get(f"/workloads/{w.pk}/").content.decode()
    local = timezone.localtime(w.submitted_at, timezone=__import__("zoneinfo").ZoneInfo(
        "Asia/Kolkata"))
    assert f"<dt>Submitted</dt><dd>{local:%Y-%m-%d %H:%M:%S} IST</dd>" in after
    # A new session (another browser) reads the setting from the database.
    client.logout()
    _login(client, org.alice)
    assert "IST</dd>" in client.get(f"/workloads/{w.pk}/").content.decode()
    api = api_for(org.alice)
    bad = api.patch("/api/v1/account/settings", {"time_zone": "Nowhere/Land",
                                                 "muted_kinds": ["finished"]}, format="json")
    assert bad.status_code == 400
    assert "time_zone" in bad.content.decode() and "Nowhere/Land" in bad.content.decode()
    row = UserSettings.objects.get(user=org.alice)
    assert row.time_zone == "Asia/Kolkata" and row.muted_kinds == []  # nothing half-saved
    ok = api.patch("/api/v1/account/settings", {"time_zone": ""}, format="json")
    assert ok.json() == {"time_zone": "", "muted_kinds": []}


# --- 7. notifications ---------------------------------------------------------------------------

def test_a_finished_workload_notifies_its_owner_unless_muted(client, org, priority_classes,
                                                             django_capture_on_commit_callbacks):
    from scheduling import extensions

    org.alice.email = "alice@example.org"
    org.alice.save()
    w = submit(org.alice, name="ends", pods=_pods(1))
    event = WorkloadEvent(workload=w, at=timezone.now(), type="finished", message="all done")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        extensions.events_written([event])
    note = Notification.objects.get(user=org.alice)
    assert note.kind == "finished" and note.subject == "Workload ends finished"
    assert note.url == f"/workloads/{w.pk}/"
    assert [m.to for m in mail.outbox] == [["alice@example.org"]]
    _login(client, org.alice)
    html = client.get("/dashboard/").content.decode()
    assert re.search(r'id="notifications-bell">Notifications <span class="badge"[^>]*>1<', html)
    # Muted: neither stored nor emailed.
    client.post("/account/", {"time_zone": "", "muted_kinds": ["finished", "preempted"]})
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        extensions.events_written([event])
    assert Notification.objects.filter(user=org.alice).count() == 1 and mail.outbox == []
    # Marked read: the badge goes.
    client.post("/account/notifications/read/", {"id": str(note.pk)})
    assert Notification.objects.get(pk=note.pk).read_at is not None
    assert 'class="badge"' not in client.get("/account/notifications/").content.decode().split(
        "</header>")[0].split('id="notifications-bell"')[1].split("</a>")[0]
    bad = client.post("/account/notifications/read/", {"id": "all-of-them"}, follow=True)
    assert "id must be a notification&#x27;s number" in bad.content.decode()


def test_approval_needed_and_decision_are_notified(org, priority_classes,
                                                   django_capture_on_commit_callbacks):
    from scheduling.request.approvals import workload_approve

    org.bob.email = "bob@example.org"
    org.bob.save()
    with django_capture_on_commit_callbacks(execute=True):
        w = submit(org.alice, name="long", duration_hint_s=100 * 3600, pods=_pods(1))
    assert Workload.objects.get(pk=w.pk).needs_approval
    ask = Notification.objects.get(user=org.bob)
    assert ask.kind == "approval_needed" and ask.workload_id == w.pk
    assert ask.url == "/approvals/"
    workload_approve(user=org.bob, workload=w)
    told = Notification.objects.get(user=org.alice)
    assert told.kind == "decision" and "approved" in told.subject
    data = api_for(org.alice).get("/api/v1/notifications?unread=1").json()
    assert [n["id"] for n in data] == [told.pk]
    assert api_for(org.alice).post("/api/v1/notifications/read", {"ids": [told.pk]},
                                   format="json").json() == {"marked": 1}
    bad = api_for(org.alice).post("/api/v1/notifications/read", {"ids": ["x"]}, format="json")
    assert bad.status_code == 400


def test_a_workload_cancelled_by_someone_else_notifies_its_owner_unless_muted(
        client, org, priority_classes, django_capture_on_commit_callbacks):
    """bob (vision's lead) cancels alice's workload from its page: she is told by the bell and
    by email who cancelled it; her own cancel tells nobody; muted, nothing is stored or sent."""
    from scheduling.services import workload_cancel

    org.alice.email = "alice@example.org"
    org.alice.save()
    w = submit(org.alice, name="sweep", pods=_pods(1))
    mail.outbox.clear()
    _login(client, org.bob)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/workloads/{w.pk}/cancel/")
    assert Workload.objects.get(pk=w.pk).state == "cancelled"
    note = Notification.objects.get(user=org.alice)
    assert (note.kind, note.subject) == ("cancelled", "Workload sweep was cancelled by bob")
    assert note.body == "sweep in rd/vision was cancelled by bob."
    assert (note.url, note.workload_id) == (f"/workloads/{w.pk}/", w.pk)
    assert [(m.to, m.subject) for m in mail.outbox] == [
        (["alice@example.org"], "Workload sweep was cancelled by bob")]
    assert not Notification.objects.filter(user=org.bob).exists()

    own = submit(org.alice, name="mine", pods=_pods(1))
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        workload_cancel(user=org.alice, workload=own)
    assert Notification.objects.filter(user=org.alice).count() == 1 and mail.outbox == []

    UserSettings.objects.update_or_create(user=org.alice, defaults={"muted_kinds": ["cancelled"]})
    muted = submit(org.alice, name="quiet", pods=_pods(1))
    with django_capture_on_commit_callbacks(execute=True):
        workload_cancel(user=org.admin, workload=muted)
    assert Notification.objects.filter(user=org.alice).count() == 1 and mail.outbox == []
    _login(client, org.alice)
    assert "My workload was cancelled by someone else" in client.get("/account/").content.decode()


def test_capacity_request_decisions_and_a_deciders_cancel_notify_the_requester(org):
    """The requester hears of an approval, a refusal (with the decider's reason) and a cancel by
    a decider, by the bell and email, unless they muted decisions; their own cancel is silent."""
    from quotas.capacity import services as capacity

    org.alice.email = "alice@example.org"
    org.alice.save()

    def ask(gpus):
        return capacity.capacity_request_submit(
            user=org.alice, queue=org.vision, flavor=org.a100, resource="gpu",
            justification="a deadline", min=Decimal(gpus))

    def told():
        return list(Notification.objects.filter(user=org.alice, kind="decision").order_by(
            "id").values_list("subject", "body", "url"))

    approved, refused, withdrawn, own = ask(10), ask(12), ask(14), ask(9)
    mail.outbox.clear()
    capacity.capacity_request_approve(user=org.bob, request=approved, comment="go ahead")
    capacity.capacity_request_deny(user=org.bob, request=refused,
                                   comment="the fleet is full until March")
    capacity.capacity_request_cancel(user=org.bob, request=withdrawn)
    capacity.capacity_request_cancel(user=org.alice, request=own)
    assert told() == [
        (f"Capacity request #{approved.pk} approved",
         "rd/vision a100-80g/gpu: approved by bob.\ngo ahead",
         f"/capacity-requests/{approved.pk}/"),
        (f"Capacity request #{refused.pk} denied",
         "rd/vision a100-80g/gpu: denied by bob.\nthe fleet is full until March",
         f"/capacity-requests/{refused.pk}/"),
        (f"Capacity request #{withdrawn.pk} cancelled",
         "rd/vision a100-80g/gpu: cancelled by bob.", f"/capacity-requests/{withdrawn.pk}/")]
    assert [m.subject for m in mail.outbox if m.to == ["alice@example.org"]] == [
        s for s, _, _ in told()]
    # Muted: the next refusal is neither stored nor emailed.
    UserSettings.objects.update_or_create(user=org.alice, defaults={"muted_kinds": ["decision"]})
    mail.outbox.clear()
    capacity.capacity_request_deny(user=org.bob, request=ask(11), comment="no")
    assert len(told()) == 3 and [m for m in mail.outbox if m.to == ["alice@example.org"]] == []


def test_an_approved_capacity_request_the_tree_refuses_at_its_start_is_told_once(org):
    from quotas.capacity import services as capacity
    from quotas.capacity.models import CapacityRequest

    now = timezone.now()
    req = capacity.capacity_request_submit(
        user=org.alice, queue=org.vision, flavor=org.a100, resource="gpu",
        justification="later", min=Decimal(16), starts_at=now + timedelta(hours=1))
    capacity.capacity_request_approve(user=org.bob, request=req, comment="")
    # Meanwhile the parent's min shrinks: vision's 16 plus nlp's 8 no longer fit under rd.
    from quotas.models import QuotaEntry

    QuotaEntry.objects.filter(queue=org.rd).update(min=Decimal(20), min_base=20000)
    for _ in range(2):
        capacity.capacity_requests_process_due(now=now + timedelta(hours=2))
    assert CapacityRequest.objects.get(pk=req.pk).state == "approved"
    (note,) = Notification.objects.filter(user=org.alice, subject__contains="could not be applied")
    assert note.kind == "decision" and "the quota tree refuses the change now" in note.body


def test_capacity_requests_list_sorts_and_exports_what_its_filters_select(client, org):
    from quotas.capacity.models import CapacityRequest

    now = timezone.now()

    def request(queue, by, state, gib, days):
        return CapacityRequest.objects.create(
            queue=queue, flavor=org.a100, min=Decimal(gib), justification="j",
            starts_at=now + timedelta(days=days), requested_by=by, state=state)

    a = request(org.vision, org.alice, "submitted", 16, 3)
    b = request(org.vision, org.bob, "denied", 12, 1)
    c = request(org.nlp, org.carol, "submitted", 10, 2)
    _login(client, org.admin)

    def ids(query):
        html = client.get(f"/capacity-requests/?{query}").content.decode()
        return [int(i) for i in re.findall(r'<a href="/capacity-requests/(\d+)/">#', html)]

    assert ids("") == [c.pk, b.pk, a.pk]  # newest first
    assert ids("sort=starts") == [b.pk, c.pk, a.pk]
    assert ids("sort=-min") == [a.pk, b.pk, c.pk]
    assert ids("sort=by&state=submitted") == [a.pk, c.pk]  # alice, carol; the filter holds
    html = client.get("/capacity-requests/?sort=queue").content.decode()
    assert 'aria-sort="ascending" scope="col"><a class="sort" href="?sort=-queue"' in html
    assert 'class="button csv-link" href="?sort=queue&amp;format=csv"' in html
    rows = _csv(client.get("/capacity-requests/?format=csv&state=submitted&sort=-min"))
    assert rows[0][:6] == ["id", "queue", "flavor", "resource", "min", "max"]
    assert [(int(r[0]), r[1], r[4], r[8], r[9]) for r in rows[1:]] == [
        (a.pk, "rd/vision", "16.000", "submitted", "alice"),
        (c.pk, "rd/nlp", "10.000", "submitted", "carol")]
    bad = client.get("/capacity-requests/?sort=justification")
    assert bad.status_code == 400 and "sort: &#x27;justification&#x27; is not a column" in (
        bad.content.decode())
    # alice sees her own and her teams' queues' requests only, in the CSV too.
    _login(client, org.alice)
    rows = _csv(client.get("/capacity-requests/?format=csv"))
    assert sorted(int(r[0]) for r in rows[1:]) == [a.pk, b.pk]
