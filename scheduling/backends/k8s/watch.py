"""Following a Kubernetes cluster: a watch on the pods of Allot's workloads, of every kind
(each kind's pods carry Allot's labels from their placement, and every change of a workload's
state, its kind's own conditions included, comes with a change of its pods), from a
resourceVersion bookmark, returning at the first change. The resync lists Allot's Jobs and the
objects of every other kind the cluster serves."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from scheduling.backends.base import BackendError, WatchResult
from scheduling.backends.k8s.objects import ObjectsMixin
from scheduling.backends.naming import (
    LABEL_MANAGED_BY,
    LABEL_WORKLOAD_ID,
    MANAGED_BY,
    parse_job_name,
)


class WatchMixin(ObjectsMixin):
    """watch_workloads."""

    def watch_workloads(self, *, timeout_s: float, resource_version: str = "") -> WatchResult:
        """Watch the pods of Allot's workloads from the bookmark; return at the first change,
        or empty-handed after `timeout_s`. No bookmark: every workload present (its Jobs, its
        object of another kind) counts as changed, with the pods' bookmark to watch from. A
        410 (bookmark compacted away) comes back as `expired`: resync, then watch again."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_WORKLOAD_ID}"
        if not resource_version:
            try:
                listed = self._call(
                    "list Allot Jobs", self.batch.list_job_for_all_namespaces,
                    label_selector=selector,
                )
                pods = self._call(
                    "list Allot pods", self.core.list_pod_for_all_namespaces,
                    label_selector=selector, limit=1,
                )
            except k8s.ApiException as error:
                raise self._unexpected("list Allot Jobs and pods", error) from error
            ids = {p[0] for p in (parse_job_name(j.metadata.name) for j in listed.items)
                   if p is not None}
            ids |= {wid for wid in (self.object_workload_id(obj)
                                    for _, obj in self.allot_objects()) if wid is not None}
            return WatchResult(
                changed=frozenset(ids),
                resource_version=str(pods.metadata.resource_version or ""),
            )
        watcher = k8s_watch.Watch()
        changed: set[int] = set()
        bookmark = resource_version
        try:
            stream = watcher.stream(
                self.core.list_pod_for_all_namespaces, label_selector=selector,
                resource_version=resource_version, allow_watch_bookmarks=True,
                timeout_seconds=max(1, int(timeout_s)),
                _request_timeout=(self.connect_timeout, timeout_s + self.read_timeout),
            )
            events = self._watch_events(stream)
            for event in events:
                if event["type"] == "ERROR":
                    raw = event.get("raw_object") or {}
                    if raw.get("code") == 410:
                        return WatchResult(frozenset(), "", expired=True)
                    raise BackendError(
                        f"cluster {self.name}: watch pods: {raw.get('message', raw)}",
                        status=raw.get("code"),
                    )
                pod = event["object"]
                bookmark = str(pod.metadata.resource_version or bookmark)
                if event["type"] == "BOOKMARK":
                    continue
                raw_id = (pod.metadata.labels or {}).get(LABEL_WORKLOAD_ID, "")
                if str(raw_id).isdigit():
                    changed.add(int(raw_id))
                    break  # the first change is enough: the caller syncs and watches again
            events.close()  # closes the HTTP response too
        finally:
            watcher.stop()
        return WatchResult(changed=frozenset(changed), resource_version=bookmark)

    def _watch_events(
        self, stream: Iterator[dict[str, Any]]
    ) -> Generator[dict[str, Any], None, None]:
        """The watch stream with transport failures turned into BackendError."""
        try:
            yield from stream
        except k8s.ApiException as error:
            if error.status == 410:
                yield {"type": "ERROR", "raw_object": {"code": 410}}
                return
            raise self._unexpected("watch pods", error) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BackendError(f"cluster {self.name}: watch pods: {error}") from error
