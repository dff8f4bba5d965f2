"""The orphan sweep (scheduling/fleet/orphans.py): objects with Allot's labels whose workload is
gone or ended are deleted after the TTL, on a simulated cluster and on Kubernetes (the API
double), with an event and the metric; live workloads' objects, adopted from `kubectl apply`
or not, are never touched."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.backends import clear_backend_cache
from scheduling.backends.naming import LABEL_MANAGED_BY, LABEL_WORKLOAD_ID, MANAGED_BY, job_name
from scheduling.backends.simulated.models import SimJob
from scheduling.fleet.orphans import orphans_sweep
from scheduling.fleet.refs import cleanup_ttl_s
from scheduling.models import Cluster, EventCode, Workload, WorkloadState
from scheduling.monitoring import scheduling_families
from scheduling.services import workload_cancel, workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.test_admission import TOKEN, labelled, post, review
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db
S = WorkloadState


def swept_metric(cluster: str) -> float | None:
    family = next(f for f in scheduling_families(timezone.now())
                  if f.name == "allot_orphan_objects_deleted")
    return next((s.value for s in family.samples if s.labels == {"cluster": cluster}), None)


def copy_job(job: SimJob, workload_id: int) -> None:
    job.pk, job.workload_id, job.name = None, workload_id, job_name(workload_id, 0)
    job.save()


def test_simulated_orphans_go_after_the_ttl_and_live_jobs_stay(world_dispatch_in_cycle):
    world = world_dispatch_in_cycle
    live = workload_submit(user=world.alice, data=request("live", gpus=8), nudge=False)
    assert live.pk in cycle_run(wait=True).admitted
    job = SimJob.objects.get(workload_id=live.pk)
    cluster, namespace = job.cluster.name, job.namespace
    # Cancelled while pending (never admitted: no admission for maintenance to clean), yet
    # with a Job on the cluster; and a Job whose workload is gone from the database.
    ended = workload_submit(user=world.alice, data=request("ended", gpus=8), nudge=False)
    workload_cancel(user=world.alice, workload=ended)
    copy_job(SimJob.objects.get(workload_id=live.pk), ended.pk)
    gone = live.pk + 1000
    copy_job(SimJob.objects.get(workload_id=live.pk), gone)

    assert orphans_sweep(now=timezone.now()).deleted == {}  # within the TTL
    later = timezone.now() + timedelta(seconds=cleanup_ttl_s() + 1)
    report = orphans_sweep(now=later)
    assert sorted(report.deleted[cluster]) == sorted([(namespace, ended.pk), (namespace, gone)])
    assert set(SimJob.objects.values_list("workload_id", flat=True)) == {live.pk}
    event = ended.events.get(code=EventCode.ORPHAN_DELETED)
    assert event.payload["cluster"] == cluster and "its workload cancelled at" in event.message
    assert swept_metric(cluster) == 2.0
    assert orphans_sweep(now=later + timedelta(days=30)).deleted == {}  # nothing left but live


@pytest.fixture
def kube():
    from tests.integration.backends.k8s.specs import A100
    from tests.k8s_double import KubeDouble

    with KubeDouble() as double:
        double.state.add_node("bj-a100-0", labels=dict(A100.node_selector), gpus=8)
        yield double


def adopt(client, kube, name: str) -> Workload:
    """`kubectl apply` of a labelled PyTorchJob: the webhook queues it, the object is created
    with the webhook's patch (held back, labelled with its workload id)."""
    from tests.k8s_double.patches import json_patch

    obj = labelled()
    obj["metadata"]["name"] = name
    answer = post(client, review(obj)).json()["response"]
    assert answer["allowed"], answer
    applied = json_patch(obj, json.loads(base64.b64decode(answer["patch"])))
    kube.state.create_object("kubeflow.org", "v1", "pytorchjobs", "rd-vision", applied)
    return Workload.objects.get(name=name)


def test_kubernetes_orphans_go_and_adopted_live_objects_stay(world, client, kube):
    for c in Cluster.objects.all():
        c.connection = {**c.connection, "webhook_token": TOKEN}
        c.save()
    kube.state.create_namespace({"metadata": {"name": "rd-vision"}})
    waiting = adopt(client, kube, "resnet-live")
    dropped = adopt(client, kube, "resnet-dropped")
    workload_cancel(user=world.alice, workload=dropped)
    gone = dropped.pk + 1000
    kube.state.create_job("rd-vision", {
        "metadata": {"name": job_name(gone, 0),
                     "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_WORKLOAD_ID: str(gone)}},
        "spec": {"suspend": True, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}})
    Cluster.objects.exclude(name="bj").update(enabled=False)
    bj = Cluster.objects.get(name="bj")
    bj.backend, bj.connection = "kubernetes", {**kube.connection, "timeout_s": 2}
    bj.save()
    clear_backend_cache()
    try:
        assert orphans_sweep().deleted == {}  # within the TTL
        report = orphans_sweep(now=timezone.now() + timedelta(seconds=cleanup_ttl_s() + 1))
    finally:
        clear_backend_cache()
    assert sorted(report.deleted["bj"]) == sorted([("rd-vision", dropped.pk),
                                                    ("rd-vision", gone)])
    assert list(kube.state.objects) == [("kubeflow.org/pytorchjobs", "rd-vision", "resnet-live")]
    assert not kube.state.jobs
    waiting.refresh_from_db()
    assert waiting.state == S.PENDING and not waiting.events.filter(
        code=EventCode.ORPHAN_DELETED).exists()
    event = dropped.events.get(code=EventCode.ORPHAN_DELETED)
    assert event.payload["objects"] == ["resnet-dropped"]
    assert event.payload["kind"] == "kubeflow.org/v1/PyTorchJob"
    assert swept_metric("bj") == 2.0
