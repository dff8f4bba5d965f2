"""scheduling.backends.k8s.objects: every workload kind end to end through the Kubernetes
backend against the API double's custom-object paths and its tiny controllers: submit
(created held back and placed), admit (started), run, preempt (suspended: pods gone), resume,
finish (from the kind's own status), TTL cleanup (deleted), and a kind the cluster does not
serve refused at dispatch."""

from __future__ import annotations

import dataclasses

import pytest

from scheduling import kinds
from scheduling.backends import DispatchRefused, PodSetSpec, RefusalReason, RunPhase
from scheduling.backends.k8s import KubernetesBackend
from scheduling.kinds.base import SCHEDULING_GATE
from tests.integration.backends.k8s.specs import A100, NS, make_spec
from tests.manifests import NAMES, manifest

NODES = ("bj-a100-0", "bj-a100-1")


@pytest.fixture
def backend(kube):
    # Each kind's life is a few dozen requests: a loaded machine must not fail one of them on
    # the short read timeout the other modules' tests use (they test timeouts themselves).
    return KubernetesBackend(name="bj", connection={**kube.connection, "timeout_s": 10})


def kind_spec(name: str, workload_id: int = 7):
    obj = manifest(name)
    kind = kinds.kind_of(obj)
    sets = kind.derive(manifest(name))
    pod_sets = tuple(
        PodSetSpec(index=i, count=s.count, flavor="a100-80g", gpus=s.gpus, cpu=s.cpu,
                   memory_gib=s.memory_gib, node_selector=dict(A100.node_selector),
                   nodes=tuple(NODES[k % 2] for k in range(s.count)))
        for i, s in enumerate(sets))
    return kind, make_spec(workload_id, pod_sets=pod_sets, kind=kind.key, manifest=obj,
                           image="")


def stored(kube, kind):
    return kube.state.objects[(f"{kind.group}/{kind.plural}", NS, "allot-w7-0")]


def live_pods(kube):
    return [p for p in kube.state.pods.values()
            if p["metadata"]["labels"].get("allot.io/workload-id") == "7"
            and p["status"]["phase"] in ("Pending", "Running")]


@pytest.mark.parametrize("name", [n for n in NAMES if n != "Job"])
def test_kind_end_to_end(kube, backend, name):
    kind, spec = kind_spec(name)
    total = sum(p.count for p in spec.pod_sets)
    ref = backend.create_workload(spec)
    assert ref.kind == kind.key
    post = kube.requests("POST", rf"/apis/{kind.group}/{kind.version}/namespaces/{NS}/"
                                 rf"{kind.plural}$")[-1]
    assert post["body"]["metadata"]["name"] == "allot-w7-0"
    obj = stored(kube, kind)
    assert kind.suspended(obj)
    # Held back: no pods (suspended), or every pod gated.
    assert all(p["spec"].get("schedulingGates") for p in live_pods(kube))
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED

    backend.start_workload(ref)  # admitted
    pods = live_pods(kube)
    assert len(pods) == total
    assert not any(p["spec"].get("schedulingGates") for p in pods)
    for pod in pods:
        spec_ = pod["spec"]
        assert spec_["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        values = spec_["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
            "matchExpressions"][-1]["values"]
        assert set(values) <= set(NODES)
    assert backend.workload_status(ref).phase is RunPhase.PENDING

    kube.state.set_workload_pods(NS, 7, "Running")
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.RUNNING, status
    assert status.totals()["running"] == total

    backend.suspend_workload(ref, 30)  # preempted
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED
    assert all(p["spec"].get("schedulingGates") == [{"name": SCHEDULING_GATE}]
               for p in live_pods(kube))
    assert all(p["status"]["phase"] == "Pending" for p in live_pods(kube))

    backend.start_workload(ref)  # resumed
    kube.state.set_workload_pods(NS, 7, "Running")
    assert backend.workload_status(ref).phase is RunPhase.RUNNING

    kube.state.set_workload_pods(NS, 7, "Succeeded")
    status = backend.workload_status(ref)
    if kind.serving:
        assert status.phase is not RunPhase.SUCCEEDED
    else:
        assert status.phase is RunPhase.SUCCEEDED, (status, stored(kube, kind)["status"])

    backend.delete_workload(ref)  # the TTL cleanup
    assert (f"{kind.group}/{kind.plural}", NS, "allot-w7-0") not in kube.state.objects
    assert backend.workload_status(ref).phase is RunPhase.MISSING
    backend.delete_workload(ref)  # gone is fine


def test_batch_job_manifest_runs_as_a_job(kube, backend):
    kind, spec = kind_spec("Job")
    ref = backend.create_workload(spec)
    job = kube.state.jobs[(NS, "allot-w7-0")]
    assert job["spec"]["suspend"] is True and job["spec"]["completions"] == 8
    backend.start_workload(ref)
    assert len(live_pods(kube)) == 4
    kube.state.set_pod_phases(NS, "allot-w7-0", "Running")
    assert backend.workload_status(ref).phase is RunPhase.RUNNING


def test_failure_from_the_kinds_own_status(kube, backend):
    kind, spec = kind_spec("PyTorchJob")
    ref = backend.create_workload(spec)
    backend.start_workload(ref)
    kube.state.set_workload_pods(NS, 7, "Failed", 1)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.FAILED
    assert "Failed" in status.message


def test_kind_not_served_is_refused_with_the_reason(kube, backend):
    kube.state.unserved.add("kubeflow.org/v1")
    _, spec = kind_spec("PyTorchJob")
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(spec)
    assert refused.value.reason is RefusalReason.KIND_NOT_SERVED
    assert "does not serve PyTorchJob (kubeflow.org/v1" in refused.value.message
    assert "kubeflow.org/v1/PyTorchJob" not in backend.served_kinds()
    assert "ray.io/v1/RayJob" in backend.served_kinds()


def test_invalid_object_is_a_refusal(kube, backend):
    kind, spec = kind_spec("JobSet")
    spec.manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"] = []
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(spec)
    assert refused.value.reason is RefusalReason.INVALID


def test_api_422_is_a_refusal(kube, backend):
    kube.fail("POST", r"/pytorchjobs$", 422)
    _, spec = kind_spec("PyTorchJob")
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(spec)
    assert refused.value.reason is RefusalReason.INVALID


def test_create_twice_keeps_its_own_object(kube, backend):
    kind, spec = kind_spec("RayJob")
    backend.create_workload(spec)
    backend.create_workload(spec)
    assert len(kube.state.objects) == 1


def test_reasons_are_events_on_the_object(kube, backend):
    kind, spec = kind_spec("PyTorchJob")
    ref = backend.create_workload(spec)
    backend.post_event(ref, "Warning", "Preempted", "preempted by workload 9 (inference-high)")
    events = kube.state.events_about(NS, "PyTorchJob", "allot-w7-0")
    assert [e["note"] for e in events] == ["preempted by workload 9 (inference-high)"]
    assert events[0]["regarding"]["apiVersion"] == "kubeflow.org/v1"
    assert events[0]["regarding"]["uid"] == stored(kube, kind)["metadata"]["uid"]
    backend.delete_workload(ref)
    backend.post_event(ref, "Normal", "Gone", "nothing left")  # nothing to describe: fine


def _gates(kube) -> list[bool]:
    return sorted(bool(p["spec"].get("schedulingGates")) for p in live_pods(kube))


@pytest.mark.parametrize("name", ["Deployment", "StatefulSet"])
def test_a_scaled_object_ungates_only_its_admitted_pods(kube, backend, name):
    kind, spec = kind_spec(name)
    admitted = spec.pod_sets[0].count
    ref = backend.create_workload(spec)
    assert stored(kube, kind)["metadata"]["annotations"]["allot.io/admitted-pods"] == str(
        admitted)
    backend.start_workload(ref)
    template = kind.derive(stored(kube, kind))[0].template
    assert template["spec"]["schedulingGates"] == [{"name": SCHEDULING_GATE}]  # kept: no rollout
    assert _gates(kube) == [False] * admitted

    # Scaled up on the cluster: the added pods wait gated, the status reads the new count.
    kube.state.patch_object(kind.group, kind.version, kind.plural, NS, "allot-w7-0",
                            {"spec": {"replicas": admitted + 2}},
                            "application/merge-patch+json")
    status = backend.workload_status(ref)
    assert status.pod_sets[0].count == admitted + 2
    assert _gates(kube) == [False] * admitted + [True, True]
    backend.admit_pods(ref, admitted + 2)  # their admission
    assert _gates(kube) == [False] * (admitted + 2)

    # A pod made again (a restart) comes gated; the next status read lifts it.
    victim = sorted(p["metadata"]["name"] for p in live_pods(kube))[0]
    kube.state.delete_pod(NS, victim)
    assert _gates(kube) == [False] * (admitted + 1) + [True]
    backend.workload_status(ref)
    assert _gates(kube) == [False] * (admitted + 2)

    # Scaled down through Allot: the controller removes pods, the count follows.
    backend.scale_object(ref, 1)
    backend.admit_pods(ref, 1)
    assert _gates(kube) == [False]
    assert stored(kube, kind)["spec"]["replicas"] == 1

    # A pod's gate can only be removed: the double refuses adding one, as the API server does.
    pod = live_pods(kube)[0]
    with pytest.raises(Exception, match="422|Forbidden"):
        kube.state.patch_pod(NS, pod["metadata"]["name"], [
            {"op": "replace", "path": "/spec/schedulingGates",
             "value": [{"name": SCHEDULING_GATE}]}], "application/json-patch+json")


def test_a_scalable_object_asking_more_than_admitted_starts_only_those(kube, backend):
    # Made again after a preemption while a scale-up waits: 3 replicas, 2 admitted.
    kind, spec = kind_spec("Deployment")
    obj = manifest("Deployment")
    assert obj["spec"]["replicas"] == 3
    admitted = (dataclasses.replace(spec.pod_sets[0], count=2, nodes=NODES),)
    ref = backend.create_workload(dataclasses.replace(spec, pod_sets=admitted))
    assert stored(kube, kind)["metadata"]["annotations"]["allot.io/admitted-pods"] == "2"
    backend.start_workload(ref)
    assert _gates(kube) == [False, False, True]
