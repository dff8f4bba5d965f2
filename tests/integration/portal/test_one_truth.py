"""One figure, one source: a queue's used and pending GPUs read from every page that shows
them (the dashboard, the queue's page, the tree page) and from the API are the same number,
all from `quotas.selectors.queue_tree` (its usage: `quota_usage`)."""

import re
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
