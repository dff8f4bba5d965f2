"""The demo organisation `manage.py seed_demo` creates (idempotent).

Two departments, five teams, three clusters (two on-premises, one cloud; simulated backend)
with A100, H100, V100 and CPU nodes, and the users admin, alice and bob.

Other apps extend the demo without editing this file: an app that has a `demo` module with a
`seed() -> list[str] | None` function (e.g. `scheduling/demo.py` adding demo workloads,
`billing/demo.py` adding rate cards) is called after the core, in INSTALLED_APPS order, inside
the same transaction; the lines it returns are printed. Each seed must be idempotent too.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from decimal import Decimal

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import transaction

from quotas.models import Flavor, Queue, Team, TeamMembership, TeamRole
from quotas.services import QueueDef, tree_replace
from quotas.tree_rules import QuotaSpec
from scheduling.models import BackendKind, Cluster, ClusterKind, Node

FLAVORS = [
    # name, GPU memory per card, node labels
    ("a100-80g", 80, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
    ("h100-80g", 80, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
    ("v100-32g", 32, {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"}),
    ("cpu", None, {"node.allot.io/type": "cpu"}),
]

# cluster: (kind, region, price, datasets, [(flavor, nodes, gpus, cpu, memory GiB)])
CLUSTERS = {
    "bj-onprem": (ClusterKind.ON_PREMISES, "cn-north", "1.000", ["imagenet", "coco"], [
        ("a100-80g", 4, 8, 128, 1024), ("v100-32g", 2, 8, 64, 512), ("cpu", 2, 0, 96, 384),
    ]),
    "sh-onprem": (ClusterKind.ON_PREMISES, "cn-east", "0.900", ["commoncrawl"], [
        ("h100-80g", 4, 8, 192, 2048), ("a100-80g", 2, 8, 128, 1024), ("cpu", 2, 0, 96, 384),
    ]),
    "cloud-sg": (ClusterKind.CLOUD, "ap-southeast", "2.500", [], [
        ("h100-80g", 2, 8, 192, 2048), ("a100-80g", 2, 8, 128, 1024),
    ]),
}


def _q(min_: int, max_: int | None = None, lendable: int | None = None) -> QuotaSpec:
    return QuotaSpec(
        min=Decimal(min_),
        max=None if max_ is None else Decimal(max_),
        lendable=None if lendable is None else Decimal(lendable),
    )


A, H, V = ("a100-80g", "gpu"), ("h100-80g", "gpu"), ("v100-32g", "gpu")
# path: (quota, strategy, description); sums obey V2/V4 and fit the demo fleet (no W3).
TREE: dict[str, tuple[dict, str, str]] = {
    "research": ({A: _q(32, 64, 16), H: _q(24, 48, 12), V: _q(8, 16)}, "",
                 "Research department"),
    "research/vision": ({A: _q(16, 48, 8), V: _q(8, 16)}, "", "Computer vision"),
    "research/vision/detection": ({A: _q(8, None, 4), V: _q(4)}, "", "Object detection"),
    "research/vision/segmentation": ({A: _q(8, None, 4), V: _q(4)}, "", "Segmentation"),
    "research/nlp": ({A: _q(8, None, 4), H: _q(24, 48, 12)}, "", "Language"),
    "research/nlp/llm": ({A: _q(4, None, 2), H: _q(16, None, 8)}, "", "Large language models"),
    "research/nlp/speech": ({A: _q(4, None, 2), H: _q(8, None, 4)}, "", "Speech"),
    "research/robotics": ({A: _q(8, None, 4)}, "", "Robotics"),
    "product": ({A: _q(24, 48, 12), H: _q(16, 32, 8), V: _q(8, 16)}, "",
                "Product department"),
    "product/search": ({A: _q(8, None, 4), H: _q(16, None, 8)}, "spread",
                       "Search ranking (SLA-bound inference)"),
    "product/recsys": ({A: _q(16, None, 8), V: _q(8)}, "", "Recommendations"),
}

# team: (display name, department, queues it submits to)
TEAMS = {
    "vision": ("Vision", "research", ["research/vision"]),
    "nlp": ("NLP", "research", ["research/nlp"]),
    "robotics": ("Robotics", "research", ["research/robotics"]),
    "search": ("Search", "product", ["product/search"]),
    "recsys": ("Recommendations", "product", ["product/recsys"]),
}

# username: (password, superuser, [(team, role)])
USERS = {
    "admin": ("allot-admin-demo", True, []),
    "alice": ("allot-alice-demo", False, [("vision", TeamRole.RESEARCHER)]),
    "bob": ("allot-bob-demo", False, [("nlp", TeamRole.LEAD)]),
    # A lead for every team, so every request has an approver other than its requester.
    "carol": ("allot-carol-demo", False, [("vision", TeamRole.LEAD)]),
    "dave": ("allot-dave-demo", False, [("robotics", TeamRole.LEAD)]),
    "erin": ("allot-erin-demo", False, [("search", TeamRole.LEAD)]),
    "frank": ("allot-frank-demo", False, [("recsys", TeamRole.LEAD)]),
}


@dataclass
class DemoSummary:
    """What the demo holds (the same on every run)."""

    lines: list[str] = field(default_factory=list)


def _seed_fleet() -> None:
    flavors: dict[str, Flavor] = {}
    for fname, gpu_mem, labels in FLAVORS:
        flavors[str(fname)], _ = Flavor.objects.get_or_create(
            name=fname, defaults={"gpu_memory_gib": gpu_mem, "node_selector": labels},
        )
    for cname, (kind, region, price, datasets, groups) in CLUSTERS.items():
        cluster, _ = Cluster.objects.get_or_create(name=cname, defaults={
            "kind": kind, "region": region, "price": Decimal(price), "datasets": datasets,
            "backend": BackendKind.SIMULATED, "connection": {"speedup": 60},
        })
        for gname, count, gpus, cpu, mem in groups:
            for i in range(count):
                Node.objects.get_or_create(
                    cluster=cluster, name=f"{cname}-{gname}-{i}",
                    defaults={
                        "flavor": flavors[gname], "gpus": gpus, "cpu": Decimal(cpu),
                        "memory_gib": Decimal(mem), "rack": f"rack-{i // 2 + 1}",
                        "labels": {**flavors[gname].node_selector,
                                   "topology.allot.io/rack": f"rack-{i // 2 + 1}"},
                    },
                )


def _seed_tree() -> None:
    existing = set(Queue.objects.values_list("path", flat=True))
    missing = [
        QueueDef(path=path, quota=quota, strategy=strategy, description=desc)
        for path, (quota, strategy, desc) in TREE.items()
        if path not in existing
    ]
    if missing:
        # Queues already there are left as they are: an admin may have changed them.
        tree_replace(queues=missing)


def _seed_people() -> None:
    queues = {q.path: q for q in Queue.objects.filter(path__in=[
        p for _, _, paths in TEAMS.values() for p in paths
    ] + [d for _, d, _ in TEAMS.values()])}
    teams = {}
    for name, (display, dept, paths) in TEAMS.items():
        team, created = Team.objects.get_or_create(
            name=name, defaults={"display_name": display, "department": queues.get(dept)}
        )
        if created:
            team.queues.set([queues[p] for p in paths if p in queues])
        teams[name] = team
    user_model = get_user_model()
    for username, (password, superuser, memberships) in USERS.items():
        user = user_model.objects.filter(username=username).first()
        if user is None:
            user = user_model(username=username, email=f"{username}@allot.local",
                              is_staff=superuser, is_superuser=superuser)
            user.set_password(password)
            user.save()
        for tname, role in memberships:
            TeamMembership.objects.get_or_create(team=teams[tname], user=user,
                                                 defaults={"role": role})


def _extensions() -> list[str]:
    lines: list[str] = []
    for config in apps.get_app_configs():
        if config.name == "portal":
            continue
        module_name = f"{config.name}.demo"
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        seed = getattr(module, "seed", None)
        if callable(seed):
            result = seed()
            # Only lines are printed: counts differ between a first and a second run.
            if isinstance(result, list | tuple):
                lines.extend(str(line) for line in result)
    return lines


@transaction.atomic
def seed_demo() -> DemoSummary:
    """Create the demo organisation where missing; the same summary on every run."""
    _seed_fleet()
    _seed_tree()
    _seed_people()
    extra = _extensions()
    nodes = Node.objects.filter(cluster__name__in=CLUSTERS)
    gpus: dict[str, int] = {}
    for flavor, count in nodes.values_list("flavor__name", "gpus"):
        gpus[flavor] = gpus.get(flavor, 0) + count
    lines = [
        "Demo organisation ready:",
        f"  departments: {', '.join(p for p in TREE if '/' not in p)}",
        f"  teams: {', '.join(TEAMS)}",
        f"  queues: {len(TREE)} ({sum(1 for p in TREE if not _has_children(p))} leaves)",
        f"  clusters: {', '.join(f'{n} ({v[0].label}, {v[1]})' for n, v in CLUSTERS.items())}",
        f"  nodes: {nodes.count()}; GPUs: "
        + ", ".join(f"{f} {gpus[f]}" for f in sorted(gpus) if gpus[f]),
        *extra,
        "Demo users (passwords as first created):",
    ]
    for username, (password, superuser, memberships) in USERS.items():
        role = "platform admin" if superuser else ", ".join(
            f"{r.label.lower()} in {t}" for t, r in memberships)
        lines.append(f"  {username:<6} password {password:<18} {role}")
    return DemoSummary(lines=lines)


def _has_children(path: str) -> bool:
    return any(p.startswith(f"{path}/") for p in TREE)
