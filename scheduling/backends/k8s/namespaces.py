"""The namespaces Allot's Jobs go in: created when missing; RBAC's 403 is a refusal."""

from __future__ import annotations

from kubernetes import client as k8s

from scheduling.backends.base import DispatchRefused, RefusalReason
from scheduling.backends.k8s.client import KubeClient, status_message
from scheduling.backends.naming import LABEL_MANAGED_BY, MANAGED_BY


class NamespacesMixin(KubeClient):
    """ensure_namespace (a namespace seen once is not read again)."""

    def ensure_namespace(self, namespace: str) -> None:
        """Create the namespace if missing; 403 (RBAC) is a refusal naming the namespace."""
        if namespace in self._known_namespaces:
            return
        what = f'namespace "{namespace}"'
        try:
            self._call(f"read {what}", self.core.read_namespace, namespace)
        except k8s.ApiException as error:
            if error.status not in (403, 404):
                raise self._unexpected(f"read {what}", error) from error
            # 403 on read: we may still be allowed to create it (or it exists: 409).
            self._create_namespace(namespace)
        self._known_namespaces.add(namespace)

    def _create_namespace(self, namespace: str) -> None:
        body = {"metadata": {"name": namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY}}}
        try:
            self._call(f'create namespace "{namespace}"', self.core.create_namespace, body)
        except k8s.ApiException as error:
            if error.status == 409:
                return
            if error.status == 403:
                raise DispatchRefused(
                    RefusalReason.NAMESPACE_FORBIDDEN,
                    f'namespace "{namespace}" forbidden on cluster {self.name}: '
                    f"{status_message(error)}",
                ) from error
            if error.status in (400, 422):
                raise DispatchRefused(
                    RefusalReason.INVALID,
                    f'namespace "{namespace}" rejected by cluster {self.name}: '
                    f"{status_message(error)}",
                ) from error
            raise self._unexpected(f'create namespace "{namespace}"', error) from error
