"""Pacing (scheduling/pacing.py): a cycle asked for by a submission waits `pace` times the
last cycle's duration after it; one nudge is queued for the end of the pause; the beat's
cycles are never paced."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import tasks
from scheduling.models import CycleMark
from scheduling.pacing import cycle_mark

pytestmark = pytest.mark.django_db


@pytest.fixture
def cycles(monkeypatch):
    """The cycles that ran (the cycle itself is not the subject here)."""
    ran: list[bool] = []

    def fake(**kw):
        ran.append(True)
        from scheduling.workers.cycle import CycleReport

        return CycleReport(ran=True, seconds=2.0)

    monkeypatch.setattr(tasks, "cycle_run", fake)
    return ran


def _paced_nudges(sent):
    return [o for name, _, o in sent if name == "scheduling.cycle" and "eta" in o]


def test_a_nudged_cycle_right_after_a_long_one_waits_and_one_nudge_is_queued(
        settings, cycles, sent):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "cycle_pace": 1.0}
    tasks.scheduling_cycle()  # the beat's: runs, took 2 s
    mark = CycleMark.objects.get()
    assert mark.seconds == 2.0 and cycles == [True]
    assert tasks.scheduling_cycle(nudged=True) is None
    assert tasks.scheduling_cycle(nudged=True) is None  # a second nudge: still one queued
    assert cycles == [True]
    nudges = _paced_nudges(sent)
    assert len(nudges) == 1
    assert nudges[0]["eta"] == mark.ended_at + timedelta(seconds=2.0)
    tasks.scheduling_cycle()  # the beat's cycle is never paced
    assert cycles == [True, True]


def test_after_the_pause_a_nudged_cycle_runs(settings, cycles, sent):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "cycle_pace": 1.0}
    cycle_mark(ended_at=timezone.now() - timedelta(seconds=3), seconds=2.0)
    assert tasks.scheduling_cycle(nudged=True) is not None
    assert cycles == [True] and _paced_nudges(sent) == []


def test_pace_zero_turns_pacing_off(settings, cycles, sent):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "cycle_pace": 0.0}
    cycle_mark(ended_at=timezone.now(), seconds=60.0)
    assert tasks.scheduling_cycle(nudged=True) is not None
    assert cycles == [True]


def test_by_default_a_nudged_cycle_waits_twice_the_last_ones_duration(settings, cycles, sent):
    assert settings.ALLOT_WORKERS["cycle_pace"] == 2.0
    cycle_mark(ended_at=timezone.now() - timedelta(seconds=3), seconds=2.0)
    assert tasks.scheduling_cycle(nudged=True) is None  # 3 s after a 2 s cycle: 1 s to go
    assert cycles == [] and len(_paced_nudges(sent)) == 1
    cycle_mark(ended_at=timezone.now() - timedelta(seconds=4.5), seconds=2.0)
    assert tasks.scheduling_cycle(nudged=True) is not None
    assert cycles == [True]
