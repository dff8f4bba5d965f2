"""One Kubernetes cluster's API client: how it is reached, and what its answers mean.

`Cluster.connection` is one of
    {"kubeconfig": "/path/to/config", "context": "name"}
    {"in_cluster": true}
    {"host": "https://...", "token": "...", "verify_ssl": false, "ca_cert": "/path"}
plus optional `timeout_s` (read timeout, default 10), `connect_timeout_s` (default 3) and
`default_image` (used when a workload names no image).

Requests carry short timeouts and no automatic retries: the Celery task that called the backend
decides when to retry. Answers that mean the same thing for every call (401, 429, 5xx, transport
failures) become BackendError here; the other 4xx answers are the caller's to interpret.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from scheduling.backends.base import BackendError, DispatchRefused, RefusalReason

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def status_message(error: k8s.ApiException) -> str:
    """The `message` of the Status object the API answered with (or the HTTP reason)."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(error.reason or "no message")


class KubeClient:
    """The API client of one cluster (built at the first call), its timeouts, its errors.

    The base of KubernetesBackend: the other parts of the backend call the API through it.
    """

    def __init__(
        self, *, name: str, connection: dict[str, Any], api_client: k8s.ApiClient | None = None
    ):
        self.name = name
        self.connection = dict(connection)
        self.read_timeout = float(self.connection.get("timeout_s", 10))
        self.connect_timeout = float(self.connection.get("connect_timeout_s", 3))
        self._api_client = api_client
        self._lock = threading.Lock()
        # Seen to exist on the cluster, so a dispatch does not read them again
        # (namespaces.py and priority_classes.py fill them).
        self._known_namespaces: set[str] = set()
        self._known_priority_classes: set[str] = set()

    @property
    def api_client(self) -> k8s.ApiClient:
        with self._lock:
            if self._api_client is None:
                self._api_client = self._build_client()
            return self._api_client

    def _build_client(self) -> k8s.ApiClient:
        conn = self.connection
        configuration = k8s.Configuration()
        try:
            if conn.get("in_cluster"):
                k8s_config.load_incluster_config(client_configuration=configuration)
            elif conn.get("kubeconfig"):
                k8s_config.load_kube_config(
                    config_file=conn["kubeconfig"], context=conn.get("context") or None,
                    client_configuration=configuration, persist_config=False,
                )
            elif conn.get("host"):
                configuration.host = str(conn["host"]).rstrip("/")
                if conn.get("token"):
                    configuration.api_key = {"authorization": f"Bearer {conn['token']}"}
                configuration.verify_ssl = bool(conn.get("verify_ssl", True))
                if conn.get("ca_cert"):
                    configuration.ssl_ca_cert = conn["ca_cert"]
            else:
                raise BackendError(
                    f"cluster {self.name}: connection needs 'kubeconfig', 'in_cluster' or "
                    f"'host' (got keys {sorted(conn)})",
                    retryable=False,
                )
        except (k8s_config.ConfigException, OSError) as error:
            raise BackendError(
                f"cluster {self.name}: cannot load its Kubernetes configuration: {error}",
                retryable=False,
            ) from error
        # No urllib3 retries: a timed-out call surfaces at once and the task retries it.
        configuration.retries = False
        return k8s.ApiClient(configuration)

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api_client)

    @property
    def batch(self) -> k8s.BatchV1Api:
        return k8s.BatchV1Api(self.api_client)

    @property
    def events(self) -> k8s.EventsV1Api:
        return k8s.EventsV1Api(self.api_client)

    @property
    def scheduling(self) -> k8s.SchedulingV1Api:
        return k8s.SchedulingV1Api(self.api_client)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the API with the timeouts; transport failures become a retryable BackendError.

        ApiExceptions (the API answered) pass through for the caller to interpret, except
        401, 429 and 5xx, which mean the same thing everywhere.
        """
        kwargs.setdefault("_request_timeout", (self.connect_timeout, self.read_timeout))
        try:
            return fn(*args, **kwargs)
        except k8s.ApiException as error:
            status = int(error.status or 0)
            message = status_message(error)
            if status == 0:
                raise BackendError(f"cluster {self.name}: {what}: {message}") from error
            if status == 401:
                raise BackendError(
                    f"cluster {self.name}: {what}: unauthorized ({message}); check its "
                    "credentials", status=401, retryable=False,
                ) from error
            if status == 429 or status >= 500:
                raise BackendError(
                    f"cluster {self.name}: {what}: {message}", status=status
                ) from error
            raise
        except (urllib3.exceptions.HTTPError, OSError) as error:
            # NewConnectionError subclasses the timeout error in urllib3: test it first.
            if isinstance(error, urllib3.exceptions.NewConnectionError | ConnectionError):
                kind = "unreachable"
            elif isinstance(error, urllib3.exceptions.TimeoutError | TimeoutError):
                kind = "timed out"
            else:
                kind = "unreachable"
            raise BackendError(
                f"cluster {self.name}: {what}: API {kind} (timeout {self.read_timeout:g} s) "
                f"({type(error).__name__}: {error})"
            ) from error

    @contextmanager
    def _refusals(self, what: str) -> Iterator[None]:
        """Inside a dispatch, the API's 4xx answers are refusals of this workload."""
        try:
            yield
        except k8s.ApiException as error:
            status, message = int(error.status or 0), status_message(error)
            if status == 403 and " cannot " in message:
                # RBAC: this service account may not create in that namespace.
                raise DispatchRefused(
                    RefusalReason.NAMESPACE_FORBIDDEN, f"{what}: forbidden: {message}"
                ) from error
            if status in (400, 422):
                raise DispatchRefused(
                    RefusalReason.INVALID, f"{what}: HTTP {status}: {message}"
                ) from error
            raise DispatchRefused(
                RefusalReason.API_ERROR, f"{what}: HTTP {status}: {message}"
            ) from error

    def _unexpected(self, what: str, error: k8s.ApiException) -> BackendError:
        return BackendError(
            f"cluster {self.name}: {what}: {status_message(error)}",
            status=int(error.status or 0), retryable=False,
        )
