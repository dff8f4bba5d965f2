"""scheduling.backends.k8s.client: connections, timeouts, and what the API's answers mean."""

import time

import pytest

from scheduling.backends import BackendError, DispatchRefused, RefusalReason
from scheduling.backends.k8s import KubernetesBackend
from tests.integration.backends.k8s.specs import FLAVORS, NS, make_spec


def test_422_is_a_refusal_with_the_api_message(kube, backend):
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec(image=""))
    assert refused.value.reason is RefusalReason.INVALID
    assert "HTTP 422" in refused.value.message
    assert "spec.template.spec.containers[0].image: Required value" in refused.value.message
    assert kube.state.jobs == {}


def test_forbidden_job_creation_is_a_namespace_refusal(kube, backend):
    kube.state.create_namespace({"metadata": {"name": NS}})
    kube.fail("POST", r"/jobs$", 403, message='jobs.batch "allot-w7-0" is forbidden: User '
              '"allot" cannot create resource "jobs" in API group "batch"')
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.NAMESPACE_FORBIDDEN


def test_500_is_a_retryable_backend_error_with_status_and_message(kube, backend):
    kube.fail("POST", r"/jobs$", 500, message="etcdserver: request timed out, possibly due to "
              "previous leader failure")
    with pytest.raises(BackendError) as error:
        backend.create_workload(make_spec())
    assert error.value.status == 500 and error.value.retryable
    assert "etcdserver: request timed out" in str(error.value)
    backend.create_workload(make_spec())  # the retry succeeds
    assert (NS, "allot-w7-0") in kube.state.jobs


def test_timeout_is_a_quick_retryable_error_and_the_retry_adopts_the_job(kube, backend):
    kube.fail("POST", r"/jobs$", delay_s=1.5)  # the server creates it, the answer comes late
    started = time.monotonic()
    with pytest.raises(BackendError, match="timed out") as error:
        backend.create_workload(make_spec())
    assert time.monotonic() - started < 1.4
    assert error.value.retryable and error.value.status is None
    time.sleep(1.2)
    ref = backend.create_workload(make_spec())  # 409 -> ours -> fine
    assert ref.job_names == ("allot-w7-0",)
    assert len(kube.state.jobs) == 1


def test_wrong_token_is_not_retryable(kube):
    backend = KubernetesBackend(name="bj", connection={**kube.connection, "token": "wrong"})
    with pytest.raises(BackendError) as error:
        backend.list_nodes(FLAVORS)
    assert error.value.status == 401 and not error.value.retryable
    assert "check its credentials" in str(error.value)


def test_unreachable_cluster_is_retryable(kube):
    url = kube.url
    kube.stop()
    backend = KubernetesBackend(name="bj", connection={"host": url, "token": "t",
                                                        "timeout_s": 0.5})
    with pytest.raises(BackendError, match="unreachable") as error:
        backend.list_nodes(FLAVORS)
    assert error.value.retryable


def test_503_on_status_read_is_retryable(kube, backend):
    ref = backend.create_workload(make_spec())
    kube.fail("GET", r"/pods$", 503, message="the server is currently unable to handle it")
    with pytest.raises(BackendError) as error:
        backend.workload_status(ref)
    assert error.value.status == 503 and error.value.retryable


def test_kubeconfig_file_with_context(kube, tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(f"""
apiVersion: v1
kind: Config
clusters:
- name: bj
  cluster: {{server: "{kube.url}", insecure-skip-tls-verify: true}}
users:
- name: allot
  user: {{token: "{kube.token}"}}
contexts:
- name: bj-admin
  context: {{cluster: bj, user: allot}}
- name: other
  context: {{cluster: bj, user: nobody}}
current-context: other
""")
    backend = KubernetesBackend(
        name="bj", connection={"kubeconfig": str(kubeconfig), "context": "bj-admin"}
    )
    assert len(backend.list_nodes(FLAVORS)) == 5


def test_missing_connection_settings_are_a_clear_error():
    backend = KubernetesBackend(name="bj", connection={"speedup": 60})
    with pytest.raises(BackendError, match="needs 'kubeconfig', 'in_cluster' or 'host'") as err:
        backend.list_nodes(FLAVORS)
    assert not err.value.retryable


def test_in_cluster_config_outside_a_cluster_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    backend = KubernetesBackend(name="bj", connection={"in_cluster": True})
    with pytest.raises(BackendError, match="cannot load its Kubernetes configuration") as err:
        backend.list_nodes(FLAVORS)
    assert not err.value.retryable


def test_missing_kubeconfig_file_is_a_clear_error(tmp_path):
    backend = KubernetesBackend(name="bj", connection={"kubeconfig": str(tmp_path / "none")})
    with pytest.raises(BackendError, match="cannot load its Kubernetes configuration"):
        backend.list_nodes(FLAVORS)
