"""The Kubernetes backend against the HTTP-level API double (the `kube` fixture): the official
client makes real requests on loopback, and the double answers with the real paths, shapes and
Status errors."""

import pytest

from scheduling.backends.k8s import KubernetesBackend


@pytest.fixture
def backend(kube):
    return KubernetesBackend(name="bj", connection={**kube.connection, "timeout_s": 0.5})
