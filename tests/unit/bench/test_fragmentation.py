"""The openb fragmentation bench: FGD's typical pods and the allocation ratio at a mark, as the
paper's artifact computes them."""

from __future__ import annotations

import pytest

from bench.fragmentation import at_mark, typical


def test_typical_pods_are_the_most_common_shapes_up_to_95_percent() -> None:
    # 20 pods: 10 of 0.5 GPU and 4 cores (memory differs: not part of the shape), 6 CPU-only,
    # 3 of two cards, 1 of 0.25. The first three shapes make 19 of 20 pods (95%): the rare
    # 0.25 pod is left out.
    pods = ([(500, 0.5, 4.0, float(i)) for i in range(10)] + [(0, 0.0, 2.0, 8.0)] * 6
            + [(2000, 2.0, 16.0, 64.0)] * 3 + [(250, 0.25, 4.0, 8.0)])
    assert typical(pods) == {(500, 4.0, 0.0, -1.0): 10, (0, 2.0, 0.0, -1.0): 6,
                             (2000, 16.0, 0.0, -1.0): 3}
    assert (250, 4.0, 0.0, -1.0) in typical(pods, threshold=100.0)
    # Equal counts: the larger shape (more cores) first.
    assert list(typical([(500, 0.5, 2.0, 1.0), (500, 0.5, 8.0, 1.0)], threshold=50.0)) == [
        (500, 8.0, 0.0, -1.0)]


def test_the_ratio_at_a_mark_is_the_mean_over_the_pods_rounding_to_it() -> None:
    seen = {99: [90.0], 100: [91.0, 92.0], 102: [95.0]}
    assert at_mark(seen, 100) == 91.5
    # No pod rounds to 101: its neighbours stand in.
    assert at_mark(seen, 101) == pytest.approx((91.0 + 92.0 + 95.0) / 3)
    with pytest.raises(ValueError, match="no arrivals near 130%"):
        at_mark(seen, 130)
