"""kubectl-native submission: a member cluster's mutating admission webhook
(`admission.k8s.io/v1` AdmissionReview). An object created with the label `allot.io/queue:
<queue path, '/' written '.'>` (or Kueue's `kueue.x-k8s.io/queue-name`, mapped to the leaf
queue of its namespace) is recorded as a workload of that queue for the requesting user,
pinned to that cluster and to its own name there, and answered with a JSON patch holding it
back (suspended, or its pods gated) until Allot admits and starts it. Objects without the
label are left alone; a labelled object Allot cannot take is refused with the reason, which
`kubectl apply` prints. A pod (sent by the webhook entry for pods labelled
`allot.io/pin-cards`) gets its own card's pin (`_pin_pod`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from quotas.models import Queue
from scheduling import kinds
from scheduling.backends.naming import (
    ANNOTATION_GROUP_WORKLOADS,
    HAMI_USE_UUID,
    KAI_QUEUE_LABEL,
    KAI_SCHEDULER,
    LABEL_GANG,
    LABEL_GANG_OF,
    LABEL_MANAGED_BY,
    LABEL_OBJECT,
    LABEL_PINNED_CLUSTER,
    LABEL_QUEUE,
    LABEL_WORKLOAD_ID,
    MANAGED_BY,
    pod_card_pin,
    queue_label,
)
from scheduling.models import Cluster, WorkloadState
from scheduling.request.submission import workload_submit_detailed

QUEUE_LABEL = LABEL_QUEUE  # allot.io/queue
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class AdmissionError(ValueError):
    """Not an AdmissionReview this webhook can answer (a 400)."""


def _answer(uid: str, allowed: bool, *, message: str = "", code: int = 200,
            patch: list[dict[str, Any]] | None = None,
            warnings: list[str] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "message": message}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": response}


def _queue_of(labels: Mapping[str, str], namespace: str) -> tuple[Queue | None, str]:
    """The leaf queue the labels name, or None and why."""
    if labels.get(QUEUE_LABEL):
        path = str(labels[QUEUE_LABEL]).replace(".", "/")
        queue = Queue.objects.filter(path=path).first()
        if queue is None:
            return None, f"{QUEUE_LABEL}={labels[QUEUE_LABEL]}: no queue {path} in Allot"
    else:
        # Kueue's LocalQueue lives in its leaf's namespace: the leaf queue of the namespace.
        leaves = [q for q in Queue.objects.filter(namespace=namespace, children__isnull=True)]
        if len(leaves) != 1:
            return None, (f"{KUEUE_QUEUE_LABEL}={labels[KUEUE_QUEUE_LABEL]}: namespace "
                          f"{namespace} maps to {len(leaves)} leaf queues in Allot, not one")
        queue = leaves[0]
    queue_ns = queue.namespace or queue.path.replace("/", "-")
    if queue_ns != namespace:
        return None, (f"queue {queue.path} runs in namespace {queue_ns}, not {namespace}: "
                      "create the object there")
    return queue, ""


def _pin_pod(uid: str, pod: Mapping[str, Any]) -> dict[str, Any]:
    """A pod of a template Allot pinned per pod (HAMi, `allot.io/gpu-cards`): its own card in
    `nvidia.com/use-gpuuuid`, replacing the template's list of the set's cards. A pod without
    the list or an index is left as it is (it keeps the list)."""
    card = pod_card_pin(pod)
    if card is None:
        return _answer(uid, True)
    path = "/metadata/annotations/" + HAMI_USE_UUID.replace("~", "~0").replace("/", "~1")
    return _answer(uid, True, patch=[{"op": "add", "path": path, "value": card}])


def _kai_fields(kind: kinds.Kind, cluster: Cluster, patch: list[dict[str, Any]]) -> None:
    """On a KAI cluster, the scheduler name and queue label of every pod (the object too: KAI
    groups pods by their top owner), into the pod templates of an object whose pods are
    lifted where they are (an adopted LeaderWorkerSet's groups): a pod's scheduler cannot
    change once it exists, and the object is never made again by Allot."""
    connection = cluster.connection or {}
    if str(connection.get("gpu_sharing") or "") != "kai":
        return
    queue = str(connection.get("kai_queue") or "default-queue")
    for op in patch:
        if op["path"] == "/metadata/labels":
            op["value"][KAI_QUEUE_LABEL] = queue
        elif op["path"] == "/spec":
            for ps in kind.derive({"spec": op["value"]}):
                meta = ps.template.setdefault("metadata", {})
                meta["labels"] = {**(meta.get("labels") or {}), KAI_QUEUE_LABEL: queue}
                ps.template.setdefault("spec", {})["schedulerName"] = KAI_SCHEDULER


def admission_review(*, cluster: Cluster, review: Any) -> dict[str, Any]:
    """Answer one AdmissionReview from `cluster` (see the module); AdmissionError when the
    body is not one."""
    request = review.get("request") if isinstance(review, Mapping) else None
    if (not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview"
            or not isinstance(request, Mapping) or not request.get("uid")):
        raise AdmissionError("expected an admission.k8s.io/v1 AdmissionReview with request.uid")
    uid = str(request["uid"])
    obj = request.get("object")
    if request.get("operation") != "CREATE" or not isinstance(obj, Mapping):
        return _answer(uid, True)
    if obj.get("kind") == "Pod" or (request.get("kind") or {}).get("kind") == "Pod":
        return _pin_pod(uid, obj)
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        meta = {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        labels = {}
    if not labels.get(QUEUE_LABEL) and not labels.get(KUEUE_QUEUE_LABEL):
        return _answer(uid, True)  # not Allot's
    if labels.get(LABEL_WORKLOAD_ID):
        return _answer(uid, True)  # Allot's own object (a dispatch), already held back
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    try:
        kind = kinds.kind_of(obj)
    except kinds.ManifestError as exc:
        return _answer(uid, False, code=400, message=f"Allot: {exc}")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return _answer(uid, False, code=400, message=f"Allot: {kind.kind}: metadata.name: "
                       "required (generateName is not supported with allot.io/queue)")
    queue, why = _queue_of(labels, namespace)
    if queue is None:
        return _answer(uid, False, code=403, message=f"Allot: {why}")
    username = str((request.get("userInfo") or {}).get("username") or "")
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        return _answer(uid, False, code=403, message=f"Allot: user {username!r} has no "
                       "account in Allot: ask an admin, or submit through Allot")
    manifest = {k: v for k, v in obj.items() if k != "status"}
    manifest["metadata"] = {k: v for k, v in meta.items() if k in ("name", "labels",
                                                                   "annotations")}
    adopted = {LABEL_PINNED_CLUSTER: cluster.name, LABEL_OBJECT: name}
    if kind.gangs_fn is not None:
        # Even one group is a group of the object (its pods lifted on their own), so a
        # `kubectl scale` adds groups beside it (scheduling/fleet/group_scaling.py).
        adopted.update({LABEL_GANG_OF: name, LABEL_GANG: "0"})
    data = {"queue": queue.path, "manifest": manifest, "name": name, "labels": adopted}
    if request.get("dryRun"):
        return _answer(uid, True)
    try:
        with transaction.atomic():
            done = workload_submit_detailed(user=user, data=data)
    except ValidationError as exc:
        problems = ("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
                    if hasattr(exc, "error_dict") else "; ".join(exc.messages))
        return _answer(uid, False, code=422, message=f"Allot: {kind.kind} {name}: {problems}")
    w = done.workload
    groups = done.gangs or (w,)  # a LeaderWorkerSet of several groups: a workload each
    if w.state == WorkloadState.REJECTED:
        return _answer(uid, False, code=403, message=f"Allot: {kind.kind} {name} rejected: "
                       f"{w.reason_message}")
    patch = kind.hold_patch(obj, labels={
        LABEL_WORKLOAD_ID: str(w.pk), LABEL_MANAGED_BY: MANAGED_BY,
        QUEUE_LABEL: queue_label(queue.path)})
    if kind.gangs_fn is not None:
        # Each group's pods are gated and lifted on their own: the object lists its groups.
        for op in patch:
            if op["path"] == "/metadata/annotations":
                op["value"][ANNOTATION_GROUP_WORKLOADS] = ",".join(str(g.pk) for g in groups)
        _kai_fields(kind, cluster, patch)
    if len(groups) > 1:
        return _answer(uid, True, patch=patch, warnings=[
            f"Allot: queued as {len(groups)} workloads in {queue.path}, one per replica group "
            f"({groups[0].name} = {groups[0].pk} .. {groups[-1].name} = {groups[-1].pk}); "
            "each group starts when admitted"])
    return _answer(uid, True, patch=patch, warnings=[
        f"Allot: queued as workload {w.pk} in {queue.path}; it starts when admitted "
        f"(allot workloads get {w.pk})"])
