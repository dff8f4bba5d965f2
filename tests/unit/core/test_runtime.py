"""The collector's settings of long-running processes (core/runtime.py)."""

from __future__ import annotations

import gc

import pytest

from core.runtime import DEFAULT_GEN0, gc_tune


@pytest.fixture(autouse=True)
def _restore_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_freezes_what_the_process_holds_and_collects_the_young_less_often(monkeypatch):
    monkeypatch.delenv("ALLOT_GC_GEN0", raising=False)
    held = [object() for _ in range(10)]
    assert gc_tune() == (DEFAULT_GEN0, 20, 100)
    assert gc.get_freeze_count() > len(held)


def test_zero_keeps_pythons_thresholds(monkeypatch):
    gc.set_threshold(700, 10, 10)
    monkeypatch.setenv("ALLOT_GC_GEN0", "0")
    assert gc_tune() == (700, 10, 10)


@pytest.mark.parametrize(("raw", "message"), [
    ("lots", "ALLOT_GC_GEN0 must be a whole number of allocations (got 'lots')"),
    ("-5", "ALLOT_GC_GEN0 must be 0 or more (got -5)"),
])
def test_a_bad_setting_is_named(monkeypatch, raw, message):
    monkeypatch.setenv("ALLOT_GC_GEN0", raw)
    with pytest.raises(ValueError) as err:
        gc_tune()
    assert str(err.value) == message


def test_gunicorns_workers_and_celerys_processes_tune_it_at_start(monkeypatch):
    import runpy
    from pathlib import Path

    from celery import signals

    monkeypatch.delenv("ALLOT_GC_GEN0", raising=False)
    conf = runpy.run_path(str(Path(__file__).resolve().parents[3] / "gunicorn.conf.py"))
    gc.set_threshold(700, 10, 10)
    conf["post_worker_init"](None)
    assert gc.get_threshold() == (DEFAULT_GEN0, 20, 100)

    import portal.celery

    for signal in (signals.worker_init, signals.worker_process_init):
        assert portal.celery._gc_tune in [r for _, r in signal.receivers], signal
    gc.set_threshold(700, 10, 10)
    portal.celery._gc_tune()
    assert gc.get_threshold() == (DEFAULT_GEN0, 20, 100)
