"""The rights a GPU cluster grants Allot (deploy/kubernetes/member-cluster/rbac.yaml) against
what the Kubernetes backend does: the backend is driven through a workload's whole life on
the cluster (dispatch, sync, suspend with its event, delete) by the workers, and through its
other calls (watch, the list of Allot's Jobs, priority class sync, a retried create), against
the API double, which records every request. Every request must be granted by the role, the
role must grant nothing the backend does not do, and every API method the backend's code
calls must have been among the requests."""

from __future__ import annotations

import ast
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from scheduling.backends import PodSetSpec, PriorityClassSpec
from scheduling.backends.k8s import KubernetesBackend
from scheduling.backends.k8s.client import KubeClient
from scheduling.fleet import dispatch, teardown
from scheduling.fleet import sync as fleet_sync
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.backends.k8s.specs import make_spec
from tests.integration.scheduling.world import request, world_on_kube
from tests.k8s_double import KubeDouble

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
RBAC = ROOT / "deploy" / "kubernetes" / "member-cluster" / "rbac.yaml"
BACKEND = ROOT / "scheduling" / "backends" / "k8s"
# KubeClient's API objects and the API group each one speaks to.
API_GROUPS = {"core": "", "batch": "batch", "events": "events.k8s.io",
              "scheduling": "scheduling.k8s.io"}
# The client's method verbs as RBAC names them.
RBAC_VERBS = {"create": "create", "read": "get", "list": "list", "patch": "patch",
              "delete": "delete", "replace": "update"}
# Rights the role grants that this drive does not exercise, each with the reason (none today:
# the role grants exactly what the backend does).
GRANTED_BUT_NOT_CALLED: dict[tuple[str, str, str], str] = {}

Right = tuple[str, str, str]  # (verb, API group, resource)


def granted() -> set[Right]:
    """Every (verb, group, resource) the ClusterRole grants; no wildcard, no names."""
    documents = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    (role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    assert not [d for d in documents if d["kind"] in ("Role", "RoleBinding")]
    rights: set[Right] = set()
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no nonResourceURLs
        for part in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[part], rule
        rights |= {(verb, group, resource) for verb in rule["verbs"]
                   for group in rule["apiGroups"] for resource in rule["resources"]}
    return rights


def requested(method: str, path: str, query: dict[str, str]) -> Right:
    """The right the API server checks for one request (its RBAC verb, group, resource)."""
    parts = path.strip("/").split("/")
    assert parts[0] in ("api", "apis"), f"a non-resource request: {method} {path}"
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]  # a namespaced resource
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    one = len(rest) >= 2
    if method == "GET":
        verb = "watch" if query.get("watch") in ("true", "1") else ("get" if one else "list")
    elif method == "DELETE":
        verb = "delete" if one else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return verb, group, resource


def called_in_code() -> set[Right]:
    """The rights the backend's code may need: each `self.<api>.<method>` it calls."""
    rights: set[Right] = set()
    for source in BACKEND.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"
                    and node.value.attr in API_GROUPS):
                verb, _, kind = node.attr.partition("_")
                kind = kind.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
                kind = kind.replace("_", "")
                resource = kind + ("es" if kind.endswith("s") else "s")
                rights.add((RBAC_VERBS[verb], API_GROUPS[node.value.attr], resource))
    return rights


@pytest.fixture
def kube():
    with KubeDouble() as double:
        yield double


@pytest.fixture
def world(kube):
    with world_on_kube(kube, nodes_per_cluster=4) as world:
        yield world


def drive_kinds(kube) -> None:
    """A workload of every kind (docs/workload-kinds.md) through its life on the cluster:
    created held back, retried (its object read back), started, read, preempted, deleted."""
    from scheduling import kinds
    from tests.manifests import NAMES, manifest

    backend = KubernetesBackend(name="bj", connection=kube.connection)
    for n, name in enumerate(NAMES):
        obj = manifest(name)
        kind = kinds.kind_of(obj)
        sets = kind.derive(manifest(name))
        spec = make_spec(workload_id=200 + n, namespace="rd-vision", kind=kind.key,
                         manifest=obj, pod_sets=tuple(PodSetSpec(
                             index=i, count=s.count, flavor="a100-80g", gpus=s.gpus,
                             cpu=s.cpu, memory_gib=s.memory_gib,
                             node_selector={"allot.io/flavor": "a100-80g"})
                             for i, s in enumerate(sets)))
        ref = backend.create_workload(spec)
        assert backend.create_workload(spec) == ref
        backend.start_workload(ref)
        backend.workload_status(ref)
        backend.suspend_workload(ref, 30)
        backend.delete_workload(ref)


def drive(world, kube) -> None:
    """Every call the backend makes, the common ones through the workers."""
    # A workload's life: dispatch (its namespace and priority class made, its two nodes read,
    # its Job created suspended and started), sync (nodes, Jobs, pods), preemption (suspended,
    # with an event on the Job), cancellation (deleted).
    w = workload_submit(user=world.alice, data=request("rbac-life", count=2), nudge=False)
    assert cycle_run(wait=True).admitted == [w.pk]
    assert dispatch.cluster_dispatch(cluster_id=world.bj.pk).started == [w.pk]
    kube.state.set_pod_phases("rd-vision", f"allot-w{w.pk}-0", "Running")
    assert fleet_sync.cluster_sync(cluster_id=world.bj.pk).running == [w.pk]
    adm = w.admissions.get()
    teardown.admissions_suspend(admission_ids=[adm.pk], reasons={adm.pk: "preempted"})
    assert kube.state.events_about("rd-vision", "Job", f"allot-w{w.pk}-0")
    teardown.admission_delete(admission_id=adm.pk)
    assert kube.state.jobs == {}

    # What the workers do in other situations, called on the backend directly.
    backend = KubernetesBackend(name="bj", connection=kube.connection)
    nodes = tuple(sorted(kube.state.nodes))
    spec = make_spec(workload_id=90, namespace="rd-vision", pod_sets=(PodSetSpec(
        index=0, count=4, flavor="a100-80g", gpus=8, cpu=Decimal(8), memory_gib=Decimal(64),
        node_selector={"allot.io/flavor": "a100-80g"}, nodes=nodes),))
    bookmark = backend.watch_workloads(timeout_s=0).resource_version  # the resync's list
    ref = backend.create_workload(spec)  # a big gang: its nodes checked with one list
    assert backend.create_workload(spec) == ref  # retried: the Job found (409) and kept
    backend.start_workload(ref)  # its pods made: what the watch follows
    assert backend.watch_workloads(timeout_s=2, resource_version=bookmark).changed == {90}
    assert [r.workload_id for r in backend.list_workloads()] == [90]
    backend.delete_workload(ref)
    stored = kube.state.priority_classes
    training = stored["training"]  # made from Allot's classes at the first dispatch
    backend.sync_priority_classes([
        PriorityClassSpec("training", training["value"], "retrained description",
                          preemption_policy=training["preemptionPolicy"]),
        PriorityClassSpec("inference-high", 20000, "serving")])
    assert stored["training"]["description"] == "retrained description"  # patched
    assert stored["inference-high"]["value"] == 20000  # replaced: delete and create
    drive_kinds(kube)


def test_the_role_grants_every_request_the_backend_makes_and_nothing_more(world, kube):
    drive(world, kube)
    # API discovery (which kinds the cluster serves) is no resource: every authenticated
    # user may read it (the default ClusterRole system:discovery).
    used = {requested(r["method"], r["path"], r["query"]) for r in kube.requests()
            if r["path"] != "/apis"}
    assert [r for r in kube.requests() if r["authorization"] != f"Bearer {kube.token}"] == []
    rights = granted()
    assert used - rights == set(), "requests the role does not grant"
    unused = rights - used
    assert unused == set(GRANTED_BUT_NOT_CALLED), "granted but never requested"
    # The drive reached every API method the backend's code calls (and the watch).
    assert called_in_code() | {("watch", "", "pods")} <= used, (
        called_in_code() - used)


def test_the_backend_speaks_through_the_api_objects_the_test_knows():
    apis = {name for name, value in vars(KubeClient).items()
            if isinstance(value, property) and name != "api_client"}
    assert apis == set(API_GROUPS)


def test_the_role_is_bound_to_the_account_whose_token_allot_uses():
    documents = {(d["kind"], d["metadata"]["name"]): d
                 for d in yaml.safe_load_all(RBAC.read_text()) if d}
    account = documents[("ServiceAccount", "allot-backend")]
    binding = documents[("ClusterRoleBinding", "allot-backend")]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "allot-backend"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "allot-backend",
                                    "namespace": account["metadata"]["namespace"]}]
    token = documents[("Secret", "allot-backend-token")]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "allot-backend"}
    assert token["metadata"]["namespace"] == account["metadata"]["namespace"]
