"""Reasons posted on a Kubernetes cluster: `events.k8s.io/v1` Events regarding each Job of a
workload (or its object, for a workload of another kind), so `kubectl describe` shows them."""

from __future__ import annotations

import secrets
import socket
import time
from datetime import UTC, datetime

from kubernetes import client as k8s

from scheduling.backends.base import ClusterEventType, WorkloadRef
from scheduling.backends.k8s.objects import ObjectsMixin, kind_for

REPORTING_CONTROLLER = "allot.io/scheduler"


class EventsMixin(ObjectsMixin):
    """post_event."""

    def post_event(
        self, ref: WorkloadRef, type: ClusterEventType | str, reason: str, message: str
    ) -> None:
        """An events.k8s.io/v1 Event regarding each existing Job of the workload, or its
        object when it is of another kind."""
        event_type = ClusterEventType(type)
        now = datetime.now(UTC)
        instance = str(self.connection.get("instance") or f"allot-{socket.gethostname()}")[:128]
        for api_version, kind_name, name, uid in self._regarding(ref):
            body = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {
                    # client-go names events <object>.<hex nanoseconds>; the random tail
                    # keeps two reasons posted in the same instant apart.
                    "name": f"{name}.{time.time_ns():x}{secrets.token_hex(2)}",
                    "namespace": ref.namespace,
                },
                "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": instance,
                "action": reason[:128],
                "reason": reason[:128],
                "type": event_type.value,
                "note": message[:1024],
                "regarding": {
                    "apiVersion": api_version, "kind": kind_name, "name": name,
                    "namespace": ref.namespace, "uid": uid,
                },
            }
            what = f'post event {reason} on {kind_name} "{name}"'
            try:
                self._call(what, self.events.create_namespaced_event, ref.namespace, body)
            except k8s.ApiException as error:
                raise self._unexpected(what, error) from error

    def _regarding(self, ref: WorkloadRef) -> list[tuple[str, str, str, str]]:
        """(apiVersion, kind, name, uid) of each existing object the events regard."""
        if ref.kind:
            kind = kind_for(ref.kind)
            obj = self._get_object(kind, ref)
            if obj is None:
                return []  # nothing left to describe
            return [(kind.api_version, kind.kind, ref.object_name,
                     str(obj.get("metadata", {}).get("uid", "")))]
        out = []
        for name in ref.job_names:
            what = f'read Job "{name}" in namespace "{ref.namespace}"'
            try:
                job = self._call(what, self.batch.read_namespaced_job, name, ref.namespace)
            except k8s.ApiException as error:
                if error.status == 404:
                    continue  # nothing left to describe
                raise self._unexpected(what, error) from error
            out.append(("batch/v1", "Job", name, str(job.metadata.uid)))
        return out
