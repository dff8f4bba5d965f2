"""Extended resources (QUOTA-SEMANTICS.md §10): MIG slices and other names that nodes advertise
and pods ask for, as quota keys, on nodes, and at submission."""

from __future__ import annotations

import json

from scheduling.engine import (
    ClusterSpec,
    Engine,
    FlavorSpec,
    KeyQuota,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    ReasonCode,
    WorkloadSpec,
    gpu_equivalent,
    resources_of,
)
from scheduling.engine.export import snapshot_of
from scheduling.engine.fragmentation import Mix
from scheduling.engine.pool import Pool, as_pod, ext_of, pod_of, with_cards

from .builders import run

RC = ReasonCode
MIG = "nvidia.com/mig-1g.10gb"
FLAVOR = "a100-mig"


def mig_engine(slices: int = 7, nodes: int = 2, mn: float = 7, mx: float | None = 14) -> Engine:
    quota = {(FLAVOR, MIG): KeyQuota(mn, mx, mn)}
    specs = tuple(NodeSpec(f"c-{FLAVOR}-{i}", FLAVOR, 0, 64, 512,
                           resources=resources_of({MIG: slices})) for i in range(nodes))
    return Engine(queues=[QueueSpec("a", None, quota)], clusters=[ClusterSpec("c", specs)],
                  flavors=(FlavorSpec(FLAVOR, 80), FlavorSpec("cpu")))


def mig_wl(name: str, slices: float, count: int = 1, t: float = 0.0,
           resource: str = MIG, flavor: str = FLAVOR) -> WorkloadSpec:
    pods = (PodSetSpec(count, (flavor,), 0, 4, 16,
                       resources=resources_of({resource: slices})),)
    return WorkloadSpec(name, "a", pods, submitted_at=t)


def test_slices_fill_nodes_and_count_in_quota() -> None:
    eng = mig_engine()
    res = run(eng, 0, mig_wl("w1", 4), mig_wl("w2", 4), mig_wl("w3", 4, t=1))
    placed = {a.workload: a.nodes for a in res.admitted}
    # Each node has 7 slices: two pods of 4 cannot share one; the third has no node left.
    assert placed["w1"] != placed["w2"]
    assert "w3" not in placed
    assert res.reasons["w3"].code in (RC.NO_CAPACITY, RC.QUOTA_MAX)
    k = eng.tree.kidx[(FLAVOR, MIG)]
    assert eng.tree.u[eng.tree.index["a"]][k] == 8
    assert eng.tree.cap[k] == 14


def test_quota_max_names_the_resource() -> None:
    eng = mig_engine(slices=7, nodes=4, mn=2, mx=6)
    res = run(eng, 0, mig_wl("w1", 4), mig_wl("w2", 4, t=1))
    assert [a.workload for a in res.admitted] == ["w1"]
    assert res.reasons["w2"].code == RC.QUOTA_MAX
    assert res.reasons["w2"].message == (
        f"queue a {FLAVOR}/{MIG}: used 4 + requested 4 > max 6")


def test_unadvertised_resource_is_rejected_naming_it() -> None:
    eng = mig_engine()
    w = mig_wl("w", 1, resource="nvidia.com/mig-3g.40gb")
    reasons = eng.check(w)
    assert [r.code for r in reasons] == [RC.FLAVOR_UNAVAILABLE]
    assert reasons[0].message == ("flavor a100-mig: pod set 0 asks nvidia.com/mig-3g.40gb 1; "
                                  "no a100-mig node advertises nvidia.com/mig-3g.40gb")


def test_more_than_a_node_has_never_fits() -> None:
    eng = mig_engine(slices=7)
    reasons = eng.check(mig_wl("w", 8))
    assert [r.code for r in reasons] == [RC.NO_CAPACITY]


def test_negative_amount_is_invalid() -> None:
    eng = mig_engine()
    reasons = eng.check(mig_wl("w", -1))
    assert [r.code for r in reasons] == [RC.INVALID_REQUEST]
    assert f"pod set 0: {MIG} -1 < 0" in reasons[0].message


def test_finished_pods_give_slices_back() -> None:
    eng = mig_engine(nodes=1, mx=None)
    run(eng, 0, mig_wl("w1", 7))
    assert run(eng, 1, mig_wl("w2", 1, t=1)).admitted == []
    eng.end("w1", 2)
    assert [a.workload for a in run(eng, 2).admitted] == ["w2"]


def test_gpu_equivalents_default_and_flavor_override() -> None:
    assert gpu_equivalent(None, "nvidia.com/mig-3g.40gb") == 3 / 7
    assert gpu_equivalent(None, "nvidia.com/mig-1g.10gb") == 1 / 7
    assert gpu_equivalent(None, "example.com/foo") == 0
    assert gpu_equivalent(None, "gpu") == 1
    flavor = FlavorSpec("h100-mig", 80, gpu_equivalents={"nvidia.com/mig-3g.40gb": 0.5})
    assert gpu_equivalent(flavor, "nvidia.com/mig-3g.40gb") == 0.5


# ---- with fractional GPUs: the extended resources ride as a pod's sixth element ------------

def _frac_pool(policy: str = "") -> Pool:
    pool = Pool("c", FLAVOR, 80.0, Mix())
    pool.policy = policy
    pool.add_node("n0", 2, 64, 512, "", True)  # no slices
    pool.add_node("n1", 2, 64, 512, "", True, ((MIG, 2.0),))
    pool.build_index()
    return pool


def test_a_fraction_asking_slices_goes_where_the_slices_are_and_gives_them_back() -> None:
    for policy in ("", "bestfit", "fgd"):
        pool = _frac_pool(policy)
        pod = pod_of(0.5, 1, 4, resources=((MIG, 1.0),))
        assert ext_of(pod) == ((MIG, 1.0),) and len(pod) == 6
        got = pool.place([pod, pod], False, 0.0, None)
        assert got == [1, 1], policy
        assert [p[4] for p in pool.placed] == [0, 0] and pool.ext[MIG] == [0.0, 0.0]
        assert all(ext_of(p) == ((MIG, 1.0),) for p in pool.placed)
        # A third asks a slice no node has free: nothing placed, nothing half-taken.
        assert pool.place([pod], False, 0.0, None) is None
        assert pool.ext[MIG] == [0.0, 0.0] and pool.shared[1] == {0: [0.0, 0.0]}
        pool.undo(got)
        assert pool.ext[MIG] == [0.0, 2.0] and pool.shared == [{}, {}] and pool.fg == [2, 2]


def test_cards_and_nominations_keep_the_extended_resources() -> None:
    pods = [pod_of(0.25, 1, 2, resources=((MIG, 1.0),)), pod_of(1, 1, 2)]
    carded = with_cards(pods, (3, None))
    assert carded[0] == (0.25, 1.0, 2.0, -1.0, 3, ((MIG, 1.0),))
    assert carded[1] == (1, 1.0, 2.0, 0.0, -1)
    # Stored as JSON (lists) and read back, as a nomination's victims are.
    stored = json.loads(json.dumps([list(p) for p in carded]))
    assert [as_pod(p) for p in stored] == carded
    assert as_pod([2, 1, 2]) == (2, 1.0, 2.0, 0.0, -1)


def test_fractions_and_slices_together_in_the_engine() -> None:
    quota = {(FLAVOR, MIG): KeyQuota(4, 4, 4), (FLAVOR, "gpu"): KeyQuota(4, 4, 4)}
    specs = (NodeSpec("n0", FLAVOR, 2, 64, 512),
             NodeSpec("n1", FLAVOR, 2, 64, 512, resources=resources_of({MIG: 2})))
    eng = Engine(queues=[QueueSpec("a", None, quota)], clusters=[ClusterSpec("c", specs)],
                 flavors=(FlavorSpec(FLAVOR, 80),))
    w = WorkloadSpec("w", "a", (PodSetSpec(2, (FLAVOR,), 0.5, 1, 4,
                                           resources=resources_of({MIG: 1})),))
    res = run(eng, 0, w)
    assert [(a.nodes, a.cards, a.gpus) for a in res.admitted] == [(("n1", "n1"), (0, 0), 1.0)]
    leaf = eng.tree.index["a"]
    assert eng.tree.u[leaf][eng.tree.kidx[(FLAVOR, MIG)]] == 2
    again = Engine.from_snapshot(snapshot_of(eng, 1))
    pool = again.fleet.by_name["c"].pools[FLAVOR]
    assert pool.ext[MIG] == [0.0, 0.0] and pool.shared[1] == {0: [0.0, 0.0]}
    eng.end("w", 2)
    pool = eng.fleet.by_name["c"].pools[FLAVOR]
    assert pool.ext[MIG] == [0.0, 2.0] and pool.shared == [{}, {}]
