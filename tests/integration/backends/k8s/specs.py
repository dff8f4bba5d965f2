"""What the Kubernetes backend tests dispatch: two flavors and a workload spec."""

from decimal import Decimal

from scheduling.backends import FlavorMatch, PodSetSpec, WorkloadSpec

A100 = FlavorMatch(
    name="a100-80g",
    node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    interconnect_label="allot.io/nvlink-domain",
)
H100 = FlavorMatch(name="h100", node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})


FLAVORS = [A100, H100]
NS = "rd-vision"


def make_spec(workload_id=7, *, image="registry.local/train:1.4", pod_sets=None, **extra):
    pod_sets = pod_sets or (
        PodSetSpec(
            index=0, count=2, flavor="a100-80g", gpus=8, cpu=Decimal("32"),
            memory_gib=Decimal("256"), node_selector=dict(A100.node_selector),
            nodes=("bj-a100-0", "bj-a100-1"),
        ),
    )
    values = {
        "workload_id": workload_id, "name": "resnet-sweep-3", "namespace": NS,
        "queue_path": "rd/vision", "pod_sets": tuple(pod_sets), "image": image,
        "command": ("python", "train.py"), "priority_class": "", "termination_grace_s": 45,
        "labels": {"allot.io/team": "vision"},
    }
    values.update(extra)
    return WorkloadSpec(**values)
