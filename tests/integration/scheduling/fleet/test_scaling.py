"""scheduling/fleet/scaling.py through a Kubernetes cluster (the API double): a Deployment
scaled on the cluster (`kubectl scale`) is followed by the sync. The added pods wait gated as
a scale-up with its reason until admitted, then join the running workload and are ungated;
a scale-down releases the removed pods' quota at once."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduling.backends import clear_backend_cache
from scheduling.fleet.dispatch import cluster_dispatch
from scheduling.fleet.sync import cluster_sync
from scheduling.kinds.base import ANNOTATION_ADMITTED_PODS
from scheduling.models import Admission, Cluster, EventType, Node, Workload, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.backends.k8s.specs import A100
from tests.manifests import manifest

S = WorkloadState
NS = "rd-vision"


@pytest.fixture
def kube():
    from tests.k8s_double import KubeDouble

    with KubeDouble() as double:
        for i in range(3):
            double.state.add_node(f"bj-a100-{i}", labels=dict(A100.node_selector), gpus=8)
        yield double


@pytest.fixture
def world(world_dispatch_in_cycle, kube):
    bj = Cluster.objects.get(name="bj")
    bj.backend, bj.connection = "kubernetes", {**kube.connection, "timeout_s": 5}
    bj.save()
    Cluster.objects.filter(name="sh").update(enabled=False)  # one cluster: bj
    clear_backend_cache()
    yield world_dispatch_in_cycle
    clear_backend_cache()


def _deployment(replicas: int) -> dict:
    obj = manifest("Deployment")
    obj["spec"]["replicas"] = replicas
    res = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = "4"
    return obj


def _scale_on_cluster(kube, w, replicas: int) -> None:  # kubectl scale
    kube.state.patch_object("apps", "v1", "deployments", NS, f"allot-w{w.pk}-0",
                            {"spec": {"replicas": replicas}}, "application/merge-patch+json")


def _pods(kube, w) -> tuple[int, int]:
    """(ungated, gated) live pods of the workload's Deployment."""
    live = [p for p in kube.state.pods.values()
            if p["metadata"]["labels"].get("allot.io/workload-id") == str(w.pk)
            and p["status"]["phase"] in ("Pending", "Running")]
    gated = sum(1 for p in live if p["spec"].get("schedulingGates"))
    return len(live) - gated, gated


def _open(w) -> Admission:
    return Admission.objects.get(workload=w, ended_at__isnull=True)


def test_a_deployment_scaled_on_the_cluster_is_admitted_and_released(world, kube):
    bj = Cluster.objects.get(name="bj")
    w = workload_submit(user=world.alice, data={"queue": "rd/vision",
                                                "manifest": _deployment(4)}, nudge=False)
    cycle_run(wait=True)
    cluster_dispatch(cluster_id=bj.pk)
    assert _pods(kube, w) == (4, 0)
    kube.state.set_workload_pods(NS, w.pk, "Running")
    cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
    w.refresh_from_db()
    assert w.state == S.RUNNING and _open(w).gpus == 16  # bj's two nodes, full

    # kubectl scale --replicas 6: the two added pods wait gated, queued as a scale-up.
    _scale_on_cluster(kube, w, 6)
    cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
    up = Workload.objects.get(labels__contains={"allot.io/scale-of": str(w.pk)})
    assert up.state == S.PENDING and up.labels["allot.io/cluster"] == "bj"
    assert [(p.count, p.gpus) for p in up.pod_sets.all()] == [(2, Decimal(4))]
    assert _pods(kube, w) == (4, 2)
    w.refresh_from_db()
    assert w.manifest["spec"]["replicas"] == 6  # kept: a dispatch elsewhere makes it so
    cycle_run(wait=True)
    up.refresh_from_db()
    assert up.state == S.PENDING and up.reason_code  # no room on bj: it says why
    # ... on the Deployment too (Allot's own, submitted through the API): kubectl describe.
    from scheduling.fleet.delivery import outbox_deliver

    outbox_deliver()
    notes = [e["note"] for e in kube.state.events_about(NS, "Deployment", f"allot-w{w.pk}-0")
             if e["reason"] == "Pending"]
    assert notes == [f"Allot: the pods added by a scale wait as workload {up.pk} ({up.name}): "
                     f"{up.reason_code}: {up.reason_message}"]
    cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)  # the same count: nothing new
    assert Workload.objects.filter(labels__has_key="allot.io/scale-of").count() == 1

    # Scaled to 5 before it was admitted: the waiting scale-up shrinks to one pod.
    _scale_on_cluster(kube, w, 5)
    cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
    assert up.pod_sets.get().count == 1
    assert _pods(kube, w) == (4, 1)

    # Room on bj: the scale-up is admitted and joins the running workload, its pod ungated.
    Node.objects.create(cluster=bj, name="bj-a100-2", flavor=_open(w).flavor, gpus=8,
                        cpu=Decimal(96), memory_gib=Decimal(1024), rack="r1")
    cycle_run(wait=True)
    cluster_dispatch(cluster_id=bj.pk)
    up.refresh_from_db()
    assert up.state == S.FINISHED
    adm = _open(w)
    assert (adm.gpus, len(adm.nodes), w.pod_sets.get().count) == (20, 5, 5)
    assert _pods(kube, w) == (5, 0)
    obj = kube.state.objects[("apps/deployments", NS, f"allot-w{w.pk}-0")]
    assert obj["metadata"]["annotations"][ANNOTATION_ADMITTED_PODS] == "5"

    # kubectl scale --replicas 2: the removed pods' quota is released at once.
    _scale_on_cluster(kube, w, 2)
    cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
    adm = _open(w)
    assert (adm.gpus, len(adm.nodes), w.pod_sets.get().count) == (8, 2, 2)
    obj = kube.state.objects[("apps/deployments", NS, f"allot-w{w.pk}-0")]
    assert obj["metadata"]["annotations"][ANNOTATION_ADMITTED_PODS] == "2"
    assert _pods(kube, w) == (2, 0)
    assert "5 -> 2 pods; the quota of 3 pods (12 GPUs) released" in w.events.filter(
        type=EventType.UPDATED).order_by("pk").last().message
    w.refresh_from_db()
    assert w.state == S.RUNNING


def test_an_adopted_deployment_scaled_on_the_cluster_is_followed(world, kube):
    """A Deployment applied with the queue label (the webhook) runs under its own name; a
    `kubectl scale` of it is followed as for one Allot created: the added pods wait as a
    scale-up, the removed ones' quota is released."""
    import base64
    import json

    from scheduling.admission import admission_review
    from tests.integration.scheduling.test_admission import review
    from tests.k8s_double.patches import json_patch

    bj = Cluster.objects.get(name="bj")
    obj = _deployment(2)
    obj["metadata"]["labels"] = {"allot.io/queue": "rd.vision"}
    answer = admission_review(cluster=bj, review=review(obj))["response"]
    applied = json_patch(obj, json.loads(base64.b64decode(answer["patch"])))
    kube.state.create_namespace({"metadata": {"name": NS}})
    kube.state.create_object("apps", "v1", "deployments", NS, applied)
    w = Workload.objects.get()
    name = obj["metadata"]["name"]
    cycle_run(wait=True)
    cluster_dispatch(cluster_id=bj.pk)
    assert _pods(kube, w) == (2, 0)
    kube.state.set_workload_pods(NS, w.pk, "Running")
    cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
    w.refresh_from_db()
    assert w.state == S.RUNNING and _open(w).gpus == 8

    def scale(replicas):
        kube.state.patch_object("apps", "v1", "deployments", NS, name,
                                {"spec": {"replicas": replicas}}, "application/merge-patch+json")
        cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)

    scale(3)
    up = Workload.objects.get(labels__contains={"allot.io/scale-of": str(w.pk)})
    assert up.state == S.PENDING and [p.count for p in up.pod_sets.all()] == [1]
    assert _pods(kube, w) == (2, 1)
    cycle_run(wait=True)
    cluster_dispatch(cluster_id=bj.pk)
    up.refresh_from_db()
    assert up.state == S.FINISHED and _open(w).gpus == 12 and _pods(kube, w) == (3, 0)
    scale(1)
    assert _open(w).gpus == 4 and _pods(kube, w) == (1, 0)
