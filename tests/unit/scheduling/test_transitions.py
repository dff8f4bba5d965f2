"""The transitions table (scheduling/transitions.py)."""

from __future__ import annotations

from scheduling.models import WorkloadState
from scheduling.transitions import ALLOWED_TRANSITIONS


def test_transitions_table_closes_terminal_states():
    for state in (WorkloadState.FINISHED, WorkloadState.CANCELLED, WorkloadState.REJECTED,
                  WorkloadState.FAILED):
        assert ALLOWED_TRANSITIONS[state] == frozenset()
    assert WorkloadState.RESERVED in ALLOWED_TRANSITIONS[WorkloadState.PENDING]
    assert WorkloadState.RUNNING not in ALLOWED_TRANSITIONS[WorkloadState.PENDING]


def test_every_state_has_a_row_in_the_transitions_table():
    from scheduling.models import WorkloadState

    assert set(ALLOWED_TRANSITIONS) == set(WorkloadState.values)
    for targets in ALLOWED_TRANSITIONS.values():
        assert targets <= set(WorkloadState.values)
