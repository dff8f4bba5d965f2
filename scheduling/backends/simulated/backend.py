"""The simulated backend: clusters from the database that run admitted workloads in real time.

A workload's Jobs are SimJob rows; pods pend for `start_delay_s`, run for the workload's
duration and succeed, all in simulated seconds (`speedup` simulated seconds per wall second).
The cluster is steered by `Cluster.connection`:

    {"speedup": 60, "start_delay_s": 5,          # clock and pod start latency
     "refuse": true,                              # refuse every dispatch
     "fail": ["allot-w12-0"], "fail_after_s": 30, # these Jobs fail after 30 s of running
     "forbidden_namespaces": ["ops"]}             # 403 on these namespaces

and at run time by its SimControl row (`manage.py sim_cluster NAME --refuse/--accept/
--fail-next N/--refuse-next N`). Nodes are the cluster's Node rows.

    cluster   the Cluster row, its Jobs, the clock; list_nodes, sync_priority_classes
    refusals  ensure_namespace; what a dispatch is refused for
    dispatch  create, start, suspend, delete a workload's Jobs; fail_job
    batch     dispatch_many
    status    workload statuses on the clock, list_workloads, watch_workloads
    events    post_event
"""

from __future__ import annotations

from scheduling.backends.simulated.batch import BatchDispatchMixin
from scheduling.backends.simulated.events import EventsMixin
from scheduling.backends.simulated.status import StatusMixin


class SimulatedBackend(BatchDispatchMixin, StatusMixin, EventsMixin):
    """A simulated cluster whose state is in the database (shared by every process).

    Built as SimulatedCluster is: `SimulatedBackend(name=..., clock=None, watch_overlap_s=0)`.
    """

    # Its state lives in the scheduling database, so the scheduling cycle may dispatch to it
    # inside its own transaction (scheduling/fleet/dispatch.py, dispatch_in_cycle).
    joins_transaction = True
