"""Extended resources (QUOTA-SEMANTICS.md §10): MIG slices and other names that nodes advertise
and pods ask for, as quota keys, on nodes, and at submission."""

from __future__ import annotations

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
