"""Following a Kubernetes cluster: a watch on Allot's Jobs (their status follows their pods)
from a resourceVersion bookmark, returning at the first change."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from scheduling.backends.base import BackendError, WatchResult
from scheduling.backends.k8s.client import KubeClient
from scheduling.backends.naming import (
    LABEL_MANAGED_BY,
    LABEL_WORKLOAD_ID,
    MANAGED_BY,
    parse_job_name,
)


class WatchMixin(KubeClient):
    """watch_workloads."""

    def watch_workloads(self, *, timeout_s: float, resource_version: str = "") -> WatchResult:
        """Watch Allot's Jobs (their status follows their pods) from the bookmark; return at
        the first change, or empty-handed after `timeout_s`. A 410 (bookmark compacted away)
        comes back as `expired`: resync, then watch from the new bookmark."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_WORKLOAD_ID}"
        if not resource_version:
            try:
                listed = self._call(
                    "list Allot Jobs", self.batch.list_job_for_all_namespaces,
                    label_selector=selector,
                )
            except k8s.ApiException as error:
                raise self._unexpected("list Allot Jobs", error) from error
            ids = {parse_job_name(j.metadata.name) for j in listed.items}
            return WatchResult(
                changed=frozenset(p[0] for p in ids if p is not None),
                resource_version=str(listed.metadata.resource_version or ""),
            )
        watcher = k8s_watch.Watch()
        changed: set[int] = set()
        bookmark = resource_version
        try:
            stream = watcher.stream(
                self.batch.list_job_for_all_namespaces, label_selector=selector,
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
                        f"cluster {self.name}: watch Jobs: {raw.get('message', raw)}",
                        status=raw.get("code"),
                    )
                job = event["object"]
                bookmark = str(job.metadata.resource_version or bookmark)
                if event["type"] == "BOOKMARK":
                    continue
                parsed = parse_job_name(job.metadata.name or "")
                if parsed is not None:
                    changed.add(parsed[0])
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
            raise self._unexpected("watch Jobs", error) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BackendError(f"cluster {self.name}: watch Jobs: {error}") from error
