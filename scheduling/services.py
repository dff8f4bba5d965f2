"""The workload write services that views, the API, tasks and commands call, in one list.

Each lives with its stage: what a user does on the request side (`scheduling/request/`), the
state moves in `scheduling/transitions.py`; this module only names the public ones.
"""

from scheduling.request.approvals import workload_approve, workload_deny
from scheduling.request.cancel import user_may_manage, workload_cancel
from scheduling.request.lookups import user_leaf_queues
from scheduling.request.submission import (
    workload_submit,
    workload_submit_detailed,
    workloads_submit,
)
from scheduling.request.updates import workload_resubmit, workload_update
from scheduling.transitions import TransitionError, event_new, workload_transition

__all__ = [
    "TransitionError",
    "event_new",
    "user_leaf_queues",
    "user_may_manage",
    "workload_approve",
    "workload_cancel",
    "workload_deny",
    "workload_resubmit",
    "workload_submit",
    "workload_submit_detailed",
    "workload_transition",
    "workload_update",
    "workloads_submit",
]
