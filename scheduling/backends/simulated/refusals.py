"""What a simulated cluster refuses: every dispatch or the next N (its connection and its
SimControl row), namespaces its connection forbids, workloads without pods or with a bad
speedup, nodes gone or not ready."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from scheduling import kinds
from scheduling.backends.base import DispatchRefused, RefusalReason, WorkloadSpec
from scheduling.backends.simulated.cluster import SimulatedCluster


class RefusalsMixin(SimulatedCluster):
    """ensure_namespace, and the checks of a dispatch before any Job is written."""

    def ensure_namespace(self, namespace: str) -> None:
        """Namespaces always exist, except those the connection forbids."""
        self._check_namespace(self._cluster(), namespace)

    def _check_namespace(self, cluster: Any, namespace: str) -> None:
        forbidden = (cluster.connection or {}).get("forbidden_namespaces") or []
        if namespace in forbidden:
            raise DispatchRefused(
                RefusalReason.NAMESPACE_FORBIDDEN,
                f'namespace "{namespace}" forbidden on simulated cluster {self.name}',
            )

    def served_kinds(self) -> list[str]:
        """The workload kinds it serves: its connection's `kinds` (apiVersion/Kind), else
        every kind Allot runs."""
        return self._served(self._cluster())

    @staticmethod
    def _served(cluster: Any) -> list[str]:
        listed = (cluster.connection or {}).get("kinds")
        return sorted(kinds.KINDS) if listed is None else sorted(
            k for k in listed if k in kinds.KINDS)

    def _refuse_or_controls(self, cluster: Any) -> dict[str, Any]:
        """Raise the refusal the cluster is set to give; else its controls (or {})."""
        from scheduling.backends.simulated.models import SimControl

        if (cluster.connection or {}).get("refuse"):
            raise DispatchRefused(
                RefusalReason.REFUSED, f"simulated cluster {self.name} refuses dispatches"
            )
        # One plain read on the common path; a row lock only when a countdown must move.
        controls: dict[str, Any] = dict(
            SimControl.objects.filter(cluster=cluster)
            .values("refuse", "refuse_next", "fail_next").first() or {}
        )
        if controls.get("refuse"):
            raise DispatchRefused(
                RefusalReason.REFUSED, f"simulated cluster {self.name} refuses dispatches"
            )
        if controls.get("refuse_next"):
            refusal = None
            # The countdown is committed here, before the refusal is raised.
            with transaction.atomic():
                control = SimControl.objects.select_for_update().get(cluster=cluster)
                if control.refuse_next:
                    control.refuse_next -= 1
                    control.save(update_fields=["refuse_next", "updated_at"])
                    refusal = DispatchRefused(
                        RefusalReason.REFUSED,
                        f"simulated cluster {self.name} refused this dispatch (refuse-next; "
                        f"{control.refuse_next} more to refuse)",
                    )
            if refusal is not None:
                raise refusal
        return controls

    def _check_spec(self, cluster: Any, spec: WorkloadSpec,
                    ready: dict[str, bool] | None = None) -> None:
        from scheduling.models import Node

        if not spec.pod_sets or any(p.count < 1 for p in spec.pod_sets):
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"workload {spec.workload_id} has no pods to create "
                f"(pod counts {[p.count for p in spec.pod_sets]})",
            )
        if spec.kind and spec.kind not in self._served(cluster):
            kind = kinds.KINDS.get(spec.kind)
            what = f"{kind.kind} ({kind.api_version}" if kind else f"({spec.kind}"
            raise DispatchRefused(
                RefusalReason.KIND_NOT_SERVED,
                f"simulated cluster {self.name} does not serve {what} is not in its API: "
                "the operator or CRD is not installed)")
        speedup = float((cluster.connection or {}).get("speedup") or 1.0)
        if speedup <= 0:
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"simulated cluster {self.name}: speedup must be > 0 (got {speedup:g})",
            )
        wanted_nodes = {n for p in spec.pod_sets for n in p.nodes}
        if not wanted_nodes:
            return
        if ready is None:
            ready = dict(
                Node.objects.filter(cluster=cluster, name__in=wanted_nodes)
                .values_list("name", "ready")
            )
        for node in sorted(wanted_nodes):
            if node not in ready:
                raise DispatchRefused(
                    RefusalReason.NODE_GONE,
                    f"node {node} no longer exists on simulated cluster {self.name}",
                )
            if not ready[node]:
                raise DispatchRefused(
                    RefusalReason.NODE_GONE,
                    f"node {node} on simulated cluster {self.name} is not ready",
                )
