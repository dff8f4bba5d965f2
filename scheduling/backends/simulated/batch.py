"""Batch dispatch on a simulated cluster: many workloads created and started in a few queries,
under the same rules as one at a time (the optional BatchDispatch capability)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from core import db
from scheduling.backends.base import DispatchOutcome, DispatchRefused, RefusalReason, WorkloadSpec
from scheduling.backends.simulated.dispatch import DispatchMixin


class BatchDispatchMixin(DispatchMixin):
    """dispatch_many."""

    def dispatch_many(
        self, specs: Sequence[WorkloadSpec], *, replace: frozenset[int] = frozenset()
    ) -> list[DispatchOutcome]:
        """Create and start many workloads at once: a few queries for the whole batch.

        The same rules as create_workload + start_workload one by one (refusals, controls,
        nodes, conflicts, retried creates); the Jobs are written created-and-started in one
        transaction. Workloads in `replace` lose their previous Jobs of the same names first.
        Pods that run at once are reported running (`running`), so the caller need not wait
        for a watch to see it.
        """
        from scheduling.backends.simulated.models import SimControl, SimJob
        from scheduling.models import Node

        cluster = self._cluster()
        connection = dict(cluster.connection or {})
        outcomes: dict[int, DispatchOutcome] = {}

        def refuse(spec: WorkloadSpec, refusal: DispatchRefused) -> None:
            outcomes[spec.workload_id] = DispatchOutcome(ref=spec.ref, refused=refusal)

        todo = list(specs)
        with transaction.atomic():
            if connection.get("refuse"):
                for spec in todo:
                    refuse(spec, DispatchRefused(
                        RefusalReason.REFUSED, f"simulated cluster {self.name} refuses dispatches"))
                todo = []
            controls = SimControl.objects.select_for_update().filter(cluster=cluster).first() \
                if todo else None
            if controls is not None and controls.refuse:
                for spec in todo:
                    refuse(spec, DispatchRefused(
                        RefusalReason.REFUSED, f"simulated cluster {self.name} refuses dispatches"))
                todo = []
            if controls is not None and controls.refuse_next and todo:
                n = min(controls.refuse_next, len(todo))
                for k, spec in enumerate(todo[:n]):
                    refuse(spec, DispatchRefused(
                        RefusalReason.REFUSED,
                        f"simulated cluster {self.name} refused this dispatch (refuse-next; "
                        f"{controls.refuse_next - k - 1} more to refuse)"))
                controls.refuse_next -= n
                controls.save(update_fields=["refuse_next", "updated_at"])
                todo = todo[n:]
            checked = []
            wanted = {n for spec in todo for p in spec.pod_sets for n in p.nodes}
            ready = dict(Node.objects.filter(cluster=cluster, name__in=wanted)
                         .values_list("name", "ready")) if wanted else {}
            for spec in todo:
                try:
                    self._check_namespace(cluster, spec.namespace)
                    self._check_spec(cluster, spec, ready=ready)
                except DispatchRefused as refusal:
                    refuse(spec, refusal)
                    continue
                checked.append(spec)
            if replace and checked:
                SimJob.objects.filter(cluster=cluster, workload_id__in=[
                    s.workload_id for s in checked if s.workload_id in replace]).delete()
            names = {n for spec in checked for n in spec.ref.job_names}
            existing: dict[tuple[str, str], Any] = {
                (job.namespace, job.name): job
                for job in SimJob.objects.filter(cluster=cluster, name__in=names)
            } if names else {}
            now = self.clock()
            fail_names = set(connection.get("fail") or [])
            fail_left = controls.fail_next if controls is not None else 0
            rows, restart = [], []
            for spec in checked:
                mine = [existing[(spec.namespace, n)] for n in spec.ref.job_names
                        if (spec.namespace, n) in existing]
                owners = {job.workload_id for job in mine}
                if owners - {spec.workload_id}:
                    refuse(spec, DispatchRefused(
                        RefusalReason.CONFLICT,
                        f"Jobs {sorted(j.name for j in mine)} in namespace {spec.namespace} on "
                        f"simulated cluster {self.name} belong to workload(s) {sorted(owners)}, "
                        f"not {spec.workload_id}"))
                    continue
                fails = False
                if len(mine) < len(spec.ref.job_names) and fail_left > 0:
                    fails, fail_left = True, fail_left - 1
                for job in mine:  # a retried dispatch: created already, start what is not
                    if job.suspended:
                        job.suspended, job.started_at, job.suspended_at = False, now, None
                        job.mark(now)
                        restart.append(job)
                have = {job.name for job in mine}
                for pod_set, name in zip(spec.pod_sets, spec.ref.job_names, strict=True):
                    if name in have:
                        continue
                    job = self._new_job(cluster, spec, pod_set, name, connection, now,
                                        fails=fails or name in fail_names, suspended=False,
                                        started_at=now)
                    job.mark(now)
                    rows.append(job)
                running = all(
                    j.pods_at(now).running >= j.pods
                    for j in [*[r for r in rows if r.workload_id == spec.workload_id], *mine])
                outcomes[spec.workload_id] = DispatchOutcome(ref=spec.ref, running=running)
            if controls is not None and fail_left != controls.fail_next:
                controls.fail_next = fail_left
                controls.save(update_fields=["fail_next", "updated_at"])
            db.insert_rows(SimJob, rows)
            if restart:
                SimJob.objects.bulk_update(
                    restart, ["suspended", "started_at", "suspended_at", "touched_at",
                              "ready_at", "done_at"])
        return [outcomes[spec.workload_id] for spec in specs]
