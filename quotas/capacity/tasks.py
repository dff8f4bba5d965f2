"""Celery tasks of capacity requests: hold no logic, call the service."""

from celery import shared_task

from quotas.capacity.services import capacity_requests_process_due


@shared_task(name="capacity.process_due")
def capacity_requests_process_due_task() -> dict[str, int]:
    """Apply requests whose period started and revert those whose period ended (idempotent)."""
    return capacity_requests_process_due()
