"""What the simulated backend tests use: a clock moved by hand, a workload spec, a connection
change."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from scheduling.backends import PodSetSpec, WorkloadSpec

NS = "rd-vision"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, start=T0):
        self.now = start

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += timedelta(seconds=seconds)


def set_connection(cluster, **values):
    cluster.connection = {**cluster.connection, **values}
    cluster.save(update_fields=["connection"])


def make_spec(workload_id=7, *, duration_s=600.0, pods=2, gpus=4, nodes=None, pod_sets=None):
    pod_sets = pod_sets or (
        PodSetSpec(index=0, count=pods, flavor="a100-80g", gpus=gpus, cpu=Decimal(16),
                   memory_gib=Decimal(128),
                   nodes=tuple(nodes or ["sim-bj-a100-80g-0"] * pods)),
    )
    return WorkloadSpec(
        workload_id=workload_id, name="resnet", namespace=NS, queue_path="rd/vision",
        pod_sets=tuple(pod_sets), priority_class="training", termination_grace_s=30,
        duration_s=duration_s,
    )
