"""scheduling.backends.k8s.namespaces: namespaces made when missing, RBAC's 403 a refusal."""

import pytest

from scheduling.backends import DispatchRefused, RefusalReason
from tests.integration.backends.k8s.specs import NS, make_spec


def test_forbidden_namespace_is_a_refusal(kube, backend):
    kube.forbid_namespace(NS)
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.NAMESPACE_FORBIDDEN
    assert f'namespace "{NS}" forbidden on cluster bj' in refused.value.message
    assert "cannot create resource" in refused.value.message
