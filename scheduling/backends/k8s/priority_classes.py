"""PriorityClasses on a Kubernetes cluster: kept in line with Allot's, and checked before a Job
that names one is created (a Job whose class is missing never gets pods)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client as k8s

from scheduling.backends.base import DispatchRefused, PriorityClassSpec, RefusalReason
from scheduling.backends.flavors import priority_classes_from_db
from scheduling.backends.k8s.client import MERGE_PATCH, KubeClient
from scheduling.backends.naming import LABEL_MANAGED_BY, MANAGED_BY


class PriorityClassesMixin(KubeClient):
    """sync_priority_classes, and the priority class check of a dispatch."""

    def sync_priority_classes(self, classes: Sequence[PriorityClassSpec]) -> None:
        """Create missing classes, patch descriptions, replace those whose value changed
        (the API forbids changing `value` and `preemptionPolicy` in place)."""
        try:
            existing = {
                pc.metadata.name: pc
                for pc in self._call(
                    "list PriorityClasses", self.scheduling.list_priority_class
                ).items
            }
        except k8s.ApiException as error:
            raise self._unexpected("list PriorityClasses", error) from error
        for wanted in classes:
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": wanted.name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
                "value": int(wanted.value),
                "description": wanted.description,
                "preemptionPolicy": wanted.preemption_policy,
                "globalDefault": False,
            }
            current = existing.get(wanted.name)
            what = f'PriorityClass "{wanted.name}"'
            try:
                if current is None:
                    self._create_priority_class(body)
                elif (current.value != wanted.value
                      or (current.preemption_policy or "PreemptLowerPriority")
                      != wanted.preemption_policy):
                    self._call(f"delete {what}", self.scheduling.delete_priority_class,
                               wanted.name)
                    self._create_priority_class(body)
                elif (current.description or "") != wanted.description:
                    self._call(
                        f"patch {what}", self.scheduling.patch_priority_class, wanted.name,
                        {"description": wanted.description}, _content_type=MERGE_PATCH,
                    )
            except k8s.ApiException as error:
                raise self._unexpected(f"sync {what}", error) from error
            self._known_priority_classes.add(wanted.name)

    def _create_priority_class(self, body: dict[str, Any]) -> None:
        try:
            self._call(
                f'create PriorityClass "{body["metadata"]["name"]}"',
                self.scheduling.create_priority_class, body,
            )
        except k8s.ApiException as error:
            if error.status != 409:  # made meanwhile by another worker: fine
                raise

    def _check_priority_class(self, name: str) -> None:
        """A Job whose PriorityClass is missing is accepted but never gets pods (the Priority
        admission plugin refuses them). A missing class is synced from the database once;
        still missing, the dispatch is refused instead of left to stall."""
        if not name or name in self._known_priority_classes:
            return
        if self._priority_class_exists(name):
            self._known_priority_classes.add(name)
            return
        self.sync_priority_classes(priority_classes_from_db())
        if not self._priority_class_exists(name):
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"PriorityClass {name} does not exist on cluster {self.name}, nor in Allot's "
                "priority classes to create it from",
            )

    def _priority_class_exists(self, name: str) -> bool:
        what = f'read PriorityClass "{name}"'
        try:
            self._call(what, self.scheduling.read_priority_class, name)
        except k8s.ApiException as error:
            if error.status == 404:
                return False
            if error.status == 403:
                return True  # not allowed to read it: let the cluster decide
            raise self._unexpected(what, error) from error
        return True
