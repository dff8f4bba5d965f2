"""Daily reconciliation without Prometheus: billed without telemetry, re-runs replace findings."""

from datetime import timedelta

from billing.metering import WorkloadTelemetry
from billing.models import ReconciliationFinding
from billing.services import reconciliation_run, usage_rollup_hour

from .conftest import H, minutes


def test_billed_without_telemetry_and_orphans(admit):
    silent = admit(gpus=4, reserved=H, running=H, ended=H + minutes(30), name="silent")
    cpu = admit(gpus=0, cpu="4", flavor="cpu", reserved=H, running=H, ended=H + minutes(30),
                name="cpu-only")
    ghost = WorkloadTelemetry(active={int((H + minutes(m + 1)).timestamp()): 1 for m in range(3)},
                              namespace="rd-vision")
    usage_rollup_hour(hour=H, now=H + timedelta(days=1), telemetry={424242: ghost})
    run = reconciliation_run(day=H.date(), now=H + timedelta(days=1))
    got = [(f.kind, f.workload_id, f.minutes, str(f.gpu_hours))
           for f in run.findings.order_by("kind")]
    assert got == [("no_telemetry", silent.workload_id, 30, "2.0000"),
                   ("orphan", 424242, 3, "0.0500")]
    assert cpu.workload_id not in [f.workload_id for f in run.findings.all()]  # no GPUs
    assert "30 running minutes without samples" in run.findings.get(kind="no_telemetry").message
    again = reconciliation_run(day=H.date(), now=H + timedelta(days=1))
    assert again.pk == run.pk and ReconciliationFinding.objects.count() == 2


def test_demo_seed_is_idempotent(db):
    from billing.demo import seed
    from billing.models import Budget, CostCenter, RateCard, TeamCostCenter
    from quotas.models import Flavor, Team

    for name in ("a100-80g", "cpu"):
        Flavor.objects.create(name=name)
    Team.objects.create(name="vision")
    Team.objects.create(name="search")
    seed()
    counts = (CostCenter.objects.count(), RateCard.objects.count(), Budget.objects.count(),
              TeamCostCenter.objects.count())
    assert counts == (2, 3, 2, 2)
    seed()
    assert counts == (CostCenter.objects.count(), RateCard.objects.count(),
                      Budget.objects.count(), TeamCostCenter.objects.count())
    assert TeamCostCenter.objects.get(team__name="search").cost_center.charge_basis == "hybrid"
