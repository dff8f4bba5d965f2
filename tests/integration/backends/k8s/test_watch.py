"""scheduling.backends.k8s.watch: watching Allot's Jobs from a bookmark."""

import threading
import time

from tests.integration.backends.k8s.specs import NS, make_spec


def test_watch_resyncs_without_a_bookmark_then_returns_at_the_first_change(kube, backend):
    first = backend.create_workload(make_spec(workload_id=3))
    backend.create_workload(make_spec(workload_id=4))
    resync = backend.watch_workloads(timeout_s=5)
    assert resync.changed == {3, 4} and resync.resource_version and not resync.expired

    backend.start_workload(first)  # a change after the bookmark is seen at once
    seen = backend.watch_workloads(timeout_s=5, resource_version=resync.resource_version)
    assert seen.changed == {3}
    watch_call = kube.requests("GET", r"/apis/batch/v1/jobs$")[-1]["query"]
    assert watch_call["watch"] in ("true", "True")
    assert watch_call["labelSelector"] == "app.kubernetes.io/managed-by=allot,allot.io/workload-id"

    def pods_start_soon():
        time.sleep(0.4)
        kube.state.set_pod_phases(NS, "allot-w3-0", "Running")

    threading.Thread(target=pods_start_soon).start()
    started = time.monotonic()
    later = backend.watch_workloads(timeout_s=10, resource_version=seen.resource_version)
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
