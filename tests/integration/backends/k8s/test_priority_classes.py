"""scheduling.backends.k8s.priority_classes: kept in line, checked before a Job names one."""

import pytest

from scheduling.backends import DispatchRefused, PriorityClassSpec, RefusalReason, RunPhase
from tests.integration.backends.k8s.specs import NS, make_spec


def test_priority_classes_are_created_patched_and_replaced(kube, backend):
    classes = [
        PriorityClassSpec("inference-high", 10000, "serving"),
        PriorityClassSpec("training", 1000, "training jobs"),
        PriorityClassSpec("batch-low", 100, "batch", preemption_policy="Never"),
    ]
    backend.sync_priority_classes(classes)
    stored = kube.state.priority_classes
    assert {n: pc["value"] for n, pc in stored.items()} == {
        "inference-high": 10000, "training": 1000, "batch-low": 100,
    }
    assert stored["batch-low"]["preemptionPolicy"] == "Never"

    before = len(kube.requests())
    backend.sync_priority_classes(classes)
    assert [r["method"] for r in kube.requests()[before:]] == ["GET"]  # nothing to change

    backend.sync_priority_classes([
        PriorityClassSpec("training", 1000, "model training"),
        PriorityClassSpec("inference-high", 20000, "serving"),
    ])
    assert stored["training"]["description"] == "model training"
    assert stored["inference-high"]["value"] == 20000  # value is immutable: replaced
    methods = [(r["method"], r["path"].rsplit("/", 1)[-1]) for r in kube.requests()]
    assert ("PATCH", "training") in methods
    assert ("DELETE", "inference-high") in methods


@pytest.mark.django_db
def test_missing_priority_class_is_synced_from_the_database_first(kube, backend):
    ref = backend.create_workload(make_spec(priority_class="training"))
    stored = kube.state.priority_classes
    assert {n: (pc["value"], pc["preemptionPolicy"]) for n, pc in stored.items()} == {
        "inference-high": (10000, "Never"), "training": (1000, "Never"),
        "batch-low": (100, "Never"),
    }  # Allot's seeded classes; Allot, not the kube-scheduler, decides preemption
    assert kube.state.jobs[(NS, ref.job_names[0])]["spec"]["template"]["spec"][
        "priorityClassName"] == "training"
    before = len(kube.requests())
    backend.create_workload(make_spec(workload_id=8, priority_class="training"))
    assert not kube.requests("GET", r"/priorityclasses/")[before:]  # known from now on


@pytest.mark.django_db
def test_priority_class_unknown_everywhere_is_refused_before_the_job_stalls(kube, backend):
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec(priority_class="nope"))
    assert refused.value.reason is RefusalReason.INVALID
    assert refused.value.message == (
        "PriorityClass nope does not exist on cluster bj, nor in Allot's priority classes "
        "to create it from"
    )
    assert kube.state.jobs == {}


def test_the_double_refuses_pods_not_jobs_of_an_unknown_priority_class(kube, backend):
    # What a real cluster does when the check above is skipped: the Job waits without pods.
    backend._known_priority_classes.add("ghost")
    ref = backend.create_workload(make_spec(priority_class="ghost"))
    backend.start_workload(ref)
    assert backend.workload_status(ref).phase is RunPhase.PENDING
    assert kube.state.pods == {}
    failed = kube.state.events_about(NS, "Job", "allot-w7-0")
    assert failed[-1]["reason"] == "FailedCreate"
    assert "no PriorityClass with name ghost was found" in failed[-1]["note"]
