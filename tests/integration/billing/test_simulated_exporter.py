"""The simulated clusters' DCGM exporter, scraped by a real Prometheus, metered by billing.

The exporter's text for each minute of a past hour (pods running on a SimulatedBackend whose
clock the test sets) is replayed with timestamps, so the whole path is the production one:
Job naming -> dcgm labels -> Prometheus -> query_range -> usage records.
"""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.metering import hour_floor
from billing.models import UsageRecord
from billing.prometheus import PrometheusClient
from billing.services import usage_rollup_hour
from scheduling.backends import PodSetSpec, WorkloadSpec
from scheduling.backends.simulated.backend import SimulatedBackend
from scheduling.backends.simulated.metrics import (
    gpu_samples,
    pod_fb_used_mib,
    pod_gpu_util,
    render_metrics,
)
from scheduling.models import Admission, Cluster, Node

from .conftest import minutes
from .promfixtures import PrometheusProcess, ReplayExporter, with_timestamp

pytestmark = pytest.mark.slow


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def test_simulated_exporter_through_prometheus(world, admit, tmp_path):
    hour = hour_floor(timezone.now()) - timedelta(hours=1)
    sim = Cluster.objects.create(name="sim-bj", backend="simulated",
                                 connection={"speedup": 1, "start_delay_s": 0})
    Node.objects.create(cluster=sim, name="sim-bj-a100-0", flavor=world["a100"], gpus=8,
                        cpu=Decimal(64), memory_gib=Decimal(512))
    adm = admit(gpus=8, reserved=hour, running=hour, ended=hour + minutes(15))
    Admission.objects.filter(pk=adm.pk).update(cluster=sim)
    backend = SimulatedBackend(name="sim-bj", clock=Clock(hour))
    ref = backend.create_workload(WorkloadSpec(
        workload_id=adm.workload_id, name="train", namespace="rd-vision",
        queue_path="rd/vision", priority_class="training", termination_grace_s=30,
        duration_s=None,
        pod_sets=(PodSetSpec(index=0, count=1, flavor="a100", gpus=8, cpu=Decimal(16),
                             memory_gib=Decimal(128), nodes=("sim-bj-a100-0",)),),
    ))
    backend.start_workload(ref)
    batches = []
    for m in range(15):
        at = hour + minutes(m) + timedelta(seconds=30)
        batches.append(with_timestamp(render_metrics(gpu_samples(sim, at)), at.timestamp()))
    pod = f"allot-w{adm.workload_id}-0-0"
    assert f'pod="{pod}"' in batches[0]
    exporter = ReplayExporter({"sim-bj": batches})
    prom = PrometheusProcess(tmp_path, exporter, {})
    try:
        deadline = time.monotonic() + 60
        while not exporter.done() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert exporter.done(), exporter.served
        time.sleep(1.0)
        usage_rollup_hour(hour=hour, client=PrometheusClient(prom.url))
    finally:
        prom.stop()
        exporter.close()
    record = UsageRecord.objects.get(admission_id=adm.pk, phase="running")
    util = Decimal(pod_gpu_util(pod)) / 100
    assert record.telemetry_source == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert (record.telemetry_minutes, record.gap_minutes) == (15, 0)
    assert record.active_gpu_hours == (8 * util * Decimal(15) / 60).quantize(Decimal("0.0001"))
    fb_gib = Decimal(pod_fb_used_mib(pod, 80 * 1024)) / 1024
    assert record.gpu_memory_gib_hours == (8 * fb_gib * Decimal(15) / 60).quantize(
        Decimal("0.0001"))


@pytest.mark.django_db
def test_a_shared_card_reports_each_pods_share(world):
    # Two quarter-card pods on card 1 of a 2-card node, a whole-card pod beside them: the
    # whole card is card 0 (not the shared one); the shared card has one sample per pod, each
    # with its fraction of the pod's activity and memory, so efficiency is per workload.
    now = timezone.now()
    sim = Cluster.objects.create(name="sim-sh", backend="simulated",
                                 connection={"speedup": 1, "start_delay_s": 0})
    Node.objects.create(cluster=sim, name="sim-sh-a100-0", flavor=world["a100"], gpus=2,
                        cpu=Decimal(64), memory_gib=Decimal(512))
    backend = SimulatedBackend(name="sim-sh", clock=Clock(now - minutes(5)))
    for wid, gpus, cards in ((101, Decimal("0.25"), (1,)), (102, Decimal("0.25"), (1,)),
                             (103, Decimal(1), ())):
        ref = backend.create_workload(WorkloadSpec(
            workload_id=wid, name=f"w{wid}", namespace="rd-vision", queue_path="rd/vision",
            priority_class="training", termination_grace_s=30, duration_s=None,
            pod_sets=(PodSetSpec(index=0, count=1, flavor="a100", gpus=gpus, cpu=Decimal(4),
                                 memory_gib=Decimal(16), nodes=("sim-sh-a100-0",),
                                 cards=cards),)))
        backend.start_workload(ref)
    samples = gpu_samples(sim, now)
    by_card = sorted((s.index, s.pod, s.util, s.fb_used_mib) for s in samples)
    quarter = [(1, f"allot-w{w}-0-0") for w in (101, 102)]
    assert [(i, p) for i, p, _, _ in by_card] == [(0, "allot-w103-0-0"), *quarter]
    for _, pod, util, fb in by_card[1:]:
        assert util == int(pod_gpu_util(pod) * Decimal("0.25"))
        assert fb == pod_fb_used_mib(pod, 80 * 1024 // 4)
