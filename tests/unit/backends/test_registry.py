"""scheduling.backends.registry: the backend a cluster names."""

from types import SimpleNamespace

import pytest

from scheduling.backends import BackendError, get_backend


def test_unknown_backend_is_a_clear_error():
    cluster = SimpleNamespace(name="x", backend="slurm", connection={})
    with pytest.raises(BackendError, match="unknown backend 'slurm'"):
        get_backend(cluster)
