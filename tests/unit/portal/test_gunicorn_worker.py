"""portal/gunicorn_worker.py: the shared table of connections per process."""

from __future__ import annotations

import pytest

from portal import gunicorn_worker as gw


@pytest.fixture(autouse=True)
def _empty_table():
    def empty() -> None:
        for slot in range(gw.SLOTS):
            gw._PIDS[slot], gw._CONNS[slot] = 0, gw.IDLE
        gw._HIGH.value = 0

    empty()
    yield
    empty()


def test_the_least_loaded_listening_sibling_counts() -> None:
    one, two, three = gw.claim(101), gw.claim(102), gw.claim(103)
    assert (one, two, three) == (0, 1, 2)
    gw._CONNS[one], gw._CONNS[two] = 7, 3  # three is not listening (stopping, or full)
    assert gw.least_loaded(one) == 3
    assert gw.least_loaded(two) == 7
    gw._CONNS[one] = gw.IDLE
    assert gw.least_loaded(two) is None  # alone: it takes every connection


def test_a_process_that_left_is_forgotten_and_its_slot_reused() -> None:
    # Killed with 0 connections, it would hold every sibling back from accepting: the
    # master's child_exit hook releases it by its pid.
    one, two = gw.claim(101), gw.claim(102)
    gw._CONNS[one], gw._CONNS[two] = 40, 0
    assert gw.least_loaded(one) == 0
    gw.release(102)
    assert gw.least_loaded(one) is None
    assert gw.claim(202) == two  # the lowest free slot, counted afresh
    assert gw.least_loaded(one) is None  # listening only once it says so
    gw._CONNS[two] = 5
    assert gw.least_loaded(one) == 5


def test_a_full_table_leaves_a_process_on_its_own() -> None:
    assert [gw.claim(1000 + n) for n in range(gw.SLOTS)] == list(range(gw.SLOTS))
    assert gw.claim(9999) is None
