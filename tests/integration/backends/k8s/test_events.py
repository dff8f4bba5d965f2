"""scheduling.backends.k8s.events: reasons as Events regarding each Job."""

from datetime import UTC, datetime, timedelta

from scheduling.backends import ClusterEventType
from tests.integration.backends.k8s.specs import NS, make_spec


def test_reasons_are_events_regarding_the_job(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.post_event(ref, ClusterEventType.WARNING, "Preempted",
                       "preempted by workload 9 (priority 10000 > 1000) to reclaim 16 GPUs")
    events = kube.state.events_about(NS, "Job", "allot-w7-0")
    assert len(events) == 1
    event = events[0]
    assert event["type"] == "Warning"
    assert event["reason"] == "Preempted"
    assert event["note"].startswith("preempted by workload 9")
    assert event["reportingController"] == "allot.io/scheduler"
    assert event["regarding"]["uid"] == kube.state.jobs[(NS, "allot-w7-0")]["metadata"]["uid"]
    assert event["regarding"]["apiVersion"] == "batch/v1"
    # MicroTime: RFC 3339 with microseconds and a UTC offset
    event_time = datetime.fromisoformat(event["eventTime"].replace("Z", "+00:00"))
    assert event_time.utcoffset() == timedelta(0)
    assert abs((datetime.now(UTC) - event_time).total_seconds()) < 60

    backend.post_event(ref, "Normal", "Admitted", "x" * 5000)
    assert len(kube.state.events_about(NS, "Job", "allot-w7-0")[-1]["note"]) == 1024


def test_event_about_a_deleted_job_is_skipped(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.delete_workload(ref)
    backend.post_event(ref, "Normal", "Finished", "done")
    assert kube.state.events == []


def test_many_reasons_in_a_burst_are_all_kept(kube, backend):
    ref = backend.create_workload(make_spec())
    for i in range(20):
        backend.post_event(ref, "Normal", "Pending", f"waiting {i}")
    events = kube.state.events_about(NS, "Job", "allot-w7-0")
    assert [e["note"] for e in events] == [f"waiting {i}" for i in range(20)]
    assert len({e["metadata"]["name"] for e in events}) == 20
