"""The latest reconciliation run, as the reconciliation page shows it."""

from __future__ import annotations

from billing.models import ReconciliationRun


def latest_reconciliation() -> ReconciliationRun | None:
    """The most recent reconciliation run (with its findings)."""
    return ReconciliationRun.objects.prefetch_related("findings").first()
