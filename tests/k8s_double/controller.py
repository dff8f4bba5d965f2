"""The API double's Job controller, in one synchronous step per change: a suspended Job holds no
pods, a running one `parallelism` pods (Pending until a test moves them), a Job's status follows
its pods, and a Job whose PriorityClass is missing gets none (as the Priority admission plugin
refuses them)."""

from __future__ import annotations

import copy
import threading
import uuid
from datetime import UTC, datetime

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JobController:
    """The Job controller's part of ClusterState: it works on the state's objects under its
    lock, with its helpers (`get_job`, `new_meta`, `record_job`)."""

    lock: threading.RLock
    pods: dict[tuple[str, str], dict]
    events: list[dict]
    priority_classes: dict[str, dict]

    def record_pod(self, event_type: str, pod: dict) -> None: ...

    @staticmethod
    def _pod_of(pod: dict, job: dict) -> bool:
        return pod["metadata"]["labels"].get(CONTROLLER_UID_LABEL) == job["metadata"]["uid"]

    def job_pods(self, job: dict) -> list[dict]:
        with self.lock:
            return [p for p in self.pods.values() if self._pod_of(p, job)]

    def reconcile_job(self, job: dict) -> None:
        """The Job controller, in one synchronous step: suspended Jobs hold no pods; running
        Jobs hold `parallelism` pods (Pending until a test moves them with set_pod_phases)."""
        namespace = job["metadata"]["namespace"]
        spec, status = job["spec"], job["status"]
        conditions = [c for c in status.get("conditions", []) if c["type"] != "Suspended"]
        if any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions):
            status["conditions"] = conditions
            return
        pods = self.job_pods(job)
        if spec.get("suspend"):
            for pod in pods:
                if pod["status"]["phase"] in ("Pending", "Running"):
                    del self.pods[(namespace, pod["metadata"]["name"])]
            conditions.append({
                "type": "Suspended", "status": "True", "reason": "JobSuspended",
                "message": "Job suspended", "lastTransitionTime": now_iso(),
            })
        else:
            status.setdefault("startTime", now_iso())
            if any(c.get("type") == "Suspended" for c in status.get("conditions", [])):
                conditions.append({
                    "type": "Suspended", "status": "False", "reason": "JobResumed",
                    "message": "Job resumed", "lastTransitionTime": now_iso(),
                })
            live = [p for p in pods if p["status"]["phase"] in ("Pending", "Running")]
            succeeded = sum(1 for p in pods if p["status"]["phase"] == "Succeeded")
            wanted = min(spec["parallelism"], spec["completions"] - succeeded) - len(live)
            priority = spec["template"]["spec"].get("priorityClassName")
            if wanted > 0 and priority and priority not in self.priority_classes:
                # The Priority admission plugin refuses the pods, not the Job: the Job
                # controller reports FailedCreate and the Job waits with no pods.
                self.events.append({
                    "apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": self.new_meta({"name": f"{job['metadata']['name']}.failed"},
                                              namespace),
                    "type": "Warning", "reason": "FailedCreate",
                    "reportingController": "job-controller",
                    "note": f'Error creating: pods "{job["metadata"]["name"]}-" is forbidden: '
                            f"no PriorityClass with name {priority} was found",
                    "regarding": {"apiVersion": "batch/v1", "kind": "Job",
                                  "name": job["metadata"]["name"], "namespace": namespace,
                                  "uid": job["metadata"]["uid"]},
                })
                wanted = 0
            for _ in range(max(0, wanted)):
                self._create_pod(job)
        status["conditions"] = conditions
        self.update_job_status(job)

    def _create_pod(self, job: dict) -> dict:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        template = job["spec"]["template"]
        pod_name = f"{name}-{uuid.uuid4().hex[:5]}"
        annotations = copy.deepcopy(template["metadata"].get("annotations") or {})
        if job["spec"].get("completionMode") == "Indexed":
            # The lowest index no live or succeeded pod of the Job holds, as the controller
            # gives it (annotation and label).
            taken = {p["metadata"].get("annotations", {}).get(COMPLETION_INDEX)
                     for p in self.job_pods(job) if p["status"]["phase"] != "Failed"}
            annotations[COMPLETION_INDEX] = str(next(
                i for i in range(len(taken) + 1) if str(i) not in taken))
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": self.new_meta({
                "name": pod_name, "annotations": annotations,
                "labels": copy.deepcopy(template["metadata"]["labels"]),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                     "uid": job["metadata"]["uid"], "controller": True}],
            }, namespace),
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending"},
        }
        self.pods[(namespace, pod_name)] = pod
        return pod

    def update_job_status(self, job: dict) -> None:
        pods = self.job_pods(job)
        status = job["status"]
        phases = [p["status"]["phase"] for p in pods]
        status["active"] = sum(1 for p in phases if p in ("Pending", "Running"))
        status["ready"] = sum(1 for p in phases if p == "Running")
        status["succeeded"] = sum(1 for p in phases if p == "Succeeded")
        status["failed"] = sum(1 for p in phases if p == "Failed")
        for key in ("active", "succeeded", "failed"):
            if not status[key]:
                status.pop(key)
        conditions = status.setdefault("conditions", [])
        done = {c["type"] for c in conditions if c["status"] == "True"}
        if status.get("succeeded", 0) >= job["spec"]["completions"] and "Complete" not in done:
            conditions.append({"type": "Complete", "status": "True", "lastTransitionTime":
                               now_iso()})
            status["completionTime"] = now_iso()
        if status.get("failed", 0) > job["spec"]["backoffLimit"] and "Failed" not in done:
            conditions.append({
                "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
                "lastTransitionTime": now_iso(),
            })

    def set_pod_phases(self, namespace: str, job_name: str, phase: str, count: int | None = None,
                       *, node: str = "") -> int:
        """Move up to `count` (None = all) live pods of a Job to `phase`; returns how many."""
        with self.lock:
            job = self.get_job(namespace, job_name)
            moved = 0
            for pod in sorted(self.job_pods(job), key=lambda p: p["metadata"]["name"]):
                if count is not None and moved >= count:
                    break
                if pod["status"]["phase"] in ("Succeeded", "Failed") or pod["status"][
                    "phase"
                ] == phase:
                    continue
                pod["status"]["phase"] = phase
                if node:
                    pod["spec"]["nodeName"] = node
                self.record_pod("MODIFIED", pod)
                moved += 1
            self.update_job_status(job)
            if phase == "Failed" and not job["spec"].get("suspend"):
                self.reconcile_job(job)  # the controller replaces failed pods until backoff
            if moved:
                self.record_job("MODIFIED", job)
            return moved
