"""seed_demo --history: a past replayed through the engine and billed, consistent, once."""

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from billing.models import Invoice, LedgerEntry, ReconciliationRun, UsageRecord
from billing.services.invoices import invoice_ledger_total
from portal.demo import seed_demo
from portal.demo_history import LABEL, seed_history
from scheduling.models import Admission, Cluster, Node, Workload, WorkloadEvent

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 8, 30, tzinfo=UTC)
SPAN = timedelta(hours=72)


def test_history_replayed_consistent_billed_and_seeded_once():
    """One seeding (it takes a while), three parts."""
    seed_demo()
    history = seed_history(SPAN, now=NOW)
    _replayed_and_consistent(history)
    _billed()
    _seeded_once()


def _replayed_and_consistent(history):
    start = NOW.replace(minute=0) - SPAN
    ws = list(Workload.objects.filter(labels__has_key=LABEL))
    assert len(ws) > 100 and "workloads over 3d 0h replayed through the engine" in history[0]
    assert {w.state for w in ws} <= {"finished", "cancelled"}
    assert all(start <= w.submitted_at <= w.finished_at <= NOW for w in ws)
    # Each workload's last event is its state; every admission closed and cleaned up.
    last = {}
    for wid, typ in WorkloadEvent.objects.filter(workload__in=ws).order_by(
            "at", "pk").values_list("workload_id", "type"):
        last[wid] = typ
    assert all(last[w.pk] == w.state for w in ws)
    adms = list(Admission.objects.filter(workload__in=ws).select_related("workload"))
    assert adms and all(a.ended_at and a.cleaned_at and a.running_at for a in adms)
    assert all(a.workload.submitted_at <= a.reserved_at < a.ended_at <= NOW for a in adms)
    assert any(a.end_reason == "preempted" for a in adms) or "0 preemptions" in history[0]
    # No node ever held more GPUs than it has (the engine placed them; the writes kept it).
    capacity = dict(Node.objects.values_list("name", "gpus"))
    per_pod = {w.pk: w.pod_sets.get().gpus for w in ws}
    for a in adms:
        at = a.reserved_at
        load: dict[str, int] = defaultdict(int)
        for b in adms:
            if b.reserved_at <= at < b.ended_at:
                for node in b.nodes:
                    load[node] += per_pod[b.workload_id]
        assert all(load[n] <= capacity[n] for n in load), (a.workload.name, at)
    # The fleet was there all along.
    assert not Cluster.objects.filter(created_at__gt=start).exists()


def _billed():
    start = NOW.replace(minute=0) - SPAN
    hours = set(UsageRecord.objects.values_list("hour", flat=True))
    assert min(hours) >= start and max(hours) == NOW.replace(minute=0) - timedelta(hours=1)
    assert len(hours) > 60
    records = UsageRecord.objects.filter(phase="running")
    assert records.filter(telemetry_minutes__gt=0).count() == records.count()
    active = records.aggregate(a=Sum("active_gpu_hours"), r=Sum("gpu_hours"))
    assert 0.3 < active["a"] / active["r"] < 0.95  # synthetic DCGM activity, per job
    assert LedgerEntry.objects.aggregate(s=Sum("amount"))["s"] > 0
    assert ReconciliationRun.objects.count() == 3  # Nov 29, 30 and Dec 1
    invoices = list(Invoice.objects.all())
    assert {i.period_start.date() for i in invoices} == {date(2026, 11, 1)}
    assert len(invoices) == 2
    assert all(i.total == invoice_ledger_total(i) for i in invoices)


def _seeded_once():
    counts = (Workload.objects.count(), Admission.objects.count(), UsageRecord.objects.count())
    assert seed_history(SPAN, now=NOW) == ["  history: already seeded"]
    assert (Workload.objects.count(), Admission.objects.count(),
            UsageRecord.objects.count()) == counts


def test_the_command_refuses_a_bad_span():
    with pytest.raises(CommandError, match="--history '2w': expected days or hours"):
        call_command("seed_demo", "--history", "2w", stdout=StringIO())
    assert not Workload.objects.exists()
