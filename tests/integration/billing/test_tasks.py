"""Celery tasks run the services for the right hours and stay idempotent; list query budgets."""

from datetime import timedelta
from decimal import Decimal
from unittest import mock

from django.utils import timezone
from rest_framework.test import APIClient

from billing import tasks
from billing.metering import hour_floor
from billing.models import LedgerEntry, ReconciliationRun, UsageRecord
from tests.factories import AdminFactory

from .conftest import minutes


def test_rollup_task_meters_the_last_hours_once(world, admit, settings):
    settings.ALLOT_PROMETHEUS_URL = ""  # no telemetry configured: minutes are gaps
    last = hour_floor(timezone.now()) - timedelta(hours=1)
    admit(gpus=8, reserved=last - minutes(90), running=last - minutes(80),
          ended=last + minutes(30))
    first = tasks.rollup_recent_hours.apply().get()
    assert first["appended"] == 4  # frozen + 3 running hours (80 min of hour -2 included)
    assert UsageRecord.objects.filter(phase="running").count() == 3
    total = LedgerEntry.objects.values_list("amount", flat=True)
    # 8 GPUs: 10 min frozen @1.00 = 1.33; running 20 + 60 + 30 min @2.50 = 6.67 + 20 + 10
    assert sum(total) == Decimal("1.33") + Decimal("6.67") + Decimal("20.00") + Decimal("10.00")
    assert tasks.rollup_recent_hours.apply().get()["appended"] == 0


def test_reconcile_task(world):
    result = tasks.reconcile_yesterday.apply().get()
    assert result["findings"] == 0
    assert ReconciliationRun.objects.get().day == (timezone.now() - timedelta(days=1)).date()


def test_telemetry_outage_retries_instead_of_recording_gaps(world, settings):
    settings.ALLOT_PROMETHEUS_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    with mock.patch.object(tasks.rollup_recent_hours, "retry", side_effect=RuntimeError("retry")):
        result = tasks.rollup_recent_hours.apply()
    assert result.failed()
    assert UsageRecord.objects.count() == 0


def test_usage_and_invoice_lists_have_a_query_budget(world, admit, django_assert_max_num_queries):
    client = APIClient()
    client.force_authenticate(AdminFactory())
    last = hour_floor(timezone.now()) - timedelta(hours=1)
    for i in range(5):
        admit(gpus=1, reserved=last, running=last, ended=last + minutes(10), name=f"w{i}")
    tasks.rollup_recent_hours.apply()
    with django_assert_max_num_queries(8):
        assert client.get("/api/v1/usage", {"group_by": "queue"}).status_code == 200
    with django_assert_max_num_queries(6):
        assert client.get("/api/v1/invoices").status_code == 200


def test_hours_due_catch_up_after_an_outage(world, admit):
    from billing.services import usage_rollup_hour
    from billing.services.usage import hours_due

    now = hour_floor(timezone.now()) + minutes(5)
    last = hour_floor(now) - timedelta(hours=1)
    assert hours_due(now=now) == [last - timedelta(hours=2), last - timedelta(hours=1), last]
    old = last - timedelta(hours=10)
    admit(gpus=1, reserved=old, running=old, ended=old + minutes(10))
    usage_rollup_hour(hour=old, now=now, telemetry={})
    due = hours_due(now=now)
    assert (due[0], due[-1], len(due)) == (old + timedelta(hours=1), last, 10)
    ancient = last - timedelta(days=30)
    admit(gpus=1, reserved=ancient, running=ancient, ended=ancient + minutes(10))
    UsageRecord.objects.all().delete()
    usage_rollup_hour(hour=ancient, now=now, telemetry={})
    assert len(hours_due(now=now)) == 7 * 24 + 1  # capped at 7 days back


def test_budgets_are_evaluated_between_rollups_on_provisional_spend(world, admit):
    """The beat's `billing.evaluate_budgets` fires a threshold that work in progress reached
    before the rollup billed any of it (billed + provisional)."""
    from django.conf import settings as django_settings

    from billing.models import BudgetFiring
    from billing.services import budget_create

    now = timezone.now()
    start = max(hour_floor(now).replace(day=1, hour=0), now - timedelta(minutes=30))
    budget_create(cost_center=world["cc"], amount=Decimal("1"), thresholds=[(50, "notify")])
    admit(gpus=8, reserved=start - timedelta(minutes=1), running=start)  # 20.00 an hour
    assert tasks.evaluate_budgets.apply().get() == {"fired": 1}
    (firing,) = BudgetFiring.objects.all()
    assert "metered since the last hourly rollup (provisional)" in firing.message
    assert tasks.evaluate_budgets.apply().get() == {"fired": 0}
    entry = django_settings.CELERY_BEAT_SCHEDULE["billing-budgets"]
    assert entry["task"] == "billing.evaluate_budgets" and entry["schedule"] == 300.0
