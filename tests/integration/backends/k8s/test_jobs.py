"""scheduling.backends.k8s.jobs: the Job of each pod set, as the API stores it."""

from decimal import Decimal

from scheduling.backends import PodSetSpec, RunPhase, WorkloadRef
from tests.integration.backends.k8s.specs import A100, NS, make_spec


def test_create_makes_namespace_and_a_suspended_job_per_pod_set(kube, backend):
    kube.state.create_priority_class({"metadata": {"name": "training"}, "value": 1000})
    spec = make_spec(
        pod_sets=(
            PodSetSpec(index=0, count=1, flavor="a100-80g", gpus=0, cpu=Decimal("1.5"),
                       memory_gib=Decimal("1.5"), node_selector=dict(A100.node_selector),
                       nodes=("bj-a100-0",)),
            PodSetSpec(index=1, count=2, flavor="a100-80g", gpus=8, cpu=Decimal("32"),
                       memory_gib=Decimal("256"), node_selector=dict(A100.node_selector),
                       nodes=("bj-a100-1", "bj-a100-0")),
        ),
        priority_class="training",
    )
    ref = backend.create_workload(spec)

    assert ref == WorkloadRef(namespace=NS, workload_id=7, job_names=("allot-w7-0", "allot-w7-1"))
    namespace = kube.state.namespaces[NS]
    assert namespace["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "allot"
    job = kube.state.jobs[(NS, "allot-w7-1")]
    assert job["spec"]["suspend"] is True
    assert job["spec"]["parallelism"] == 2 and job["spec"]["completions"] == 2
    assert job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["labels"] == {
        "allot.io/team": "vision",
        "app.kubernetes.io/managed-by": "allot",
        "allot.io/workload-id": "7",
        "allot.io/queue": "rd.vision",
        "allot.io/pod-set": "1",
        "allot.io/flavor": "a100-80g",
    }
    assert job["metadata"]["annotations"]["allot.io/workload-name"] == "resnet-sweep-3"
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["priorityClassName"] == "training"
    assert pod["terminationGracePeriodSeconds"] == 45
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["image"] == "registry.local/train:1.4"
    assert container["command"] == ["python", "train.py"]
    assert container["resources"] == {
        "requests": {"cpu": "32", "memory": "256Gi"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "bj-a100-0", "bj-a100-1",
    ]
    assert job["spec"]["template"]["metadata"]["labels"]["allot.io/workload-id"] == "7"
    small = kube.state.jobs[(NS, "allot-w7-0")]["spec"]["template"]["spec"]
    assert small["containers"][0]["resources"] == {
        "requests": {"cpu": "1500m", "memory": "1536Mi"}, "limits": {},
    }
    assert "tolerations" not in small
    # Suspended Jobs hold no pods.
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED
    assert kube.state.pods == {}
