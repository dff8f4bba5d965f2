"""Full stack: the API, PostgreSQL, Redis and a real Celery worker process with the beat,
on simulated clusters. Every test polls the database the worker writes."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduling.models import Admission, EndReason, EventType, Workload, WorkloadState
from scheduling.services import workload_submit
from tests.integration.scheduling.stack.conftest import PODS_READY_TIMEOUT_S
from tests.integration.scheduling.stack.stack import wait_for
from tests.integration.scheduling.world import make_world, request

S = WorkloadState
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(240)]


def state_of(pk: int) -> str:
    return Workload.objects.get(pk=pk).state


def events_of(pk: int) -> list[str]:
    return list(Workload.objects.get(pk=pk).events.order_by("at", "id")
                .values_list("type", flat=True))


def test_api_submission_runs_to_the_end(celery_worker):
    world = make_world(speedup=300)
    api = APIClient()
    api.force_authenticate(world.alice)
    resp = api.post("/api/v1/workloads", request("e2e", count=2, duration_hint_s=600),
                    format="json")
    assert resp.status_code == 201, resp.content
    pk = resp.json()["id"]
    wait_for(lambda: state_of(pk) == S.FINISHED, timeout=90,
             what=f"workload finished; worker log:\n{celery_worker.tail()}")
    assert events_of(pk) == ["submitted", "admitted", "dispatched", "running", "finished"]
    adm = Admission.objects.get(workload_id=pk)
    assert adm.end_reason == EndReason.FINISHED and len(adm.nodes) == 2
    assert adm.reserved_at <= adm.dispatched_at <= adm.running_at <= adm.ended_at
    body = api.get(f"/api/v1/workloads/{pk}").json()
    assert body["state"] == "finished" and body["admission"]["cluster"] in ("bj", "sh")
    assert [e["type"] for e in body["events"]][-1] == "finished"


def test_reclaim_through_the_workers(celery_worker):
    world = make_world(cluster_names=("bj",), nodes_per_cluster=3)  # 24 GPUs, real time
    hogs = [workload_submit(user=world.carol, data=request(
        f"hog{i}", queue="rd/nlp", termination_grace_s=1, duration_hint_s=36000)).pk
        for i in range(3)]
    wait_for(lambda: all(state_of(h) == S.RUNNING for h in hogs), timeout=60,
             what=f"hogs running; worker log:\n{celery_worker.tail()}")
    mine = workload_submit(user=world.alice, data=request("guaranteed",
                                                          duration_hint_s=36000)).pk
    wait_for(lambda: state_of(mine) == S.RUNNING, timeout=90,
             what=f"reclaimer running; worker log:\n{celery_worker.tail()}")
    victims = [h for h in hogs if "preempted" in events_of(h)]
    assert len(victims) == 1
    victim = Workload.objects.get(pk=victims[0])
    preempted = victim.events.get(type=EventType.PREEMPTED)
    assert preempted.payload["kind"] == "reclaim" and preempted.payload["by"] == mine
    assert "requeued" in events_of(victim.pk)
    assert victim.state == S.PENDING  # cooldown keeps it from borrowing again at once
    assert victim.admissions.get().end_reason == EndReason.PREEMPTED


def test_priority_preemption_through_the_workers(celery_worker):
    world = make_world(cluster_names=("bj",), nodes_per_cluster=3)
    batch = [workload_submit(user=world.alice, data=request(
        f"batch{i}", priority_class="batch-low", termination_grace_s=1,
        duration_hint_s=36000)).pk for i in range(3)]
    wait_for(lambda: all(state_of(b) == S.RUNNING for b in batch), timeout=60,
             what="batch running")
    serve = workload_submit(user=world.alice, data=request(
        "serve", priority_class="inference-high", duration_hint_s=36000)).pk
    wait_for(lambda: state_of(serve) == S.RUNNING, timeout=90,
             what=f"inference running; worker log:\n{celery_worker.tail()}")
    victims = [b for b in batch if "preempted" in events_of(b)]
    assert len(victims) == 1
    event = Workload.objects.get(pk=victims[0]).events.get(type=EventType.PREEMPTED)
    assert event.payload["kind"] == "priority" and event.payload["by"] == serve


def test_refused_dispatch_is_retried_on_another_cluster(celery_worker):
    world = make_world(speedup=300, nodes_per_cluster=2)
    # bj refuses everything; sh is pricier, so the engine tries bj first.
    world.bj.connection = {**world.bj.connection, "refuse": True}
    world.bj.save()
    world.sh.price = 3
    world.sh.save()
    pk = workload_submit(user=world.alice, data=request("picky", duration_hint_s=600)).pk
    wait_for(lambda: state_of(pk) == S.FINISHED, timeout=90,
             what=f"finished elsewhere; worker log:\n{celery_worker.tail()}")
    admissions = list(Admission.objects.filter(workload_id=pk).order_by("pk")
                      .values_list("cluster__name", "end_reason"))
    assert admissions == [("bj", "refused"), ("sh", "finished")]
    assert events_of(pk) == ["submitted", "admitted", "refused", "requeued", "admitted",
                             "dispatched", "running", "finished"]
    world.bj.refresh_from_db()
    assert world.bj.health_penalty_until is not None


def test_pods_ready_timeout_releases_with_backoff(celery_worker):
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1,
                       connection={"start_delay_s": 100000})
    pk = workload_submit(user=world.alice, data=request("never-ready")).pk
    wait_for(lambda: "timeout" in events_of(pk), timeout=PODS_READY_TIMEOUT_S + 60,
             what=f"pods-ready timeout; worker log:\n{celery_worker.tail()}")
    w = Workload.objects.get(pk=pk)
    assert w.state == S.PENDING and w.backoff_count == 1
    timeout = w.events.get(type=EventType.TIMEOUT)
    assert timeout.code == "PODS_READY_TIMEOUT"
    assert abs((w.not_before - timeout.at).total_seconds() - 60) < 1
    assert w.admissions.get().end_reason == EndReason.PODS_READY_TIMEOUT
