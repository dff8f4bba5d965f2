"""scheduling.backends.registry: the backend of a cluster, built from its connection and cached."""

from types import SimpleNamespace

from scheduling.backends import clear_backend_cache, get_backend
from scheduling.backends.k8s import KubernetesBackend
from tests.integration.backends.k8s.specs import FLAVORS


def test_get_backend_builds_from_cluster_connection_and_caches(kube):
    clear_backend_cache()
    cluster = SimpleNamespace(name="bj", backend="kubernetes", connection=kube.connection)
    backend = get_backend(cluster)
    assert isinstance(backend, KubernetesBackend)
    assert get_backend(cluster) is backend
    assert [n.name for n in backend.list_nodes(FLAVORS)][:1] == ["bj-a100-0"]
    clear_backend_cache()
