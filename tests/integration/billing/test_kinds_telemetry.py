"""Metering joins DCGM series to workloads by pod name for every kind: the pods a controller
names after an Allot object (PyTorchJob, RayJob, JobSet, TrainJob, Deployment ...) and the
pods of an object adopted from a cluster under its own name."""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing.metering import hour_floor
from billing.models import UsageRecord
from billing.prometheus import ENGINE_ACTIVE, PrometheusClient, Series
from billing.services import usage_rollup_hour
from scheduling.backends.naming import LABEL_OBJECT
from scheduling.models import Workload

from .conftest import minutes


class FakePrometheus(PrometheusClient):
    """Engine activity 0.5 on one GPU per pod for the hour's first 30 minutes."""

    def __init__(self, pods):
        super().__init__("http://prometheus.invalid")
        self.pods = pods

    def query_range(self, query, *, start, end, step_s=60):
        if ENGINE_ACTIVE not in query:
            return []
        steps = [int((start + timedelta(seconds=60 * m)).timestamp()) for m in range(30)]
        return [Series({"namespace": ns, "pod": pod}, [(ts, Decimal("0.5")) for ts in steps])
                for ns, pod in self.pods]


def test_pods_of_every_kind_and_of_adopted_objects_are_metered(admit):
    hour = hour_floor(timezone.now()) - timedelta(hours=1)
    end = hour + minutes(30)
    pytorch = admit(gpus=2, reserved=hour, running=hour, ended=end, name="ddp")
    ray = admit(gpus=2, reserved=hour, running=hour, ended=end, name="tune")
    jobset = admit(gpus=1, reserved=hour, running=hour, ended=end, name="pretrain")
    adopted = admit(gpus=2, reserved=hour, running=hour, ended=end, name="resnet-ddp")
    Workload.objects.filter(pk=adopted.workload_id).update(
        labels={LABEL_OBJECT: "resnet-ddp"}, kind="kubeflow.org/v1/PyTorchJob")
    p, r, j = (f"allot-w{a.workload_id}-0" for a in (pytorch, ray, jobset))
    pods = [
        ("rd-vision", f"{p}-master-0"), ("rd-vision", f"{p}-worker-0"),
        ("rd-vision", f"{r}-x7k2p-head-abcde"), ("rd-vision", f"{r}-x7k2p-gpu-worker-fghij"),
        ("rd-vision", f"{j}-workers-0-0-k2p9x"),
        ("rd-vision", "resnet-ddp-master-0"), ("rd-vision", "resnet-ddp-worker-0"),
        # Not the adopted object's: another name that starts alike, another namespace.
        ("rd-vision", "resnet-ddp2-worker-0"), ("rd-nlp", "resnet-ddp-worker-0"),
    ]
    usage_rollup_hour(hour=hour, client=FakePrometheus(pods))
    active = {r.admission_id: r.active_gpu_hours
              for r in UsageRecord.objects.filter(phase="running")}
    two_pods = Decimal("0.5000")  # 2 pods x 0.5 active x 30 min
    assert active == {pytorch.pk: two_pods, ray.pk: two_pods, jobset.pk: Decimal("0.2500"),
                      adopted.pk: two_pods}
