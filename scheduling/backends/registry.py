"""Which backend drives a cluster: the registry of implementations, and their cache.

The implementations are imported when first asked for, so a process that only drives
simulated clusters never loads the Kubernetes client.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from scheduling.backends.base import BackendError, ClusterBackend

_cache: dict[tuple[str, str, str], ClusterBackend] = {}
_cache_lock = threading.Lock()


def _cache_key(cluster: Any) -> tuple[str, str, str]:
    connection = json.dumps(getattr(cluster, "connection", None) or {}, sort_keys=True)
    return (str(cluster.name), str(getattr(cluster, "backend", "simulated")), connection)


def get_backend(cluster: Any) -> ClusterBackend:
    """The backend for a Cluster (by `cluster.backend`: "simulated" or "kubernetes").

    Backends are cached per (name, backend, connection), so a changed connection takes effect
    at the next call and API clients are reused otherwise.
    """
    kind = str(getattr(cluster, "backend", "simulated") or "simulated")
    key = _cache_key(cluster)
    with _cache_lock:
        backend = _cache.get(key)
        if backend is not None:
            return backend
        if kind == "kubernetes":
            from scheduling.backends.k8s import KubernetesBackend

            backend = KubernetesBackend(
                name=str(cluster.name), connection=dict(cluster.connection or {})
            )
        elif kind == "simulated":
            from scheduling.backends.simulated.backend import SimulatedBackend

            backend = SimulatedBackend(
                name=str(cluster.name),
                watch_overlap_s=float((cluster.connection or {}).get("watch_overlap_s", 1.0)),
            )
        else:
            raise BackendError(
                f"cluster {cluster.name}: unknown backend {kind!r} "
                "(expected 'simulated' or 'kubernetes')",
                retryable=False,
            )
        _cache[key] = backend
        return backend


def clear_backend_cache() -> None:
    """Forget cached backends (tests, or after a kubeconfig file changed on disk)."""
    with _cache_lock:
        _cache.clear()
