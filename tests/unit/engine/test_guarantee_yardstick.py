"""The yardstick of the guarantee metric (`fits_if_borrowed_returned`, invariant I2): would a
pending workload fit if the borrowed, preemptible work of other leaves were returned and the
victims in grace gone? It lifts exactly those, leaves the rest, and puts everything back."""

from __future__ import annotations

from scheduling.engine import AdmittedWorkload, QueueSpec

from .builders import A100, GPU, KeyQuota, cluster, engine, wl


def _tree(c_min: float = 0) -> list[QueueSpec]:
    org = QueueSpec("org", None, {GPU: KeyQuota(16 + c_min, None, 16 + c_min)})
    return [org] + [QueueSpec(f"org/{n}", "org", {GPU: KeyQuota(mn, mx, mn)})
                    for n, mn, mx in (("a", 8, 16), ("b", 8, 16), ("c", c_min, 16))]


def _hold(eng, name, queue, node, *, preemptible=True, borrowed=False, at=0.0,
          grace_until=None):
    w = wl(name, f"org/{queue}", gpus=8, t=at, preemptible=preemptible)
    eng.add_admitted(AdmittedWorkload(w, "c", A100, (f"c-{A100}-{node}",), borrowed, at,
                                      admission_seq=int(at) + 1, grace_until=grace_until))


def _usage(eng):
    return {q: list(eng.tree.u[eng.tree.index[q]]) for q in ("org", "org/b", "org/c")}


def test_borrowed_preemptible_work_returned_makes_room():
    eng = engine(_tree(), [cluster("c", nodes=2)])
    _hold(eng, "b1", "b", 0, at=1.0)
    _hold(eng, "b2", "b", 1, borrowed=True, at=2.0)  # b over its min by 8: borrowing
    eng.submit(wl("a1", "org/a", gpus=8, t=3.0))
    before = _usage(eng)
    assert eng.fits_if_borrowed_returned("a1") is True
    assert _usage(eng) == before  # everything put back


def test_borrowing_that_cannot_be_preempted_does_not_count():
    eng = engine(_tree(), [cluster("c", nodes=2)])
    _hold(eng, "b1", "b", 0, preemptible=False, at=1.0)
    _hold(eng, "b2", "b", 1, preemptible=False, borrowed=True, at=2.0)
    eng.submit(wl("a1", "org/a", gpus=8, t=3.0))
    assert eng.fits_if_borrowed_returned("a1") is False


def test_a_victim_in_grace_of_a_leaf_that_does_not_borrow_is_counted_gone():
    for grace, fits in ((None, False), (100.0, True)):
        eng = engine(_tree(c_min=8), [cluster("c", nodes=2)])
        _hold(eng, "b1", "b", 0, at=1.0)  # within b's min: not borrowing
        _hold(eng, "c1", "c", 1, at=2.0, grace_until=grace)  # within c's min too
        eng.submit(wl("a1", "org/a", gpus=8, t=3.0))
        before = _usage(eng)
        assert eng.fits_if_borrowed_returned("a1") is fits, grace
        assert _usage(eng) == before
