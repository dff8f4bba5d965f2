"""Why a workload waits, posted on its cluster as a Kubernetes Event (`kubectl describe` shows
it), for the waiting work that has an object there:

- a workload adopted from a cluster (kubectl apply with the queue label): its own object, made
  by the user before Allot admitted it;
- a scale-up of a running Deployment or StatefulSet (its added pods wait gated): the scaled
  object, Allot's (`allot-w<id>-0`, submitted through the API) or the user's (adopted).

A workload submitted through the API has no object before its admission: Allot creates it at
dispatch, so its reasons are on its timeline only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from scheduling import outbox
from scheduling.backends.naming import LABEL_OBJECT, LABEL_PINNED_CLUSTER, LABEL_SCALE_OF
from scheduling.models import Cluster, EventType, OutboxMessage, WorkloadEvent


def reason_events(now: datetime, events: Sequence[WorkloadEvent]) -> list[OutboxMessage]:
    """The outbox rows posting the new reasons among `events` (the cycle's) as Events."""
    found: list[tuple[str, int, str]] = []  # (cluster, the object's workload, the note)
    for e in events:
        if e.type != EventType.REASON:
            continue
        w = e.workload
        labels = w.labels or {}
        cluster = str(labels.get(LABEL_PINNED_CLUSTER, ""))
        if not cluster:
            continue
        scaled = str(labels.get(LABEL_SCALE_OF, ""))
        if scaled.isdigit():
            found.append((cluster, int(scaled), f"Allot: the pods added by a scale wait as "
                          f"workload {w.pk} ({w.name}): {e.code}: {e.message}"))
        elif LABEL_OBJECT in labels:
            found.append((cluster, w.pk, f"Allot: workload {w.pk} waits: {e.code}: "
                          f"{e.message}"))
    if not found:
        return []
    clusters = dict(Cluster.objects.filter(name__in={c for c, _, _ in found})
                    .values_list("name", "pk"))
    return [outbox.message_event(workload_id=wid, cluster_id=clusters[name], at=now,
                                 type="Warning", reason="Pending", message=note)
            for name, wid, note in found if name in clusters]
