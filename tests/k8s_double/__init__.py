"""An HTTP-level Kubernetes API double for tests: `KubeDouble` serves real paths on loopback."""

from tests.k8s_double.errors import ApiError
from tests.k8s_double.server import KubeDouble
from tests.k8s_double.state import ClusterState, Fault

__all__ = ["ApiError", "ClusterState", "Fault", "KubeDouble"]
