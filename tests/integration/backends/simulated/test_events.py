"""scheduling.backends.simulated.events (and the priority classes the cluster keeps)."""

import pytest

from scheduling.backends import ClusterEventType, PriorityClassSpec
from scheduling.backends.simulated.models import SimControl, SimEvent
from tests.integration.backends.simulated.helpers import T0, make_spec

pytestmark = pytest.mark.django_db


def test_events_and_priority_classes_are_kept(cluster, backend, clock):
    ref = backend.create_workload(make_spec())
    backend.post_event(ref, ClusterEventType.WARNING, "Preempted", "preempted by workload 9")
    event = SimEvent.objects.get()
    assert (event.job_name, event.type, event.reason, event.note, event.at) == (
        "allot-w7-0", "Warning", "Preempted", "preempted by workload 9", T0,
    )
    backend.sync_priority_classes([PriorityClassSpec("training", 1000, "training jobs")])
    backend.sync_priority_classes([PriorityClassSpec("batch-low", 100, "",
                                                     preemption_policy="Never")])
    assert SimControl.objects.get(cluster=cluster).priority_classes == {
        "training": {"value": 1000, "description": "training jobs",
                     "preemption_policy": "PreemptLowerPriority"},
        "batch-low": {"value": 100, "description": "", "preemption_policy": "Never"},
    }
