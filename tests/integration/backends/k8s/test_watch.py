"""scheduling.backends.k8s.watch: watching the pods of Allot's workloads from a bookmark."""

import threading
import time

import pytest

from scheduling.backends import RunPhase
from tests.integration.backends.k8s.specs import NS, make_spec
from tests.integration.backends.k8s.test_kinds import kind_spec
from tests.manifests import manifest


def test_watch_resyncs_without_a_bookmark_then_returns_at_the_first_change(kube, backend):
    first = backend.create_workload(make_spec(workload_id=3))
    backend.create_workload(make_spec(workload_id=4))
    resync = backend.watch_workloads(timeout_s=5)
    assert resync.changed == {3, 4} and resync.resource_version and not resync.expired

    backend.start_workload(first)  # a change after the bookmark is seen at once
    seen = backend.watch_workloads(timeout_s=5, resource_version=resync.resource_version)
    assert seen.changed == {3}
    watch_call = kube.requests("GET", r"/api/v1/pods$")[-1]["query"]
    assert watch_call["watch"] in ("true", "True")
    assert watch_call["labelSelector"] == "app.kubernetes.io/managed-by=allot,allot.io/workload-id"

    def pods_start_soon():
        time.sleep(0.4)
        kube.state.set_pod_phases(NS, "allot-w3-0", "Running")

    # The start made two pods: each is a change; watch from after both.
    bookmark = backend.watch_workloads(timeout_s=0).resource_version
    threading.Thread(target=pods_start_soon).start()
    started = time.monotonic()
    later = backend.watch_workloads(timeout_s=10, resource_version=bookmark)
    assert later.changed == {3}
    assert 0.3 < time.monotonic() - started < 3  # woke up by the change, not the timeout


def test_watch_times_out_empty_handed(kube, backend):
    backend.create_workload(make_spec(workload_id=3))
    bookmark = backend.watch_workloads(timeout_s=1).resource_version
    started = time.monotonic()
    quiet = backend.watch_workloads(timeout_s=1, resource_version=bookmark)
    assert quiet.changed == frozenset() and not quiet.expired
    assert 0.9 < time.monotonic() - started < 3


def test_watch_from_a_compacted_bookmark_asks_for_a_resync(kube, backend):
    backend.create_workload(make_spec(workload_id=3))
    bookmark = backend.watch_workloads(timeout_s=1).resource_version
    backend.create_workload(make_spec(workload_id=4))
    kube.state.compact()
    result = backend.watch_workloads(timeout_s=2, resource_version=bookmark)
    assert result.expired and result.changed == frozenset()


@pytest.mark.parametrize("name", ["PyTorchJob", "RayJob", "LeaderWorkerSet", "Deployment"])
def test_every_kinds_workloads_are_resynced_and_watched(kube, backend, name):
    """The resync lists each served kind's objects; their pods' changes wake the watch; an
    object's own status (its kind's conditions) is what the sync then reads."""
    kind, spec = kind_spec(name, workload_id=11)
    ref = backend.create_workload(spec)
    backend.create_workload(make_spec(workload_id=12))  # a plain Job beside it
    resync = backend.watch_workloads(timeout_s=5)
    assert resync.changed == {11, 12}
    backend.start_workload(ref)  # its pods made (or ungated): a change of workload 11
    seen = backend.watch_workloads(timeout_s=5, resource_version=resync.resource_version)
    assert seen.changed == {11}

    def pods_run_soon():
        time.sleep(0.4)
        kube.state.set_workload_pods(NS, 11, "Running")

    bookmark = backend.watch_workloads(timeout_s=0).resource_version  # after the start
    runner = threading.Thread(target=pods_run_soon)
    runner.start()
    started = time.monotonic()
    later = backend.watch_workloads(timeout_s=10, resource_version=bookmark)
    runner.join()
    assert later.changed == {11}
    assert 0.3 < time.monotonic() - started < 5  # woke by the pods, not the timeout
    assert backend.workload_status(ref).phase is RunPhase.RUNNING


def test_allot_objects_of_every_kind_are_listed_for_cleanup(kube, backend):
    kind, spec = kind_spec("PyTorchJob", workload_id=21)
    backend.create_workload(spec)
    backend.create_workload(make_spec(workload_id=22))
    adopted = manifest("RayJob")
    adopted["metadata"] = {"name": "ray-tune", "namespace": NS,
                           "labels": {"allot.io/workload-id": "23"}}
    kube.state.create_object("ray.io", "v1", "rayjobs", NS, adopted)
    refs = {r.workload_id: r for r in backend.list_workloads()}
    assert set(refs) == {21, 22, 23}
    assert (refs[21].kind, refs[21].object_name) == (kind.key, "allot-w21-0")
    assert (refs[22].kind, refs[22].job_names) == ("", ("allot-w22-0",))
    assert (refs[23].kind, refs[23].object_name) == ("ray.io/v1/RayJob", "ray-tune")
    backend.delete_workload(refs[23])  # an orphan's cleanup
    assert ("ray.io/rayjobs", NS, "ray-tune") not in kube.state.objects
