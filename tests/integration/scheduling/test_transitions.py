"""The transitions table enforced by the database (migration 0007): the trigger on the
workload table refuses a state change the table does not allow, whatever writes it."""

from __future__ import annotations

import itertools

import pytest
from django.db import IntegrityError, connection, transaction

from scheduling.models import Workload, WorkloadState
from scheduling.services import workload_submit
from scheduling.transitions import ALLOWED_TRANSITIONS
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db

S = WorkloadState
TABLE = Workload._meta.db_table


_copies = itertools.count()


def _in_state(workload: Workload, state: str) -> Workload:
    """A copy of `workload` inserted in `state` (the trigger checks updates only), under a
    name of its own (names are unique among a queue's open workloads)."""
    copy = Workload.objects.get(pk=workload.pk)
    copy.pk, copy.state = None, state
    copy.name = f"{workload.name}-{state}-{next(_copies)}"
    copy.save()
    return copy


def _set_state(workload_id: int, state: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f'UPDATE "{TABLE}" SET "state" = %s WHERE "id" = %s', [state, workload_id])


def test_the_database_allows_exactly_the_pairs_of_the_transitions_table(world):
    """Every pair of states tried against the database: fails when ALLOWED_TRANSITIONS changes
    without a migration creating the trigger again with the new pairs."""
    w = workload_submit(user=world.alice, data=request("all"))
    refused, allowed = [], []
    for frm in S.values:
        for to in S.values:
            if to == frm:
                continue
            moving = _in_state(w, frm)
            try:
                with transaction.atomic():
                    _set_state(moving.pk, to)
            except IntegrityError as exc:
                assert f"{frm} -> {to} is not an allowed transition" in str(exc)
                refused.append((frm, to))
            else:
                assert Workload.objects.get(pk=moving.pk).state == to
                allowed.append((frm, to))
    table = sorted((a, b) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets)
    assert sorted(allowed) == table, (
        "ALLOWED_TRANSITIONS and the database's trigger differ: refused by the database "
        f"{sorted(set(table) - set(allowed))}, allowed by the database only "
        f"{sorted(set(allowed) - set(table))}; add a migration creating the trigger again "
        "(scheduling/migrations/0007_state_transitions_in_the_database.py)")
    assert len(refused) == len(S.values) * (len(S.values) - 1) - len(table)


def test_raw_sql_moving_a_cancelled_workload_to_reserved_is_refused(world):
    w = workload_submit(user=world.alice, data=request("ended"))
    cancelled = _in_state(w, S.CANCELLED)
    with pytest.raises(IntegrityError) as caught, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE \"{TABLE}\" SET state='reserved' WHERE state='cancelled'")
    assert "cancelled -> reserved is not an allowed transition" in str(caught.value)
    if connection.vendor == "postgresql":  # SQLite's RAISE takes a literal message only
        assert f"workload {cancelled.pk}:" in str(caught.value)
    assert Workload.objects.get(pk=cancelled.pk).state == S.CANCELLED


def test_the_orm_cannot_write_a_refused_pair_either(world):
    w = workload_submit(user=world.alice, data=request("orm"))
    with pytest.raises(IntegrityError, match="pending -> running"), transaction.atomic():
        Workload.objects.filter(pk=w.pk).update(state=S.RUNNING)
    assert Workload.objects.get(pk=w.pk).state == S.PENDING


def test_writing_the_same_state_again_is_no_state_change(world):
    w = workload_submit(user=world.alice, data=request("same"))
    done = _in_state(w, S.FINISHED)
    _set_state(done.pk, S.FINISHED)
    done.reason_message = "saved with every column"
    done.save()
    assert Workload.objects.get(pk=done.pk).reason_message == "saved with every column"
