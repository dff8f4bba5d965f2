"""One figure, one source: each figure read from every page that shows it and from the API is
the same number (docs/api.md, "One number, one source"): quota and usage from
`quotas.selectors.queue_tree`, pending counts from `scheduling.selectors.pending_counts`, free
GPUs from `scheduling.selectors.cluster_gpus`, costs from `billing.selectors` (billed plus the
one provisional computation)."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from scheduling.models import Admission, Workload
from tests.factories import PASSWORD, workloads_set_state
from tests.integration.portal.conftest import api_for, submit

pytestmark = pytest.mark.django_db


def _admit(workload, cluster, flavor):
    from django.utils import timezone

    now = timezone.now()
    gpus = sum(p.count * p.gpus for p in workload.pod_sets.all())
    workloads_set_state(Workload.objects.filter(pk=workload.pk), "running", state_changed_at=now)
    Admission.objects.create(workload=workload, cluster=cluster, flavor=flavor,
                             nodes=["bj-a100-0"], gpus=gpus, reserved_at=now, running_at=now)


def _num(text: str) -> Decimal:
    return Decimal(text.strip())


def test_used_and_pending_are_the_same_on_every_page_and_the_api(client, org,
                                                                  priority_classes):
    running = submit(org.alice, name="big", pods=[{"count": 3, "flavors": ["a100-80g"],
                                                   "gpus": 4, "cpu": 8, "memory_gib": 64}])
    _admit(running, org.cluster, org.a100)
    submit(org.alice, name="waits", pods=[{"count": 1, "flavors": ["a100-80g"], "gpus": 2,
                                           "cpu": 8, "memory_gib": 64}])
    assert client.login(username="alice", password=PASSWORD)
    seen: dict[str, tuple[Decimal, Decimal | None]] = {}

    html = client.get("/dashboard/").content.decode()
    card = re.search(r'href="/queues/q/rd/vision/".*?used <span class="used">([\d.]+)</span>'
                     r".*?pending ([\d.]+)", html, re.S)
    seen["dashboard"] = (_num(card.group(1)), _num(card.group(2)))

    html = client.get("/queues/q/rd/vision/").content.decode()
    row = re.search(r'<tr id="key-a100-80g-gpu">.*?</tr>', html, re.S).group(0)
    seen["queue page"] = (
        _num(re.search(r'class="num quota-used">([\d.]+)<', row).group(1)),
        _num(re.search(r'class="num quota-pending">([\d.]+)<', row).group(1)))

    html = client.get("/tree/").content.decode()
    row = re.search(r'<tr data-path="rd/vision">.*?</tr>', html, re.S).group(0)
    seen["tree page"] = (_num(re.search(r"; ([\d.]+) used", row).group(1)), None)

    api = api_for(org.alice).get("/api/v1/queues/rd/vision").json()
    cell = api["quota"]["a100-80g"]["gpu"]
    seen["API"] = (Decimal(str(cell["used"])), Decimal(str(cell["pending"])))

    used = {where: u for where, (u, _) in seen.items()}
    pending = {where: p for where, (_, p) in seen.items() if p is not None}
    assert set(used.values()) == {Decimal(12)}, used
    assert set(pending.values()) == {Decimal(2)}, pending


# --- every figure, every page and endpoint, one seeded state -----------------------------------

NOW = datetime(2026, 12, 2, 10, 40, tzinfo=UTC)  # a fixed clock: provisional cost grows with it


def _state(org):
    """A reclaim under way with borrowing, pending work and provisional costs:

    - vision (min 8): alice's `big` runs on 12 GPUs since 09:10 (the 09:00 hour is rolled up
      and billed; 10:00-10:40 is provisional), her `victim` (4 GPUs) is being preempted, her
      `waits` (2 GPUs) waits out the cooldown: 16 used, 8 borrowed, 2 pending;
    - nlp (min 8, lends what vision borrows): carol's `reclaimer` (8 GPUs) waits for the
      victim to stop: 8 pending, 0 used;
    - the fleet: 32 a100-80g GPUs, 16 free.
    """
    from billing.services import cost_center_create, rate_card_create, team_cost_center_set
    from billing.services.usage import charges_post_hour, usage_rollup_hour

    cc = cost_center_create(code="rd", name="R&D", contact_email="finance@example.org")
    team_cost_center_set(team=org.vision_team, cost_center=cc)
    team_cost_center_set(team=org.nlp_team, cost_center=cc)
    rate_card_create(flavor=org.a100, resource="gpu", rate=Decimal("2.50"),
                     frozen_rate=Decimal("1.00"), effective_from=datetime(2026, 1, 1, tzinfo=UTC))

    def run(user, name, gpus, since, state="running", queue="rd/vision"):
        # Pods of at most 4 GPUs: a node has 8.
        w = submit(user, name=name, queue=queue,
                   pods=[{"count": gpus // 4, "flavors": ["a100-80g"], "gpus": 4, "cpu": 8,
                          "memory_gib": 64}])
        workloads_set_state(Workload.objects.filter(pk=w.pk), state, state_changed_at=since)
        Admission.objects.create(workload=w, cluster=org.cluster, flavor=org.a100,
                                 nodes=["bj-a100-0"], gpus=gpus, reserved_at=since,
                                 running_at=since)
        return w

    big = run(org.alice, "big", 12, NOW - timedelta(minutes=90))
    victim = run(org.alice, "victim", 4, NOW - timedelta(minutes=20), state="preempting")
    waits = submit(org.alice, name="waits", pods=[{"count": 1, "flavors": ["a100-80g"],
                                                   "gpus": 2, "cpu": 8, "memory_gib": 64}])
    Workload.objects.filter(pk=waits.pk).update(
        reason_code="COOLDOWN", reason_message="queue rd/vision: a workload was reclaimed; no "
        f"borrowing admissions until {(NOW + timedelta(minutes=2)).timestamp()} "
        "(reclaim_cooldown_s 120)")
    reclaimer = submit(org.carol, name="reclaimer", queue="rd/nlp", pods=[
        {"count": 1, "flavors": ["a100-80g"], "gpus": 8, "cpu": 8, "memory_gib": 64}])
    Workload.objects.filter(pk=reclaimer.pk).update(
        reason_code="WAITING_FOR_PREEMPTION",
        reason_message=f"waiting for {victim.pk} to stop (grace until {NOW.timestamp() + 60})")
    hour = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    usage_rollup_hour(hour=hour, now=NOW, telemetry={})
    charges_post_hour(hour=hour, now=NOW)
    return {"big": big, "victim": victim, "waits": waits, "reclaimer": reclaimer}


def _agree(figure: str, seen: dict[str, Decimal], expected: Decimal) -> None:
    assert len(seen) >= 2, f"{figure}: read from one place only: {seen}"
    assert set(seen.values()) == {expected}, f"{figure} differs: {seen}"


def _one(pattern: str, html: str, where: str) -> Decimal:
    m = re.search(pattern, html, re.S)
    assert m, f"{where}: {pattern!r} not found"
    return _num(m.group(1))


def test_every_figure_is_the_same_wherever_it_is_read(client, org, priority_classes,
                                                       monkeypatch):
    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: NOW)
    w = _state(org)
    big, waits = w["big"], w["waits"]
    assert client.login(username="alice", password=PASSWORD)
    api = api_for(org.alice)
    dashboard = client.get("/dashboard/").content.decode()
    card = re.search(rf'<article class="card" id="queue-{org.vision.pk}">.*?</article>',
                     dashboard, re.S).group(0)
    queue_page = client.get("/queues/q/rd/vision/").content.decode()
    qrow = re.search(r'<tr id="key-a100-80g-gpu">.*?</tr>', queue_page, re.S).group(0)
    tree_row = re.search(r'<tr data-path="rd/vision">.*?</tr>',
                         client.get("/tree/").content.decode(), re.S).group(0)
    api_cell = api.get("/api/v1/queues/rd/vision").json()["quota"]["a100-80g"]["gpu"]
    listed = {q["path"]: q for q in api.get("/api/v1/queues").json()}
    list_cell = listed["rd/vision"]["quota"]["a100-80g"]["gpu"]

    # Quota and usage of rd/vision on a100-80g, during the reclaim.
    for figure, expected, reads in [
        ("used", Decimal(16), {
            "dashboard": _one(r'used <span class="used">([\d.]+)<', card, "dashboard"),
            "queue page": _one(r'class="num quota-used">([\d.]+)<', qrow, "queue page"),
            "tree page": _one(r"; ([\d.]+) used", tree_row, "tree page"),
            "API queue": Decimal(str(api_cell["used"])),
            "API queues": Decimal(str(list_cell["used"]))}),
        ("min", Decimal(8), {
            "dashboard": _one(r'min <span class="min">([\d.]+)<', card, "dashboard"),
            "queue page": _one(r'class="num quota-min">([\d.]+)<', qrow, "queue page"),
            "tree page": _one(r"([\d.]+) / [\d.]+ / [\d.]+", tree_row, "tree page"),
            "API queue": Decimal(str(api_cell["min"]))}),
        ("max", Decimal(32), {
            "dashboard": _one(r"max ([\d.]+)", card, "dashboard"),
            "tree page": _one(r"[\d.]+ / ([\d.]+) / [\d.]+", tree_row, "tree page"),
            "API queue": Decimal(str(api_cell["max"]))}),
        ("borrowed", Decimal(8), {
            "dashboard": _one(r"borrowed ([\d.]+)", card, "dashboard"),
            "API queue": Decimal(str(api_cell["borrowed"]))}),
        ("pending GPUs", Decimal(2), {
            "dashboard": _one(r"pending ([\d.]+)</div>", card, "dashboard"),
            "queue page": _one(r'class="num quota-pending">([\d.]+)<', qrow, "queue page"),
            "API queue": Decimal(str(api_cell["pending"]))}),
    ]:
        _agree(f"rd/vision a100-80g {figure}", reads, expected)

    # What nlp lends and waits for, as carol reads it.
    carol = api_for(org.carol)
    assert client.login(username="carol", password=PASSWORD)
    nlp_card = re.search(rf'<article class="card" id="queue-{org.nlp.pk}">.*?</article>',
                         client.get("/dashboard/").content.decode(), re.S).group(0)
    nlp_row = re.search(r'<tr id="key-a100-80g-gpu">.*?</tr>',
                        client.get("/queues/q/rd/nlp/").content.decode(), re.S).group(0)
    nlp_cell = carol.get("/api/v1/queues/rd/nlp").json()["quota"]["a100-80g"]["gpu"]
    _agree("rd/nlp pending GPUs", {
        "dashboard": _one(r"pending ([\d.]+)</div>", nlp_card, "dashboard"),
        "queue page": _one(r'class="num quota-pending">([\d.]+)<', nlp_row, "queue page"),
        "API": Decimal(str(nlp_cell["pending"]))}, Decimal(8))
    _agree("rd/nlp lent", {
        "dashboard": _one(r"lent ([\d.]+)", nlp_card, "dashboard"),
        "API": Decimal(str(nlp_cell["lent"]))}, Decimal(8))
    assert client.login(username="alice", password=PASSWORD)

    # Pending workloads of rd/vision: the card's count, the list page, the API's list.
    listing = client.get("/workloads/?state=pending&queue=rd/vision").content.decode()
    _agree("rd/vision pending workloads", {
        "dashboard": _one(r'pending-count" data-count="(\d+)"', card, "dashboard"),
        "workload list": Decimal(len(re.findall(r'<tr[^>]*>\s*<td data-label="Name">',
                                                listing))),
        "API list": Decimal(api.get("/api/v1/workloads?state=pending&queue=rd/vision")
                            .json()["count"])}, Decimal(1))

    # Free a100-80g GPUs: dashboard headroom, the fleet page, the clusters API, the wait gap.
    fleet = client.get("/fleet/").content.decode()
    gap = client.get(f"/workloads/{waits.pk}/").content.decode()
    _agree("free a100-80g GPUs", {
        "dashboard": _one(r'<tr data-flavor="a100-80g">.*?class="num gpus-free"><strong>(\d+)<',
                          dashboard, "dashboard"),
        "fleet page": _one(r'<tr data-cluster="bj" data-flavor="a100-80g">.*?'
                           r'class="num gpus-free"><strong>(\d+)<', fleet, "fleet"),
        "clusters API": Decimal(api.get("/api/v1/clusters").json()[0]["flavors"]["a100-80g"]
                                ["free"]),
        "wait gap": _one(r'id="wait-gap" class="small">(\d+) of the fleet', gap, "gap")},
        Decimal(16))

    # A workload's cost so far (billed 09:10-10:00 + provisional 10:00-10:40).
    expected = (Decimal(12) * Decimal("2.50") * Decimal(90) / 60).quantize(Decimal("0.01"))
    cost_api = api.get(f"/api/v1/usage/workloads/{big.pk}").json()
    assert Decimal(str(cost_api["billed"])) > 0 and cost_api["provisional"] is True
    _agree("big's cost so far", {
        "workload page": _one(r'class="cost-so-far">([\d.]+) ',
                              client.get(f"/workloads/{big.pk}/").content.decode(), "page"),
        "billing page": _one(r'class="cost-so-far">([\d.]+) ',
                             client.get(f"/billing/workloads/{big.pk}/").content.decode(),
                             "billing page"),
        "API": Decimal(str(cost_api["so_far"]))}, expected)

    # Month to date: the team's card, the billing page and the usage API, per team and per
    # queue; billed + provisional everywhere.
    victim_cost = (Decimal(4) * Decimal("2.50") * Decimal(20) / 60).quantize(Decimal("0.01"))
    mtd = expected + victim_cost
    overview = client.get("/billing/").content.decode()
    by_queue = client.get("/billing/?group_by=queue").content.decode()
    teams = {r["key"]: r for r in api.get("/api/v1/usage?group_by=team").json()["rows"]}
    queues = {r["key"]: r for r in api.get("/api/v1/usage?group_by=queue").json()["rows"]}
    assert Decimal(str(teams["vision"]["provisional"])) > 0
    assert Decimal(str(teams["vision"]["billed"])) > 0
    _agree("vision's month to date", {
        "dashboard card": _one(r'class="mtd-spent">([\d.]+) ', dashboard, "dashboard"),
        "billing page": _one(r'data-key="vision">.*?class="usage-cost">([\d.]+) ', overview,
                             "billing"),
        "usage API": Decimal(str(teams["vision"]["cost"]))}, mtd)
    _agree("rd/vision's month to date", {
        "billing page": _one(r'data-key="rd/vision">.*?class="usage-cost">([\d.]+) ', by_queue,
                             "billing by queue"),
        "usage API": Decimal(str(queues["rd/vision"]["cost"]))}, mtd)
