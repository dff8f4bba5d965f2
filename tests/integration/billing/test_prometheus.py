"""Telemetry end to end: a real Prometheus scraping a DCGM-format exporter, queried by metering.

Covers `DCGM_FI_PROF_GR_ENGINE_ACTIVE` under plain `namespace`/`pod` labels, the
`DCGM_FI_DEV_GPU_UTIL` fallback under `exported_namespace`/`exported_pod` (the exporter's labels
renamed because the target carries its own), a gap, and telemetry without an admission.
"""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.metering import hour_floor
from billing.models import LedgerEntry, OrphanTelemetry, UsageRecord
from billing.prometheus import PrometheusClient
from billing.services import charges_post_hour, reconciliation_run, usage_rollup_hour

from .conftest import minutes
from .promfixtures import PrometheusProcess, ReplayExporter

pytestmark = pytest.mark.slow


def gpu_labels(pod, ns, gpu):
    return {"gpu": str(gpu), "UUID": f"GPU-{pod}-{gpu}", "device": f"nvidia{gpu}",
            "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "n1", "container": "main",
            "namespace": ns, "pod": pod}


def test_hour_metered_from_real_prometheus(admit, tmp_path):
    hour = hour_floor(timezone.now()) - timedelta(hours=1)
    a = admit(gpus=8, reserved=hour, running=hour, ended=hour + minutes(30), name="a")
    c = admit(gpus=2, reserved=hour, running=hour, ended=hour + minutes(10), name="c")
    pod_a, pod_c, orphan = f"allot-w{a.workload_id}-0-0", f"allot-w{c.workload_id}-0-0", \
        "allot-w999999-0-0"

    def at(m):
        return (hour + minutes(m) + timedelta(seconds=30)).timestamp()

    plain, renamed = [], []
    for m in range(20):  # workload a: minutes 0..19 seen, 20..29 a gap
        batch = []
        for g in range(8):
            lab = gpu_labels(pod_a, "rd-vision", g)
            batch.append(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lab, 0.5, at(m)))
            batch.append(("DCGM_FI_DEV_GPU_UTIL", lab, 99, at(m)))  # ignored: profiling wins
            batch.append(("DCGM_FI_DEV_FB_USED", lab, 40960, at(m)))
        if m < 5:
            batch.append(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu_labels(orphan, "rd-vision", 0),
                          1.0, at(m)))
        plain.append(batch)
    for m in range(10):  # workload c: utilisation only, labels renamed by the target's
        renamed.append([("DCGM_FI_DEV_GPU_UTIL", gpu_labels(pod_c, "rd-vision", g), 75, at(m))
                        for g in range(2)])
    exporter = ReplayExporter({"plain": plain, "renamed": renamed})
    prom = PrometheusProcess(tmp_path, exporter, {
        "renamed": {"namespace": "gpu-operator", "pod": "dcgm-exporter-x7k2p"},
    })
    try:
        deadline = time.monotonic() + 60
        while not exporter.done() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert exporter.done(), exporter.served
        time.sleep(1.0)  # the last scrape's samples committed
        client = PrometheusClient(prom.url)
        usage_rollup_hour(hour=hour, client=client)
        records = list(UsageRecord.objects.values())
        again = usage_rollup_hour(hour=hour, client=client)
    finally:
        prom.stop()
        exporter.close()
    assert (again.created, again.updated) == (0, 0)
    assert list(UsageRecord.objects.values()) == records
    ra = UsageRecord.objects.get(admission_id=a.pk)
    assert ra.telemetry_source == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert (ra.expected_minutes, ra.telemetry_minutes, ra.gap_minutes) == (30, 20, 10)
    assert ra.active_gpu_hours == Decimal("1.3333")  # 8 x 0.5 active x 20 min
    assert ra.gap_gpu_hours == Decimal("1.3333")  # 8 reserved x 10 unseen min
    assert ra.gpu_memory_gib_hours == Decimal("106.6667")  # 8 x 40 GiB x 20 min
    assert ra.efficiency == Decimal("0.5000")
    rc = UsageRecord.objects.get(admission_id=c.pk)
    assert rc.telemetry_source == "DCGM_FI_DEV_GPU_UTIL"
    assert (rc.telemetry_minutes, rc.gap_minutes) == (10, 0)
    assert rc.active_gpu_hours == Decimal("0.2500")  # 2 x 75% x 10 min
    (o,) = OrphanTelemetry.objects.all()
    assert (o.workload_id, o.minutes, o.active_gpu_hours) == (999999, 5, Decimal("0.0833"))
    charges_post_hour(hour=hour)
    assert LedgerEntry.objects.filter(workload_id=a.workload_id).get().quantity == \
        Decimal("4.0000")  # allocation basis bills what was reserved
    run = reconciliation_run(day=hour.date())
    kinds = sorted((f.kind, f.workload_id, f.minutes) for f in run.findings.all())
    assert kinds == [("gap", a.workload_id, 10), ("orphan", 999999, 5)]


def test_mig_instances_are_metered_on_their_own_utilisation(admit, tmp_path):
    """A pod on a 3g.40gb MIG instance (3/7 of a card) of a card whose 1g.10gb instance runs
    another pod: each series (`GPU_I_ID`, `GPU_I_PROFILE`) counts for its own pod, weighed by
    what its instance is worth in cards, so a slice is never more active than it is reserved
    (0.7 busy on 3/7 of a card for 10 min: 0.05 GPU-hours active of 0.0714 reserved)."""
    from scheduling.models import PodSet

    hour = hour_floor(timezone.now()) - timedelta(hours=1)
    mig3 = admit(gpus=0, reserved=hour, running=hour, ended=hour + minutes(10), name="m3")
    mig1 = admit(gpus=0, reserved=hour, running=hour, ended=hour + minutes(10), name="m1")
    for adm, profile in ((mig3, "3g.40gb"), (mig1, "1g.10gb")):
        PodSet.objects.create(workload=adm.workload, index=0, count=1, flavors=["a100"],
                              gpus=0, resources={f"nvidia.com/mig-{profile}": 1000})

    def at(m):
        return (hour + minutes(m) + timedelta(seconds=30)).timestamp()

    def labels(adm, instance, profile):
        return {**gpu_labels(f"allot-w{adm.workload_id}-0-0", "rd-vision", 0),
                "UUID": "GPU-shared-0", "GPU_I_ID": str(instance), "GPU_I_PROFILE": profile}

    minutes_ = [[("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels(mig3, 1, "3g.40gb"), 0.7, at(m)),
                 ("DCGM_FI_DEV_FB_USED", labels(mig3, 1, "3g.40gb"), 20480, at(m)),
                 ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels(mig1, 9, "1g.10gb"), 1.0, at(m))]
                for m in range(10)]
    exporter = ReplayExporter({"plain": minutes_})
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
    r3 = UsageRecord.objects.get(admission_id=mig3.pk)
    assert r3.gpu_hours == Decimal("0.0714")  # 3/7 of a card reserved for 10 min
    assert r3.active_gpu_hours == Decimal("0.0500")  # 0.7 x 3/7 x 10 min
    assert r3.gpu_memory_gib_hours == Decimal("3.3333")  # 20 GiB x 10 min, not weighed
    assert (r3.telemetry_minutes, r3.gap_minutes) == (10, 0)
    r1 = UsageRecord.objects.get(admission_id=mig1.pk)
    assert r1.active_gpu_hours == Decimal("0.0238")  # fully busy 1/7 of a card, 10 min
    assert r1.efficiency == Decimal("1.0000")
