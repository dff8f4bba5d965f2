"""Fragmentation-aware placement of GPU pods (QUOTA-SEMANTICS.md §10).

After Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC '23): a node's free GPU capacity is a fragment for
a typical pod when that pod could not use it (the node lacks the CPU or memory for it, or the
capacity sits on cards too small for it). The node's expected fragmentation is the sum over the
typical pods of their share of the recent arrivals times what is a fragment for them. A pod is
placed where that expectation grows least.

Where Allot departs from the paper:
- What a node loses is measured twice and summed (`lost`): the paper's fragment (what one pod
  of each usual shape could not use) plus twice what copies of it could not fill (as
  many copies as the cards, the cores and the memory allow).
- The mix of typical pods is the recent requests the engine has seen (a sliding window), not
  the whole trace known in advance, so it follows the workload as it changes.
- GPU memory slices count: a card whose free memory is below a pod's slice is a fragment for
  it, as is compute it has no memory for.
- Ties (and near ties, within `TIE` milli-GPU of expected fragmentation) go to the tighter fit:
  the node and card with the least free GPU capacity left, then the lowest node index. The
  paper breaks ties at random; packing keeps the emptier nodes whole for the large pods.
- CPU-only pods in the mix are left out: every placement of a given pod changes their
  fragment by the same amount (the node's free GPUs drop by the pod's GPUs), so they do not
  change which placement is best. (The paper's artifact counts them: all of a node's free GPU
  is a fragment for them; `fragment` does so for a benchmark that gives them.)

A node's state for this purpose is `NodeState`; results are memoised per state and mix version,
so a fleet of identical nodes is evaluated once per distinct state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from scheduling.engine.accounting import EPS

MILLI = 1000
TIE = 0.5  # milli-GPU of expected fragmentation below which placements count as tied
WINDOW = 2000  # pods remembered in the mix
REFRESH = 200  # at most this many pods recorded between two refreshes of the mix's shares
TOP = 32  # most common shapes kept in the mix
SHIFT = 0.01  # a share moving less than this keeps the mix as it was
STRANDED = 2  # in `lost`, the weight of what copies cannot fill against the fragment

# A pod shape in the mix: (GPU milli per card for a fraction, or cards x 1000; cpu; memory;
# GPU memory slice per card or -1 for f x the card's memory).
Shape = tuple[int, float, float, float]
# A node for this purpose: (fully free cards, free milli and free memory of each shared card
# sorted, free cpu, free memory, card memory or -1 for unknown).
NodeState = tuple[int, tuple[tuple[int, float], ...], float, float, float]


def to_milli(gpus: float) -> int:
    """GPUs as thousandths of a card."""
    return int(round(gpus * MILLI))


class Mix:
    """The recent mix of requested pod shapes and each one's share (version bumps on change)."""

    def __init__(self) -> None:
        self.window: deque[Shape] = deque()
        self.counts: dict[Shape, int] = {}
        self.since = 0
        self.version = 0
        self.shares: tuple[tuple[Shape, float], ...] = ()
        self.fractional = False  # some recorded shape is a fraction of a card

    def record(self, shape: Shape) -> None:
        """One requested GPU pod (CPU-only pods do not change the choice, see the module)."""
        if shape[0] <= 0:
            return
        self.window.append(shape)
        self.counts[shape] = self.counts.get(shape, 0) + 1
        if len(self.window) > WINDOW:
            old = self.window.popleft()
            n = self.counts[old] - 1
            if n:
                self.counts[old] = n
            else:
                del self.counts[old]
        self.since += 1
        if shape[0] < MILLI and not self.fractional:
            self.fractional = True
            self.refresh()
        elif self.since >= max(1, min(REFRESH, len(self.window) // 8)):
            # (Often while the window is small, so the first requests do not stand for all.)
            self.refresh()

    def set_shares(self, shares: dict[Shape, float], every: bool = False) -> None:
        """Fix the mix (a benchmark that knows its workload in advance, as the paper does):
        its usual shapes, or with `every` all the shapes given, with their shares."""
        if every:
            total = sum(shares.values()) or 1.0
            self.shares = tuple((s, n / total) for s, n in shares.items())
        else:
            self.shares = usual(shares)
        self.fractional = any(s[0] < MILLI for s, _ in self.shares)
        self.version += 1

    def refresh(self) -> None:
        """Recompute the shares; the version (which memoised answers follow) only moves when
        some share moved by a percentage point or more."""
        self.since = 0
        shares = usual(self.counts)
        old = dict(self.shares)
        if (len(old) == len(shares)
                and all(abs(old.get(s, -1.0) - v) < SHIFT for s, v in shares)):
            return
        self.shares = shares
        self.version += 1


def usual(counts: Mapping[Shape, float]) -> tuple[tuple[Shape, float], ...]:
    """The shapes the measure weighs, with their shares: the TOP most common, and for each GPU
    size none of them has (a rare 8-card pod), its most common shape standing for all of that
    size, so no size of pod is left out."""
    ranked = sorted(counts.items(), key=lambda t: (-t[1], t[0]))
    top = dict(ranked[:TOP])
    sizes = {s[0] for s in top}
    for shape, _ in ranked[TOP:]:
        if shape[0] not in sizes:
            sizes.add(shape[0])
            top[shape] = sum(n for s, n in ranked[TOP:] if s[0] == shape[0])
    total = sum(top.values()) or 1.0
    return tuple((s, n / total) for s, n in top.items())


def slice_of(milli: int, gmem: float, card_mem: float) -> float:
    """The GPU memory a fractional pod needs on its card."""
    if gmem >= 0:
        return gmem
    return milli * card_mem / MILLI if card_mem > 0 else 0.0


def fragment(state: NodeState, shares: tuple[tuple[Shape, float], ...]) -> float:
    """Expected milli-GPU on the node that the mix's pods could not use."""
    fg, shared, fc, fm, card_mem = state
    free_total = fg * MILLI + sum(s[0] for s in shared)
    if free_total <= 0:
        return 0.0
    shared_total = free_total - fg * MILLI
    out = 0.0
    for (g, cpu, mem, gmem), share in shares:
        if g <= 0 or cpu > fc + EPS or mem > fm + EPS:
            # (A CPU-only pod uses no GPU: all of it is a fragment for it, as in the paper.)
            out += share * free_total
        elif g < MILLI:
            need = slice_of(g, gmem, card_mem)
            frag = 0
            for free_m, free_mem in shared:
                if free_m < g or free_mem + EPS < need:
                    frag += free_m
            if card_mem > 0 and need > card_mem + EPS:
                frag += fg * MILLI
            out += share * frag
        elif fg * MILLI < g:
            out += share * free_total
        else:
            out += share * shared_total
    return out


INF_PODS = 1 << 30


def lost(state: NodeState, shares: tuple[tuple[Shape, float], ...]) -> float:
    """Expected milli-GPU on the node that the mix's pods would not use: `fragment` (what one
    pod of each usual shape could not use) plus `STRANDED` times what copies of it could not
    fill, as many as the cards, the memory slices, the cores and the memory all allow.

    Each alone misses what the other sees: a node with 12 cores and two free cards strands
    one card for pods of one card and 12 cores, and a card with 0.9 free strands 0.44 for
    pods of 0.46, where `fragment` sees no fragment; copies of 0.81 fill a node with a free
    card and a card with 0.19 free as well as one with two free cards, `fragment` counts the
    0.19 lost. On the openb traces the sum places more than either alone, and weighing the
    copies twice more than equal weights (docs/engine.md §11).
    """
    fg, shared, fc, fm, card_mem = state
    free_shared = 0
    for free_m, _ in shared:
        free_shared += free_m
    free_total = fg * MILLI + free_shared
    if free_total <= 0:
        return 0.0
    out = 0.0
    for (g, cpu, mem, gmem), share in shares:
        if g <= 0 or cpu > fc + EPS or mem > fm + EPS:
            out += (1 + STRANDED) * share * free_total  # no copy fits: all of it lost
            continue
        room = int((fc + EPS) / cpu) if cpu > EPS else INF_PODS
        if mem > EPS:
            by_mem = int((fm + EPS) / mem)
            if by_mem < room:
                room = by_mem
        if g < MILLI:
            need = gmem if gmem >= 0 else (g * card_mem / MILLI if card_mem > 0 else 0.0)
            frag = 0
            cards = 0
            for free_m, free_mem in shared:
                if free_m < g or free_mem + EPS < need:
                    frag += free_m
                    continue
                k = free_m // g
                if need > EPS:
                    k2 = int((free_mem + EPS) // need)
                    if k2 < k:
                        k = k2
                cards += k
            if card_mem > 0 and need > card_mem + EPS:
                frag += fg * MILLI
            elif fg:
                per_card = MILLI // g
                if need > EPS and card_mem > 0:
                    k2 = int((card_mem + EPS) // need)
                    if k2 < per_card:
                        per_card = k2
                cards += fg * per_card
        else:
            frag = free_total if fg * MILLI < g else free_shared
            cards = fg // (g // MILLI)
        if room < cards:
            cards = room
        out += share * (frag + STRANDED * (free_total - cards * g))
    return out
