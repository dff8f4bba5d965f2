"""KubernetesBackend: the ClusterBackend of a Kubernetes cluster, one API client per cluster.

Each part of the protocol lives in the module named for it; this class puts them together.
"""

from __future__ import annotations

from scheduling.backends.k8s.dispatch import DispatchMixin
from scheduling.backends.k8s.events import EventsMixin
from scheduling.backends.k8s.status import StatusMixin
from scheduling.backends.k8s.watch import WatchMixin


class KubernetesBackend(DispatchMixin, StatusMixin, WatchMixin, EventsMixin):
    """A Kubernetes cluster reached through the official client (see scheduling.backends.k8s).

    Built as KubeClient is: `KubernetesBackend(name=..., connection=..., api_client=None)`.
    """
