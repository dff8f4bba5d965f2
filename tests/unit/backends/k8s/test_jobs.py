"""scheduling.backends.k8s.jobs: quantities written as Kubernetes expects."""

from decimal import Decimal

from scheduling.backends.k8s.jobs import format_cpu, format_memory


def test_quantities_are_formatted_as_kubernetes_expects():
    assert format_cpu(Decimal("4")) == "4"
    assert format_cpu(Decimal("0.25")) == "250m"
    assert format_memory(Decimal("80")) == "80Gi"
    assert format_memory(Decimal("0.5")) == "512Mi"
