"""A Kubernetes cluster's nodes: the inventory (allocatable resources, readiness, flavor and
rack of each node), and the check that the nodes chosen for a workload can still take it.

Allocatable quantities are read with the project's one parser, core.quantity's: on the canonical
forms the API server reports it gives the Kubernetes client's exact Decimal (the forms it
refuses, such as `1K` or `NaN`, are not ones a node reports).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s

from core.quantity import GIB, QuantityError, parse_quantity, resource_name_problem, to_base
from scheduling.backends.base import (
    DispatchRefused,
    FlavorMatch,
    NodeInfo,
    RefusalReason,
    WorkloadSpec,
)
from scheduling.backends.flavors import load_flavor_matches, match_flavor
from scheduling.backends.k8s.client import KubeClient

GPU_RESOURCE = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
COUNT_LABEL = "nvidia.com/gpu.count"
HAMI_REGISTER = "hami.io/node-nvidia-register"
MILLI = Decimal("0.001")
# Allocatable resources with fields of their own (or none in Allot): the rest are extended.
OWN_FIELDS = frozenset({GPU_RESOURCE, "cpu", "memory", "pods"})


def hami_card_uuids(annotations: Mapping[str, str] | None) -> list[str]:
    """A node's card UUIDs by index, from HAMi's device registration (empty if absent)."""
    raw = (annotations or {}).get(HAMI_REGISTER)
    if not raw:
        return []
    try:
        devices = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(devices, list):
        return []
    found = sorted((int(d.get("index") or 0), str(d.get("id") or ""))
                   for d in devices if isinstance(d, dict))
    return [uuid for _, uuid in found]


def physical_cards(labels: Mapping[str, str], annotations: Mapping[str, str] | None,
                   allocatable: int) -> int:
    """The node's cards. A shared card is advertised several times (HAMi's vGPUs, the device
    plugin's time-slicing replicas): HAMi's device registration lists the cards, and GPU
    feature discovery labels `nvidia.com/gpu.count` (the cards) when `nvidia.com/gpu.replicas`
    is above 1. Otherwise the allocatable count is the cards."""
    devices = hami_card_uuids(annotations)
    if devices:
        return len(devices)
    try:
        replicas = int(labels.get(REPLICAS_LABEL, "1"))
        count = int(labels.get(COUNT_LABEL, "0"))
    except ValueError:
        return allocatable
    if replicas > 1 and count > 0:
        return count
    return allocatable


class NodesMixin(KubeClient):
    """list_nodes, and the node check of a dispatch."""

    def list_nodes(self, flavors: Sequence[FlavorMatch] | None = None) -> list[NodeInfo]:
        """Nodes with allocatable GPUs, cpu, memory (GiB), readiness, flavor and rack."""
        matches = list(flavors) if flavors is not None else load_flavor_matches()
        try:
            answer = self._call("list nodes", self.core.list_node)
        except k8s.ApiException as error:
            raise self._unexpected("list nodes", error) from error
        return [self._node_info(node, matches) for node in answer.items]

    @staticmethod
    def _node_info(node: Any, flavors: Sequence[FlavorMatch]) -> NodeInfo:
        labels = dict(node.metadata.labels or {})
        allocatable = dict((node.status and node.status.allocatable) or {})
        flavor = match_flavor(labels, flavors)
        conditions = (node.status and node.status.conditions) or []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        if node.spec is not None and node.spec.unschedulable:
            ready = False
        rack = ""
        if flavor is not None and flavor.interconnect_label:
            rack = labels.get(flavor.interconnect_label, "")
        rack = rack or labels.get(ZONE_LABEL, "")
        memory = parse_quantity(allocatable.get("memory", "0")) / GIB
        extended: dict[str, int] = {}
        for res, value in sorted(allocatable.items()):
            if res in OWN_FIELDS or resource_name_problem(res):
                continue
            try:
                base = to_base(res, value)
            except QuantityError:
                continue  # not a quantity Allot can keep exactly: not offered
            if base:
                extended[res] = base
        return NodeInfo(
            name=node.metadata.name,
            flavor=flavor.name if flavor is not None else None,
            gpus=physical_cards(labels, getattr(node.metadata, "annotations", None),
                                int(parse_quantity(allocatable.get(GPU_RESOURCE, "0")))),
            cpu=parse_quantity(allocatable.get("cpu", "0")).quantize(MILLI),
            memory_gib=memory.quantize(MILLI),
            ready=ready,
            rack=rack,
            labels=labels,
            resources=extended,
        )

    def _check_nodes(self, spec: WorkloadSpec) -> dict[str, Any]:
        """Two-phase dispatch: an assigned node that vanished or went NotReady is a refusal.
        Returns the nodes read, by name.

        A few nodes are read one by one; a big gang's nodes with one list call.
        """
        wanted = sorted({n for p in spec.pod_sets for n in p.nodes})
        nodes: dict[str, Any] = {}
        if not wanted:
            return nodes
        if len(wanted) > 3:
            try:
                listed = self._call("list nodes", self.core.list_node).items
            except k8s.ApiException as error:
                raise self._unexpected("list nodes", error) from error
            nodes = {n.metadata.name: n for n in listed}
        else:
            for node_name in wanted:
                what = f'read node "{node_name}"'
                try:
                    nodes[node_name] = self._call(what, self.core.read_node, node_name)
                except k8s.ApiException as error:
                    if error.status != 404:
                        raise self._unexpected(what, error) from error
        for node_name in wanted:
            node = nodes.get(node_name)
            if node is None:
                raise DispatchRefused(
                    RefusalReason.NODE_GONE,
                    f"node {node_name} no longer exists on cluster {self.name}",
                )
            conditions = (node.status and node.status.conditions) or []
            ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
            if not ready or (node.spec is not None and node.spec.unschedulable):
                raise DispatchRefused(
                    RefusalReason.NODE_GONE,
                    f"node {node_name} on cluster {self.name} is not ready or is cordoned",
                )
        return nodes
