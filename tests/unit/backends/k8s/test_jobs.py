"""scheduling.backends.k8s.jobs: quantities written as Kubernetes expects."""

from decimal import Decimal

from scheduling.backends.k8s.jobs import format_cpu, format_memory


def test_quantities_are_formatted_as_kubernetes_expects():
    assert format_cpu(Decimal("4")) == "4"
    assert format_cpu(Decimal("0.25")) == "250m"
    assert format_memory(Decimal("80")) == "80Gi"
    assert format_memory(Decimal("0.5")) == "512Mi"


def test_extended_resources_are_written_as_limits():
    from scheduling.backends.base import PodSetSpec, WorkloadSpec
    from scheduling.backends.k8s.jobs import job_body

    pod_set = PodSetSpec(index=0, count=1, flavor="a100-mig", gpus=0, cpu=Decimal(4),
                         memory_gib=Decimal(16),
                         resources={"nvidia.com/mig-1g.10gb": 1000, "example.com/foo": 500})
    spec = WorkloadSpec(workload_id=7, name="m", namespace="rd", queue_path="rd",
                        pod_sets=(pod_set,))
    body = job_body(spec, pod_set, default_image="busybox")
    resources = body["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"example.com/foo": "500m", "nvidia.com/mig-1g.10gb": "1"}
    assert resources["requests"] == {"cpu": "4", "memory": "16Gi"}
