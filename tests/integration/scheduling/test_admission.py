"""The mutating admission webhook (scheduling/admission.py) with real AdmissionReview JSON:
objects without the label are left alone; a labelled one becomes a workload of its queue for
the requesting user, pinned to the cluster and its own name, and is held back by the patch; a
namespace of another team, an unknown user, a bad manifest and a body that is no
AdmissionReview are refused with the reason; the adopted workload runs only on its cluster."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pytest

from scheduling.models import Cluster, Workload, WorkloadState
from scheduling.workers.cycle import cycle_run
from tests.integration.backends.k8s.specs import A100
from tests.manifests import manifest

pytestmark = pytest.mark.django_db
TOKEN = "s3cret-token"


@pytest.fixture
def world(world_dispatch_in_cycle):
    for c in Cluster.objects.all():
        c.connection = {**c.connection, "webhook_token": TOKEN}
        c.save()
    return world_dispatch_in_cycle


@pytest.fixture
def kube():
    from tests.k8s_double import KubeDouble

    with KubeDouble() as double:
        double.state.add_node("bj-a100-0", labels=dict(A100.node_selector), gpus=8)
        yield double


def review(obj: dict, *, namespace: str = "rd-vision", user: str = "alice",
           operation: str = "CREATE") -> dict:
    """An AdmissionReview as the API server sends it (admission.k8s.io/v1)."""
    kind = obj.get("kind", "")
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "name": obj["metadata"].get("name"), "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": user, "uid": "014fbff9a07c",
                         "groups": ["system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def post(client, body, *, cluster="bj", token=TOKEN):
    return client.post(f"/k8s/admission/{cluster}/{token}/", json.dumps(body),
                       content_type="application/json")


def labelled(name="PyTorchJob", queue="rd.vision"):
    obj = manifest(name)
    obj["metadata"]["labels"] = {"allot.io/queue": queue}
    return obj


def test_objects_without_the_label_are_left_alone(world, client):
    resp = post(client, review(manifest("PyTorchJob")))
    assert resp.status_code == 200
    answer = resp.json()["response"]
    assert answer == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert not Workload.objects.exists()


def test_a_labelled_object_is_queued_pinned_and_held_back(world, client):
    resp = post(client, review(labelled()))
    answer = resp.json()["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(answer["patch"]))
    w = Workload.objects.get()
    assert w.owner == world.alice and w.queue == world.vision and w.state == WorkloadState.PENDING
    assert w.kind == "kubeflow.org/v1/PyTorchJob" and w.name == "resnet-ddp"
    assert w.labels == {"allot.io/cluster": "bj", "allot.io/object": "resnet-ddp"}
    ops = {op["path"]: op["value"] for op in patch}
    assert ops["/spec"]["runPolicy"]["suspend"] is True
    assert ops["/metadata/labels"]["allot.io/workload-id"] == str(w.pk)
    assert f"queued as workload {w.pk}" in answer["warnings"][0]
    # It runs on its cluster only, under its own name.
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == WorkloadState.RUNNING
    assert w.admissions.get().cluster.name == "bj"


def test_gated_kinds_get_gates_in_their_templates(world, client):
    obj = labelled("Deployment")
    answer = post(client, review(obj)).json()["response"]
    ops = {op["path"]: op["value"] for op in json.loads(base64.b64decode(answer["patch"]))}
    assert ops["/spec"]["template"]["spec"]["schedulingGates"] == [{"name": "allot.io/admission"}]
    assert ops["/metadata/annotations"]["allot.io/admitted"] == "false"


@pytest.mark.parametrize(("obj", "kwargs", "code", "words"), [
    (lambda: labelled(), {"namespace": "rd-nlp"}, 403,
     "queue rd/vision runs in namespace rd-vision, not rd-nlp"),
    (lambda: labelled(queue="rd.nlp"), {}, 403, "runs in namespace rd-nlp, not rd-vision"),
    (lambda: labelled(), {"user": "system:serviceaccount:x:y"}, 403, "has no account"),
    (lambda: labelled(queue="rd.nope"), {}, 403, "no queue rd/nope"),
    (lambda: {**labelled(), "kind": "FooJob"}, {}, 400, "unknown kind kubeflow.org/v1/FooJob"),
])
def test_refusals_name_the_reason(world, client, obj, kwargs, code, words):
    answer = post(client, review(obj(), **kwargs)).json()["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == code
    assert words in answer["status"]["message"]
    assert not Workload.objects.exists()


def test_a_bad_manifest_is_refused_naming_the_path(world, client):
    obj = labelled()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "three"
    answer = post(client, review(obj)).json()["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    assert "manifest.spec.pytorchReplicaSpecs.Worker.replicas" in answer["status"]["message"]


def test_carol_of_another_team_may_not_use_the_queue(world, client):
    answer = post(client, review(labelled(), user="carol")).json()["response"]
    assert answer["allowed"] is False
    assert "none of your teams may use queue rd/vision" in answer["status"]["message"]


def test_malformed_bodies_and_bad_tokens(world, client):
    assert post(client, {"kind": "Nope"}).status_code == 400
    resp = client.post(f"/k8s/admission/bj/{TOKEN}/", b"{not json",
                       content_type="application/json")
    assert resp.status_code == 400
    assert post(client, review(labelled()), token="wrong").status_code == 403
    assert post(client, review(labelled()), cluster="nope").status_code == 403
    answer = post(client, review(labelled(), operation="UPDATE")).json()["response"]
    assert answer["allowed"] is True and "patch" not in answer


def test_the_backend_adopts_the_users_object(world, client, kube):
    """On the cluster: the user's object, created with the patch, is taken over by dispatch
    (same name, placed) and started."""
    from scheduling import kinds
    from scheduling.backends import PodSetSpec, WorkloadSpec
    from scheduling.backends.k8s import KubernetesBackend
    from tests.k8s_double.patches import json_patch

    obj = labelled()
    answer = post(client, review(obj)).json()["response"]
    w = Workload.objects.get()
    applied = json_patch(obj, json.loads(base64.b64decode(answer["patch"])))
    kube.state.create_namespace({"metadata": {"name": "rd-vision"}})
    kube.state.create_object("kubeflow.org", "v1", "pytorchjobs", "rd-vision", applied)
    backend = KubernetesBackend(name="bj", connection=kube.connection)
    sets = kinds.kind_of(obj).derive(manifest("PyTorchJob"))
    spec = WorkloadSpec(
        workload_id=w.pk, name=w.name, namespace="rd-vision", queue_path="rd/vision",
        pod_sets=tuple(PodSetSpec(index=i, count=s.count, flavor="a100-80g", gpus=s.gpus,
                                  cpu=s.cpu, memory_gib=s.memory_gib,
                                  node_selector=dict(A100.node_selector),
                                  nodes=("bj-a100-0",) * s.count)
                       for i, s in enumerate(sets)),
        kind=w.kind, manifest=w.manifest, object_name="resnet-ddp")
    ref = backend.create_workload(spec)
    assert ref.object_name == "resnet-ddp"
    backend.start_workload(ref)
    stored = kube.state.objects[("kubeflow.org/pytorchjobs", "rd-vision", "resnet-ddp")]
    assert stored["spec"]["runPolicy"]["suspend"] is False
    template = stored["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert template["nodeSelector"] == dict(A100.node_selector)
    assert len(kube.state.objects) == 1


def test_why_an_adopted_object_waits_is_an_event_on_it(world, client, kube):
    """The reason the cycle gives a waiting adopted workload is posted through the outbox as an
    Event regarding the user's object: `kubectl describe pytorchjob resnet-ddp` shows it."""
    from scheduling.backends import clear_backend_cache
    from scheduling.fleet.delivery import outbox_deliver
    from scheduling.models import OutboxKind, OutboxMessage
    from scheduling.services import workload_submit
    from tests.integration.scheduling.world import request

    for n in range(3):  # vision's max (24 GPUs) used up
        workload_submit(user=world.alice, data=request(f"fill-{n}", gpus=8), nudge=False)
    cycle_run(wait=True)
    obj = labelled()
    post(client, review(obj))
    w = Workload.objects.get(name="resnet-ddp")
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == WorkloadState.PENDING and w.reason_code
    row = OutboxMessage.objects.get(kind=OutboxKind.EVENT)
    assert row.cluster.name == "bj" and row.payload["workload_id"] == w.pk
    cycle_run(wait=True)  # the same reason again: no second Event
    assert OutboxMessage.objects.filter(kind=OutboxKind.EVENT).count() == 1

    kube.state.create_namespace({"metadata": {"name": "rd-vision"}})
    kube.state.create_object("kubeflow.org", "v1", "pytorchjobs", "rd-vision", obj)
    bj = Cluster.objects.get(name="bj")
    bj.backend, bj.connection = "kubernetes", {**kube.connection, "timeout_s": 2}
    bj.save()
    clear_backend_cache()
    try:
        assert outbox_deliver().delivered == [row.pk]
    finally:
        clear_backend_cache()
    events = kube.state.events_about("rd-vision", "PyTorchJob", "resnet-ddp")
    assert len(events) == 1
    assert events[0]["type"] == "Warning" and events[0]["reason"] == "Pending"
    assert events[0]["note"].startswith(f"Allot: workload {w.pk} waits: {w.reason_code}: ")


# ------------------------------------------------------------------ an adopted LeaderWorkerSet
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"


def labelled_lws(groups: int = 3, size: int = 2) -> dict:
    """vllm: `groups` groups of a leader and size-1 workers, 8 A100s a pod."""
    obj = labelled("LeaderWorkerSet")
    obj["spec"]["replicas"] = groups
    obj["spec"]["leaderWorkerTemplate"]["size"] = size
    return obj


def _lws_on_double(client, kube):
    """The user's vllm applied through the webhook's patch to the API double: its workloads
    (group order) and the object as stored."""
    from tests.k8s_double.patches import json_patch

    obj = labelled_lws()
    answer = post(client, review(obj)).json()["response"]
    applied = json_patch(obj, json.loads(base64.b64decode(answer["patch"])))
    kube.state.create_namespace({"metadata": {"name": "rd-vision"}})
    kube.state.create_object("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "rd-vision",
                             applied)
    groups = list(Workload.objects.filter(labels__has_key="allot.io/gang").order_by("pk"))
    return groups, kube.state.objects[("leaderworkerset.x-k8s.io/leaderworkersets",
                                       "rd-vision", "vllm")]


def _group_spec(w):
    from scheduling import kinds
    from scheduling.backends import PodSetSpec, WorkloadSpec
    from scheduling.backends.naming import adopted_group

    sets = kinds.kind_of(w.manifest).derive(w.manifest)
    return WorkloadSpec(
        workload_id=w.pk, name=w.name, namespace="rd-vision", queue_path="rd/vision",
        pod_sets=tuple(PodSetSpec(index=i, count=s.count, flavor="a100-80g", gpus=s.gpus,
                                  cpu=s.cpu, memory_gib=s.memory_gib,
                                  node_selector=dict(A100.node_selector),
                                  nodes=("bj-a100-0",) * s.count)
                       for i, s in enumerate(sets)),
        kind=w.kind, manifest=w.manifest, object_name="vllm", group=adopted_group(w.labels))


def _pods(kube, group: int) -> list[dict]:
    return sorted((p for (ns, _), p in kube.state.pods.items() if ns == "rd-vision"
                   and p["metadata"]["labels"].get(LWS_GROUP) == str(group)),
                  key=lambda p: p["metadata"]["name"])


def test_an_adopted_leaderworkerset_is_a_workload_per_group(world, client):
    """Three groups: three workloads vllm-0 .. vllm-2 pinned to bj and to the object vllm,
    each of one leader and one worker; the object's templates gated, its groups listed."""
    answer = post(client, review(labelled_lws())).json()["response"]
    assert answer["allowed"] is True
    groups = list(Workload.objects.order_by("pk"))
    assert [w.name for w in groups] == ["vllm-0", "vllm-1", "vllm-2"]
    for index, w in enumerate(groups):
        assert w.labels == {"allot.io/cluster": "bj", "allot.io/object": "vllm",
                            "allot.io/gang-of": "vllm", "allot.io/gang": str(index)}
        assert w.manifest["spec"]["replicas"] == 1
        assert [(ps.count, ps.gpus) for ps in w.pod_sets.order_by("index")] == [(1, 8), (1, 8)]
    ops = {op["path"]: op["value"] for op in json.loads(base64.b64decode(answer["patch"]))}
    assert ops["/metadata/labels"]["allot.io/workload-id"] == str(groups[0].pk)
    assert ops["/metadata/annotations"]["allot.io/group-workloads"] == ",".join(
        str(w.pk) for w in groups)
    base = ops["/spec"]["leaderWorkerTemplate"]
    assert ops["/spec"]["replicas"] == 3  # the user's object is not split
    for template in ("leaderTemplate", "workerTemplate"):
        assert base[template]["spec"]["schedulingGates"] == [{"name": "allot.io/admission"}]
    assert "queued as 3 workloads in rd/vision, one per replica group" in answer["warnings"][0]


def test_an_adopted_lws_asking_kai_shares_keeps_them_and_counts_fractions(world, client):
    """The user's KAI annotations stay on the pods (nothing rounds them to cards), and each
    group's pod sets count the fractions: the leader's 0.25 of a card, the worker's slice of
    20480 MiB = 0.25 of an a100-80g card (a 20 GiB slice)."""
    obj = labelled_lws(groups=2)
    lwt = obj["spec"]["leaderWorkerTemplate"]
    for name, annotation in (("leaderTemplate", {"gpu-fraction": "0.25"}),
                             ("workerTemplate", {"gpu-memory": "20480"})):
        lwt[name]["metadata"] = {"annotations": annotation}
        for c in lwt[name]["spec"]["containers"]:
            for part in ("requests", "limits"):
                c["resources"][part].pop("nvidia.com/gpu", None)
    answer = post(client, review(obj)).json()["response"]
    assert answer["allowed"] is True, answer
    groups = list(Workload.objects.order_by("pk"))
    for w in groups:
        assert [(ps.count, ps.gpus, ps.gpu_memory_gib) for ps in w.pod_sets.order_by(
            "index")] == [(1, Decimal("0.250"), None), (1, Decimal("0.250"), 20)]
    ops = {op["path"]: op["value"] for op in json.loads(base64.b64decode(answer["patch"]))}
    base = ops["/spec"]["leaderWorkerTemplate"]
    assert base["leaderTemplate"]["metadata"]["annotations"] == {"gpu-fraction": "0.25"}
    assert base["workerTemplate"]["metadata"]["annotations"] == {"gpu-memory": "20480"}


def test_an_adopted_object_with_a_bad_share_is_refused_naming_it(world, client):
    obj = labelled("Job")
    obj["spec"]["template"]["metadata"] = {"annotations": {"gpu-fraction": "abc"}}
    answer = post(client, review(obj)).json()["response"]
    assert answer["allowed"] is False
    assert "spec.template.metadata.annotations.gpu-fraction" in answer["status"]["message"]
    assert "'abc' is not a number" in answer["status"]["message"]
    assert not Workload.objects.exists()


def test_each_group_of_an_adopted_lws_is_ungated_preempted_and_ended_alone(world, client, kube):
    """On the cluster (the API double): the controller makes every group's pods gated;
    admitting group 1 places and ungates its two pods only; a pod made again after a restart
    is ungated by the next status read; preempting it deletes its pods, made again gated; the
    object is deleted once every group has ended."""
    from scheduling.backends import RunPhase
    from scheduling.backends.k8s import KubernetesBackend

    groups, stored = _lws_on_double(client, kube)
    assert len(kube.state.pods) == 6
    assert all(p["spec"]["schedulingGates"] for p in kube.state.pods.values())
    assert [p["metadata"]["name"] for p in _pods(kube, 1)] == ["vllm-1", "vllm-1-1"]
    backend = KubernetesBackend(name="bj", connection=kube.connection)
    spec = _group_spec(groups[1])
    assert spec.ref.group == 1

    ref = backend.create_workload(spec)
    backend.start_workload(ref)
    for pod in _pods(kube, 1):
        assert pod["spec"]["schedulingGates"] == []
        assert pod["spec"]["nodeSelector"] == dict(A100.node_selector)
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][-1]["values"] == ["bj-a100-0"]
        assert pod["metadata"]["labels"]["allot.io/workload-id"] == str(groups[1].pk)
    assert [p["metadata"]["labels"]["allot.io/pod-set"] for p in _pods(kube, 1)] == ["0", "1"]
    for other in (0, 2):  # the other groups wait gated
        assert all(p["spec"]["schedulingGates"] for p in _pods(kube, other))
    assert stored["spec"]["replicas"] == 3  # the object itself is unchanged
    others = backend.workload_statuses([_group_spec(groups[0]).ref])[0]
    assert others.phase == RunPhase.SUSPENDED

    assert kube.state.set_workload_pods("rd-vision", groups[1].pk, "Running") == 2
    status = backend.workload_statuses([ref])[0]
    assert status.phase == RunPhase.RUNNING
    assert [(s.count, s.running) for s in status.pod_sets] == [(1, 1), (1, 1)]

    kube.state.delete_pod("rd-vision", "vllm-1-1")  # a restart: made again, gated
    assert _pods(kube, 1)[1]["spec"]["schedulingGates"]
    backend.workload_statuses([ref])
    assert _pods(kube, 1)[1]["spec"]["schedulingGates"] == []
    assert _pods(kube, 1)[1]["metadata"]["labels"]["allot.io/workload-id"] == str(groups[1].pk)

    backend.suspend_workload(ref, 30)  # preempted: that group's pods only
    assert [p["spec"]["schedulingGates"] for p in _pods(kube, 1)] == [
        [{"name": "allot.io/admission"}]] * 2
    assert "allot.io/workload-id" not in _pods(kube, 1)[0]["metadata"]["labels"]
    assert backend.workload_statuses([ref])[0].phase == RunPhase.SUSPENDED
    backend.start_workload(ref)  # resumed
    assert all(p["spec"]["schedulingGates"] == [] for p in _pods(kube, 1))

    for w in groups[:2]:
        backend.delete_workload(_group_spec(w).ref)
    assert ("leaderworkerset.x-k8s.io/leaderworkersets", "rd-vision", "vllm") in \
        kube.state.objects
    assert all(p["spec"]["schedulingGates"] for p in _pods(kube, 1))  # ended: held back
    backend.delete_workload(_group_spec(groups[2]).ref)  # the last group ends
    assert ("leaderworkerset.x-k8s.io/leaderworkersets", "rd-vision", "vllm") not in \
        kube.state.objects


def test_the_cleanup_sees_each_group_of_an_adopted_lws(world, client, kube):
    """list_workloads (orphan sweep, resync) names each group's workload on the object."""
    from scheduling.backends.k8s import KubernetesBackend

    groups, _ = _lws_on_double(client, kube)
    backend = KubernetesBackend(name="bj", connection=kube.connection)
    refs = [r for r in backend.list_workloads() if r.kind]
    assert [(r.workload_id, r.group, r.adopted_name) for r in refs] == [
        (w.pk, i, "vllm") for i, w in enumerate(groups)]


def test_deleting_an_adopted_lws_ends_every_group(world, client, kube):
    """Groups run (on the simulated bj) or wait; then the user deletes the object: the sync
    finds it gone and every group of it is cancelled, running and waiting, its quota freed."""
    from scheduling.backends import clear_backend_cache
    from scheduling.fleet.sync import cluster_sync
    from scheduling.models import OutboxKind, OutboxMessage

    post(client, review(labelled_lws()))  # 16 GPUs a group, vision's max is 24: one runs
    cycle_run(wait=True)
    groups = list(Workload.objects.order_by("pk"))
    assert [w.state for w in groups].count(WorkloadState.RUNNING) == 1
    assert [w.state for w in groups].count(WorkloadState.PENDING) == 2

    kube.state.create_namespace({"metadata": {"name": "rd-vision"}})  # no vllm: deleted
    bj = Cluster.objects.get(name="bj")
    bj.backend, bj.connection = "kubernetes", {**kube.connection, "timeout_s": 2}
    bj.save()
    clear_backend_cache()
    try:
        report = cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
    finally:
        clear_backend_cache()
    assert sorted(report.gone) == [w.pk for w in groups]
    for w in groups:
        w.refresh_from_db()
        assert w.state == WorkloadState.CANCELLED
        assert "its LeaderWorkerSet vllm was deleted from bj" in w.events.latest("at").message
    from scheduling.models import Admission

    ran = Admission.objects.filter(workload__in=groups)
    assert ran.count() == 1 and not ran.filter(ended_at__isnull=True).exists()
    assert ran.get().end_reason == "cancelled"
    assert OutboxMessage.objects.filter(kind=OutboxKind.DELETE).count() == 1


def test_an_lws_deleted_before_any_group_ran_ends_every_group(world, client, kube):
    """The object is gone when the first group is dispatched: the refusal (`job_gone`) ends
    every group of it instead of requeueing them on a cluster that has no object for them."""
    from scheduling.backends import clear_backend_cache
    from scheduling.fleet.dispatch import cluster_dispatch

    kube.state.add_node("bj-a100-1", labels=dict(A100.node_selector), gpus=8)
    kube.state.create_namespace({"metadata": {"name": "rd-vision"}})  # vllm never arrives
    bj = Cluster.objects.get(name="bj")
    bj.backend, bj.connection = "kubernetes", {**kube.connection, "timeout_s": 2,
                                               "webhook_token": TOKEN}
    bj.save()
    clear_backend_cache()
    try:
        post(client, review(labelled_lws()))
        cycle_run(wait=True)  # one group reserved on bj (the dispatch pass creates it)
        groups = list(Workload.objects.order_by("pk"))
        assert [w.state for w in groups].count(WorkloadState.RESERVED) == 1
        report = cluster_dispatch(cluster_id=bj.pk)
    finally:
        clear_backend_cache()
    assert len(report.refused) == 1
    for w in groups:
        w.refresh_from_db()
        assert w.state == WorkloadState.CANCELLED
        assert "its LeaderWorkerSet vllm was deleted from bj" in w.events.latest("at").message


# ------------------------------------------------------ kubectl scale of an adopted LWS
def _adopted_on_kubernetes(client, kube, *, groups: int, size: int = 1, **connection):
    """bj a Kubernetes cluster (the API double, three nodes of 8 A100s; Allot knows two) and
    vllm applied to it through the webhook: its workloads in group order."""
    from scheduling.backends import clear_backend_cache
    from tests.k8s_double.patches import json_patch

    for n in (1, 2):
        kube.state.add_node(f"bj-a100-{n}", labels=dict(A100.node_selector), gpus=8)
    kube.state.create_namespace({"metadata": {"name": "rd-vision"}})
    bj = Cluster.objects.get(name="bj")
    bj.backend, bj.connection = "kubernetes", {**kube.connection, "timeout_s": 5,
                                               "webhook_token": TOKEN, **connection}
    bj.save()
    Cluster.objects.filter(name="sh").update(enabled=False)
    clear_backend_cache()
    obj = labelled_lws(groups=groups, size=size)
    answer = post(client, review(obj)).json()["response"]
    assert answer["allowed"] is True
    applied = json_patch(obj, json.loads(base64.b64decode(answer["patch"])))
    kube.state.create_object("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "rd-vision",
                             applied)
    return bj


def _stored_lws(kube):
    return kube.state.objects[("leaderworkerset.x-k8s.io/leaderworkersets", "rd-vision",
                               "vllm")]


def _scale_lws(kube, replicas: int) -> None:  # kubectl scale lws vllm --replicas N
    kube.state.patch_object("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "rd-vision",
                            "vllm", {"spec": {"replicas": replicas}},
                            "application/merge-patch+json")


def _run_groups(kube, bj):
    """A cycle, the dispatch pass, every ungated pod running, the sync."""
    from scheduling.fleet.dispatch import cluster_dispatch
    from scheduling.fleet.sync import cluster_sync

    cycle_run(wait=True)
    cluster_dispatch(cluster_id=bj.pk)
    for w in Workload.objects.filter(state=WorkloadState.RESERVED):
        kube.state.set_workload_pods("rd-vision", w.pk, "Running")
    cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)


def test_an_adopted_lws_scaled_up_queues_its_new_groups_and_scaled_down_releases_them(
        world, client, kube):
    """kubectl scale of an adopted LWS, followed by the sync: one group (a leader of 8 GPUs)
    runs; scaled to 3, groups 1 and 2 become workloads of rd/vision pinned to bj, their pods
    gated; the one that fits (bj's two nodes in Allot) is admitted and ungated, the other waits
    with its reason; scaled down to 1, both end and their quota is released."""
    from scheduling.backends import clear_backend_cache
    from scheduling.fleet.sync import cluster_sync
    from scheduling.models import Admission

    try:
        bj = _adopted_on_kubernetes(client, kube, groups=1)
        first = Workload.objects.get()
        assert first.name == "vllm" and first.labels["allot.io/gang"] == "0"
        assert _stored_lws(kube)["metadata"]["annotations"]["allot.io/group-workloads"] == \
            str(first.pk)
        _run_groups(kube, bj)
        first.refresh_from_db()
        assert first.state == WorkloadState.RUNNING
        assert [p["spec"]["schedulingGates"] for p in _pods(kube, 0)] == [[]]

        _scale_lws(kube, 3)
        assert all(p["spec"]["schedulingGates"] for g in (1, 2) for p in _pods(kube, g))
        cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
        added = list(Workload.objects.exclude(pk=first.pk).order_by("pk"))
        assert [(w.name, w.state, w.labels["allot.io/gang"]) for w in added] == [
            ("vllm-1", WorkloadState.PENDING, "1"), ("vllm-2", WorkloadState.PENDING, "2")]
        for w in added:
            assert w.labels["allot.io/cluster"] == "bj" and w.labels["allot.io/object"] == "vllm"
            assert (w.queue, w.owner, w.priority_class) == (first.queue, first.owner,
                                                           first.priority_class)
            assert [(ps.count, ps.gpus) for ps in w.pod_sets.all()] == [(1, 8)]
            assert "added by a scale on bj (1 -> 3 groups)" in w.events.get().message
        annotations = _stored_lws(kube)["metadata"]["annotations"]
        assert annotations["allot.io/group-workloads"] == ",".join(
            str(w.pk) for w in [first, *added])
        cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)  # the same: nothing new
        assert Workload.objects.count() == 3

        _run_groups(kube, bj)  # room on bj for one more leader: group 1; group 2 waits
        states = {w.name: w.state for w in Workload.objects.all()}
        assert states == {"vllm": WorkloadState.RUNNING, "vllm-1": WorkloadState.RUNNING,
                          "vllm-2": WorkloadState.PENDING}
        assert [p["spec"]["schedulingGates"] for p in _pods(kube, 1)] == [[]]
        assert _pods(kube, 1)[0]["metadata"]["labels"]["allot.io/workload-id"] == \
            str(added[0].pk)
        assert all(p["spec"]["schedulingGates"] for p in _pods(kube, 2))
        added[1].refresh_from_db()
        assert added[1].reason_code  # it says why it waits

        _scale_lws(kube, 1)  # the controller deletes groups 1 and 2
        assert _pods(kube, 1) == [] and _pods(kube, 2) == []
        cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
        for w in added:
            w.refresh_from_db()
        assert [w.state for w in added] == [WorkloadState.FINISHED, WorkloadState.CANCELLED]
        assert "scaled down on bj: 3 -> 1 groups of vllm; group 1 removed" in \
            added[0].events.latest("at").message
        assert not Admission.objects.filter(workload__in=added, ended_at__isnull=True).exists()
        assert Admission.objects.filter(ended_at__isnull=True).get().workload_id == first.pk
        assert _stored_lws(kube)["metadata"]["annotations"]["allot.io/group-workloads"] == \
            str(first.pk)

        _scale_lws(kube, 0)  # every group ends; the object is the user's: it stays
        assert _pods(kube, 0) == []
        cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
        first.refresh_from_db()
        assert first.state == WorkloadState.FINISHED
        assert not Admission.objects.filter(ended_at__isnull=True).exists()
        _run_groups(kube, bj)  # the cleanup of the ended groups (their deletes delivered)
        from scheduling.fleet.delivery import outbox_deliver

        outbox_deliver()
        assert _stored_lws(kube)["metadata"]["annotations"]["allot.io/group-workloads"] == ""
        _scale_lws(kube, 2)  # and up again: no open group left, the object's label says whose
        cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
        again = list(Workload.objects.filter(state=WorkloadState.PENDING).order_by("pk"))
        assert [(w.name, w.labels["allot.io/gang"]) for w in again] == [
            ("vllm-0", "0"), ("vllm-1", "1")]
        annotations = _stored_lws(kube)["metadata"]["annotations"]
        assert annotations["allot.io/group-workloads"] == ",".join(str(w.pk) for w in again)
        assert "allot.io/group.0" not in annotations  # the ended group 0's record is gone
        _run_groups(kube, bj)
        assert [p["spec"]["schedulingGates"] for p in _pods(kube, 0)] == [[]]
    finally:
        clear_backend_cache()


def test_an_adopted_lws_deleted_while_every_group_waits_ends_them(world, client, kube):
    """No group dispatched: the full sync reads the object itself and, once its groups are a
    minute old (the object may still be on its way after the webhook answered), ends them."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.backends import clear_backend_cache
    from scheduling.fleet.sync import cluster_sync

    try:
        bj = _adopted_on_kubernetes(client, kube, groups=2)
        kube.state.delete_object("leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
                                 "rd-vision", "vllm")
        cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False)
        assert set(Workload.objects.values_list("state", flat=True)) == {WorkloadState.PENDING}
        cluster_sync(cluster_id=bj.pk, nodes=False, nudge=False,
                     now=timezone.now() + timedelta(seconds=61))
    finally:
        clear_backend_cache()
    for w in Workload.objects.all():
        assert w.state == WorkloadState.CANCELLED
        assert "its LeaderWorkerSet vllm was deleted from bj" in w.events.latest("at").message


def test_an_adopted_lws_on_a_kai_cluster_sends_its_pods_to_kai(world, client, kube):
    """On a KAI cluster (`gpu_sharing: kai`) every pod goes to the KAI Scheduler in the
    connection's queue: the webhook writes the scheduler name and the queue label into an
    adopted LWS's templates (its pods are never made again by Allot, and a pod's scheduler
    cannot change), so each group's pods, leader and workers, carry them, gated and started."""
    from scheduling.backends import clear_backend_cache

    try:
        bj = _adopted_on_kubernetes(client, kube, groups=2, size=2, gpu_sharing="kai",
                                    kai_queue="research")
        stored = _stored_lws(kube)
        assert stored["metadata"]["labels"]["kai.scheduler/queue"] == "research"
        pods = _pods(kube, 0) + _pods(kube, 1)
        assert len(pods) == 4
        for pod in pods:
            assert pod["spec"]["schedulerName"] == "kai-scheduler"
            assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "research"
        _run_groups(kube, bj)  # group 0 admitted (16 GPUs of bj's two nodes), its pods lifted
        started = _pods(kube, 0)
        assert [p["spec"]["schedulingGates"] for p in started] == [[], []]
        assert {p["spec"]["schedulerName"] for p in started} == {"kai-scheduler"}
        assert {p["metadata"]["labels"]["kai.scheduler/queue"] for p in started} == {"research"}
    finally:
        clear_backend_cache()


def test_a_scaled_lws_is_not_deleted_by_its_removed_groups_ending(world, client, kube):
    """The removed groups' deletes may reach the cluster before the sync lists the groups
    left: while the object's replicas differ from the groups it lists, their ending never
    deletes the user's object (scaled to 1 from 3, then every listed group ending)."""
    from scheduling.backends.k8s import KubernetesBackend

    groups, _ = _lws_on_double(client, kube)
    backend = KubernetesBackend(name="bj", connection=kube.connection)
    _scale_lws(kube, 1)
    for w in groups:
        backend.delete_workload(_group_spec(w).ref)
    assert ("leaderworkerset.x-k8s.io/leaderworkersets", "rd-vision", "vllm") in \
        kube.state.objects
