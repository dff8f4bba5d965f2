"""portal/gunicorn_worker.py: the shared table of connections per process."""

from __future__ import annotations

import pytest

from portal import gunicorn_worker as gw


@pytest.fixture(autouse=True)
def _empty_table():
    for age in range(gw.SLOTS):
        gw.release(age)
    yield
    for age in range(gw.SLOTS):
        gw.release(age)


def _publish(age: int, pid: int, conns: int) -> None:
    gw._PIDS[age % gw.SLOTS] = pid
    gw._CONNS[age % gw.SLOTS] = conns


def test_the_least_loaded_listening_sibling_counts() -> None:
    _publish(1, 101, 7)
    _publish(2, 102, 3)
    _publish(3, 103, gw.IDLE)  # not listening (stopping, or at its connection limit)
    assert gw.least_loaded(1 % gw.SLOTS) == 3
    assert gw.least_loaded(2 % gw.SLOTS) == 7
    _publish(1, 101, gw.IDLE)
    assert gw.least_loaded(2 % gw.SLOTS) is None  # alone: it takes every connection


def test_a_process_that_left_is_forgotten() -> None:
    # Killed with 0 connections, it would hold every sibling back from accepting: the
    # master's child_exit hook releases its slot.
    _publish(1, 101, 40)
    _publish(2, 102, 0)
    assert gw.least_loaded(1) == 0
    gw.release(2)
    assert gw.least_loaded(1) is None
    # A later process of the same slot (age + SLOTS) starts afresh.
    _publish(2 + gw.SLOTS, 202, 5)
    assert gw.least_loaded(1) == 5
