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
