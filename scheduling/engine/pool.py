"""Node-level placement (QUOTA-SEMANTICS.md §7): the nodes of one flavor in one cluster.

Choices where the semantics page is silent:
- "Most allocated node" means fewest free GPUs (best fit) for GPU pods and least free CPU for
  CPU-only pods; spread takes the opposite. Ties: the node's index in its pool.
- Pods are placed one by one in pod-set order (greedy, like Kueue's TAS); a gang either gets
  every pod or the tentative placement is rolled back.
- `topology: {same: rack}` tries racks in the order of the strategy (binpack: fewest free GPUs
  first; spread: most), ties by rack name.
- A CPU-only pod on a GPU node may only use the cores beyond `cpu_per_gpu_reserved` per free
  GPU, so CPU work cannot strand GPUs.
- Cards (QUOTA-SEMANTICS.md §10): a node's cards are fully free, taken whole (unnumbered:
  the device plugin picks them), or shared by fractional pods (numbered from 0, the lowest
  number not shared when a fraction opens a card). Whole-card pods take fully free cards only,
  so they never land on a shared card. Once a pool has seen a fractional request, its GPU pods
  are placed by expected fragmentation (`fragmentation`) unless they spread.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Sequence
from typing import Any

from scheduling.engine.accounting import EPS
from scheduling.engine.fragmentation import (
    MILLI,
    TIE,
    Mix,
    NodeState,
    fragment,
    lost,
    slice_of,
    to_milli,
)
from scheduling.engine.types import Resources

# One pod: GPUs (whole cards, or a fraction 0 < f < 1 of one card), cpu, memory GiB, the GPU
# memory slice of a fraction (-1: f x the card's memory; 0 for whole cards), the card a placed
# fraction holds (-1: not placed, or not a fraction) and, only when it asks any, its extended
# resources (`types.Resources`) as a sixth element.
Pod = tuple[Any, ...]
POD_SHAPES = 512  # pods whose scores per node state are kept (the mix's usual shapes)
_MISSING: object = object()
# What `Pool.score` says of a card: -1 whole cards, -2 a fully free card, or the (free milli-GPU,
# free GiB) of the shared card a fraction goes on.
CardChoice = int | tuple[int, float]
Score = tuple[float, float, float, float, CardChoice]


def pod_of(gpus: float, cpu: float, memory: float, gpu_memory: float | None = None,
           card: int = -1, resources: Resources | None = None) -> Pod:
    """A pod tuple; `gpu_memory` is the slice a fraction asks (None: its share of the card);
    `resources` its extended resources (a sixth element only when there are any)."""
    frac = 0 < gpus < 1
    gmem = (-1.0 if gpu_memory is None else float(gpu_memory)) if frac else 0.0
    pod = (gpus if frac else int(gpus), float(cpu), float(memory), gmem, card if frac else -1)
    return (*pod, tuple(resources)) if resources else pod


def ext_of(pod: Pod) -> Resources:
    """A pod's extended resources (empty when it asks none)."""
    return pod[5] if len(pod) > 5 else ()


def as_pod(values: Sequence[Any]) -> Pod:
    """A pod from a stored tuple of 3 to 6 values (older records have no slice, card or
    extended resources; stored resources are (name, amount) pairs)."""
    g = float(values[0])
    gmem = float(values[3]) if len(values) > 3 else None
    card = int(values[4]) if len(values) > 4 else -1
    if gmem is not None and gmem < 0:
        gmem = None
    resources: Resources = tuple(
        (str(r[0]), float(r[1])) for r in values[5]) if len(values) > 5 else ()
    return pod_of(g, float(values[1]), float(values[2]), gmem, card, resources)


def is_fraction(g: float) -> bool:
    return 0 < g < 1


def cards_of(pods: Sequence[Pod]) -> tuple[int | None, ...]:
    """Per pod, the card a fraction holds (None for other pods); empty without fractions."""
    if not any(is_fraction(p[0]) for p in pods):
        return ()
    return tuple(p[4] if is_fraction(p[0]) and p[4] >= 0 else None for p in pods)


def with_cards(pods: Sequence[Pod], cards: Sequence[int | None]) -> list[Pod]:
    """The pods with the cards recorded for them (as `cards_of` gives them)."""
    if not cards:
        return list(pods)
    return [(*p[:4], c if c is not None and is_fraction(p[0]) else -1, *p[5:])
            for p, c in zip(pods, list(cards) + [None] * (len(pods) - len(cards)), strict=True)]


def whole_gpus(pods: Sequence[Pod]) -> int:
    """Whole cards the pods need (fractions excluded)."""
    return sum(int(p[0]) for p in pods if p[0] >= 1)


class Pool:
    """The nodes of one flavor in one cluster, with free resources, a free-card index and the
    cards that fractional pods share."""

    def __init__(self, cluster: str, flavor: str, card_mem: float | None = None,
                 mix: Mix | None = None) -> None:
        self.cluster = cluster
        self.flavor = flavor
        self.card_mem = card_mem  # GPU memory of one card (None: not known)
        self.mix = mix if mix is not None else Mix()
        # "" follows the mix (fragmentation-aware once fractions are asked); benchmarks set
        # "bestfit" (tightest node and card) or "fgd" (the paper's rule as its artifact scores
        # it, no tie to the fit).
        self.policy = ""
        self.names: list[str] = []
        self.gpus: list[int] = []
        self.cpu: list[float] = []
        self.mem: list[float] = []
        self.rack: list[str] = []
        self.ready: list[bool] = []
        self.fg: list[int] = []  # fully free cards
        self.fc: list[float] = []
        self.fm: list[float] = []
        # Per node: shared card number -> [free milli-GPU, free GPU memory GiB].
        self.shared: list[dict[int, list[float]]] = []
        self.buckets: list[list[int]] = []  # free GPUs -> sorted ready node indices
        self.max_gpus = 0
        self.free = 0  # fully free cards on ready nodes
        # GPUs (fractions too) taken by ended workloads not confirmed gone (HeldCapacity)
        self.held: float = 0
        self.held_ext: dict[str, float] = {}  # extended resources they hold
        self.placed: list[Pod] = []  # the pods of the last `place`, with their cards
        self._card = -1  # the card `_pick_fit` chose (-1: whole cards, -2: a fully free one)
        # Memoised per mix version: fragment per node state, score per (state, pod).
        self._frag: dict[NodeState, float] = {}
        # Per (pod, reserve): the score of each node state, by the state's number.
        self._scores: dict[tuple[Pod, float], dict[int, Score | None]] = {}
        self._ids: dict[NodeState, int] = {}  # node states seen, numbered
        self._by_id: list[NodeState] = []
        self._sid: list[int] = []  # per node, its state's number (-1 when it changed)
        self._frag_version = -1
        self._states: list[NodeState | None] = []  # per node, None when it changed
        # Extended resources: allocatable and free per node, by name (absent: 0).
        self.ext_cap: dict[str, list[float]] = {}
        self.ext: dict[str, list[float]] = {}

    def add_node(self, name: str, gpus: int, cpu: float, mem: float, rack: str,
                 ready: bool, resources: Sequence[tuple[str, float]] = ()) -> None:
        n = len(self.names)
        for res, _amount in resources:
            if res not in self.ext:
                self.ext_cap[res] = [0.0] * n
                self.ext[res] = [0.0] * n
        for res in self.ext:
            self.ext_cap[res].append(0.0)
            self.ext[res].append(0.0)
        for res, amount in resources:
            self.ext_cap[res][n] = self.ext[res][n] = float(amount)
        self.names.append(name)
        self.gpus.append(gpus)
        self.cpu.append(cpu)
        self.mem.append(mem)
        self.rack.append(rack)
        self.ready.append(ready)
        self.fg.append(gpus)
        self.fc.append(cpu)
        self.fm.append(mem)
        self.shared.append({})
        self._states.append(None)
        self._sid.append(-1)

    def build_index(self) -> None:
        self.max_gpus = max(self.gpus, default=0)
        self.buckets = [[] for _ in range(self.max_gpus + 1)]
        self.free = 0
        for i, r in enumerate(self.ready):
            if r:
                self.buckets[min(max(self.fg[i], 0), self.max_gpus)].append(i)
                self.free += max(self.fg[i], 0)

    # Totals over ready nodes.
    def totals(self) -> tuple[int, float, float]:
        g = c = m = 0.0
        for i, r in enumerate(self.ready):
            if r:
                g += self.gpus[i]
                c += self.cpu[i]
                m += self.mem[i]
        return int(g), c, m

    def ext_totals(self) -> dict[str, float]:
        """Extended resources over ready nodes, by name."""
        return {res: sum(v for v, r in zip(cap, self.ready, strict=True) if r)
                for res, cap in self.ext_cap.items()}

    def free_gpus(self) -> int:
        return self.free

    def largest_free(self) -> int:
        for b in range(self.max_gpus, -1, -1):
            if self.buckets[b]:
                return b
        return 0

    def shared_used(self, i: int) -> float:
        """GPUs (fractions) that pods on node i's shared cards hold."""
        return sum(MILLI - s[0] for s in self.shared[i].values()) / MILLI

    def _slice(self, pod: Pod) -> float:
        return slice_of(to_milli(pod[0]), pod[3], self.card_mem or 0.0)

    def fraction_fits(self, i: int, pod: Pod) -> bool:
        """Whether fractional `pod` fits node i on its card (-1: on any shared card, or a
        free one): the card's share and memory left, or a fully free card to open."""
        milli, need, card = to_milli(pod[0]), self._slice(pod), pod[4]
        shared = self.shared[i]
        if card in shared:
            return shared[card][0] >= milli and shared[card][1] + EPS >= need
        if card == -1 and any(s[0] >= milli and s[1] + EPS >= need for s in shared.values()):
            return True
        return self.fg[i] >= 1 and need <= (self.card_mem or need) + EPS

    def take(self, i: int, pod: Pod) -> Pod:
        """Take a pod's resources on node i; returns the pod with its card (a fraction with
        card -1 goes on the first shared card it fits, else opens one; -2 opens one)."""
        g, c, m = pod[0], pod[1], pod[2]
        self._states[i] = None
        self._sid[i] = -1
        if is_fraction(g):
            milli = to_milli(g)
            need = self._slice(pod)
            card = pod[4]
            shared = self.shared[i]
            if card == -1:
                for k in sorted(shared):
                    if shared[k][0] >= milli and shared[k][1] + EPS >= need:
                        card = k
                        break
            if card < 0 or card not in shared:
                if card < 0:
                    card = next((k for k in range(max(self.gpus[i], 1) + len(shared))
                                 if k not in shared), 0)
                shared[card] = [float(MILLI), float(self.card_mem or 0.0)]
                self._move(i, self.fg[i] - 1)
            shared[card][0] -= milli
            shared[card][1] -= need
            pod = (g, c, m, pod[3], card, *pod[5:])
        else:
            self._move(i, self.fg[i] - int(g))
        self.fc[i] -= c
        self.fm[i] -= m
        if len(pod) > 5:
            self._ext_add(i, pod[5], -1.0)
        return pod

    def give(self, i: int, pod: Pod) -> None:
        g, c, m = pod[0], pod[1], pod[2]
        self._states[i] = None
        self._sid[i] = -1
        if is_fraction(g):
            shared = self.shared[i]
            s = shared.get(pod[4])
            if s is not None:
                s[0] += to_milli(g)
                s[1] += self._slice(pod)
                if s[0] >= MILLI:
                    del shared[pod[4]]
                    self._move(i, self.fg[i] + 1)
        else:
            self._move(i, self.fg[i] + int(g))
        self.fc[i] += c
        self.fm[i] += m
        if len(pod) > 5:
            self._ext_add(i, pod[5], 1.0)

    def _ext_add(self, i: int, resources: Sequence[tuple[str, float]], sign: float) -> None:
        for res, amount in resources:
            free = self.ext.get(res)
            if free is None:  # a node that lost the resource still carries what used it
                free = self.ext[res] = [0.0] * len(self.names)
                self.ext_cap[res] = [0.0] * len(self.names)
            free[i] += sign * amount

    def undo(self, nodes: Sequence[int]) -> None:
        """Give back what the last `place` took (a tentative placement)."""
        for i, p in zip(nodes, self.placed, strict=True):
            self.give(i, p)

    def _move(self, i: int, fg: int) -> None:  # (callers forget `_states[i]`)
        """Set node i's fully free cards, keeping the index. Free cards go below zero when the
        workloads on a node hold more than it has (it shrank, or a release is unconfirmed):
        such a node is indexed, and counted, as having none free."""
        top = self.max_gpus
        old, new = min(max(self.fg[i], 0), top), min(max(fg, 0), top)
        if old != new and self.ready[i]:
            b = self.buckets[old]
            del b[bisect_left(b, i)]
            insort(self.buckets[new], i)
            self.free += new - old
        self.fg[i] = fg

    def set_ready(self, i: int, ready: bool) -> None:
        if self.ready[i] == ready:
            return
        self.ready[i] = ready
        fg = min(max(self.fg[i], 0), self.max_gpus)
        if ready:
            insort(self.buckets[fg], i)
            self.free += fg
        else:
            b = self.buckets[fg]
            del b[bisect_left(b, i)]
            self.free -= fg

    def _card_for(self, i: int, milli: int, need: float) -> int:
        """A shared card of node i that holds the fraction (-2: a fully free card would,
        -1: none); the fullest one that fits."""
        best, best_free = -1, MILLI + 1.0
        for k, (free_m, free_mem) in self.shared[i].items():
            if free_m >= milli and free_mem + EPS >= need and (
                    free_m < best_free or (free_m == best_free and k < best)):
                best, best_free = k, free_m
        if best >= 0:
            return best
        if self.fg[i] >= 1 and (not self.card_mem or need <= self.card_mem + EPS):
            return -2
        return -1

    def _node_fits(self, i: int, pod: Pod, reserve: float) -> bool:
        g, c, m = pod[0], pod[1], pod[2]
        if self.fm[i] + EPS < m:
            return False
        if is_fraction(g):
            if self._card_for(i, to_milli(g), self._slice(pod)) == -1:
                return False
        elif self.fg[i] < g:
            return False
        if len(pod) > 5 and not self._ext_fits(i, pod[5]):
            return False
        if g == 0 and self.gpus[i]:
            return self.fc[i] - reserve * max(self.fg[i], 0) + EPS >= c
        return self.fc[i] + EPS >= c

    def _ext_fits(self, i: int, resources: Resources) -> bool:
        """Whether node i has the extended resources free."""
        for res, amount in resources:
            free = self.ext.get(res)
            if free is None or free[i] + EPS < amount:
                return False
        return True

    def aware(self) -> bool:
        """Whether GPU pods are placed by expected fragmentation."""
        if self.policy:
            return self.policy != "bestfit"
        return self.mix.fractional

    def pick(self, pod: Pod, spread: bool, reserve: float, rack: str | None) -> int:
        """The node for one pod (-1 when none fits)."""
        g = pod[0]
        if not spread and (is_fraction(g) or (g > 0 or self.max_gpus > 0) and (
                self.policy == "bestfit" or self.aware())):
            return self._pick_fit(pod, reserve, rack)
        if g >= 1 and rack is None:
            g = int(g)
            rng = range(self.max_gpus, g - 1, -1) if spread else range(g, self.max_gpus + 1)
            for b in rng:
                for i in self.buckets[b]:
                    if self._node_fits(i, pod, reserve):
                        return i
            return -1
        best, best_key = -1, 0.0
        for i in range(len(self.names)):
            if not self.ready[i] or (rack is not None and self.rack[i] != rack):
                continue
            if not self._node_fits(i, pod, reserve):
                continue
            k = (float(max(self.fg[i], 0)) + (len(self.shared[i]) - self.shared_used(i))
                 if g > 0 else self.fc[i])
            if best < 0 or (k > best_key if spread else k < best_key):
                best, best_key = i, k
        return best

    # ---- placement by fit or by expected fragmentation --------------------------------

    def state(self, i: int) -> NodeState:
        """Node i as the fragmentation measure sees it (kept until the node changes)."""
        st = self._states[i]
        if st is None:
            shared = tuple(sorted((int(s[0]), round(s[1], 6))
                                  for s in self.shared[i].values()))
            st = self._states[i] = (max(self.fg[i], 0), shared, round(self.fc[i], 6),
                                    round(self.fm[i], 6), float(self.card_mem or -1.0))
            sid = self._ids.get(st)
            if sid is None:
                sid = self._ids[st] = len(self._by_id)
                self._by_id.append(st)
            self._sid[i] = sid
        return st

    def _fresh(self) -> None:
        """Forget the memoised answers when the mix has changed."""
        if self._frag_version != self.mix.version:
            self._frag = {}
            self._scores = {}
            self._frag_version = self.mix.version
            if len(self._by_id) > 4 * len(self.names) + 1024:
                # Forget the numbers of states no node is in any more.
                self._ids = {}
                self._by_id = []
                self._sid = [-1] * len(self.names)
                self._states = [None] * len(self.names)

    def fragment_of(self, st: NodeState) -> float:
        got = self._frag.get(st)
        if got is None:
            measure = fragment if self.policy == "fgd" else lost
            got = self._frag[st] = measure(st, self.mix.shares)
        return got

    def score(self, st: NodeState, pod: Pod, reserve: float) -> Score | None:
        """How good placing a pod on a node in state `st` is with the pool's policy (lower is
        better: growth of expected fragmentation, then milli-GPU left free on the node, on the
        card, and cores left; best fit: the last three only) and the card it takes (-1: whole
        cards or none, -2: a fully free card, else the free milli-GPU and memory of the shared
        card it goes on), or None when it does not fit."""
        return self._score(st, pod, reserve)

    def _score(self, st: NodeState, pod: Pod, reserve: float) -> Score | None:
        g, c, m = pod[0], pod[1], pod[2]
        fg, shared, fc, fm, cm = st
        if fm + EPS < m or fc - (reserve * fg if g == 0 else 0.0) + EPS < c:
            return None
        options: list[tuple[CardChoice, int, NodeState]] = []
        if is_fraction(g):
            milli = to_milli(g)
            need = self._slice(pod)
            for sig in sorted(set(shared)):
                free_m, free_mem = sig
                if free_m >= milli and free_mem + EPS >= need:
                    rest = list(shared)
                    rest.remove(sig)
                    rest.append((free_m - milli, round(free_mem - need, 6)))
                    options.append((sig, free_m - milli, (fg, tuple(sorted(rest)),
                                                          round(fc - c, 6), round(fm - m, 6),
                                                          cm)))
            if fg >= 1 and (cm <= 0 or need <= cm + EPS):
                opened = (MILLI - milli, round((cm if cm > 0 else 0.0) - need, 6))
                options.append((-2, MILLI - milli,
                                (fg - 1, tuple(sorted((*shared, opened))), round(fc - c, 6),
                                 round(fm - m, 6), cm)))
        elif fg >= g:
            options.append((-1, 0, (fg - int(g), shared, round(fc - c, 6), round(fm - m, 6),
                                    cm)))
        if not options:
            return None
        left = float(fg * MILLI + sum(s[0] for s in shared) - to_milli(g))
        best: Score | None = None
        aware = self.aware()
        before = self.fragment_of(st) if aware else 0.0
        cores = fc - c
        for k, card_left, after in options:
            if not aware:
                cand: Score = (0.0, left, float(card_left), cores, k)
            elif self.policy == "fgd":
                # The artifact's node score: 100 x sigmoid(fragment removed, in GPUs),
                # truncated to an integer (ties: the first card, the lowest node index).
                gain = (before - self.fragment_of(after)) / MILLI
                cand = (-float(int(100.0 / (1.0 + math.exp(-gain)))), 0.0, 0.0, 0.0, k)
            else:
                delta = round((self.fragment_of(after) - before) / TIE) * TIE
                cand = (delta, left, float(card_left), cores, k)
            if best is None or cand[:4] < best[:4]:
                best = cand
        return best

    def _pick_fit(self, pod: Pod, reserve: float, rack: str | None) -> int:
        """The best node by `score` (ties: the lowest index); sets `_card`."""
        self._fresh()
        best, best_key = -1, (0.0, 0.0, 0.0, 0.0)
        choice: CardChoice = -1
        scores = self._scores.get((pod, reserve))
        if scores is None:
            if len(self._scores) >= POD_SHAPES:
                self._scores.clear()
            scores = self._scores[(pod, reserve)] = {}
        sids = self._sid
        by_id = self._by_id
        ready = self.ready
        missing: Any = _MISSING
        ext = ext_of(pod)  # (not in the node states: checked per node)
        for i in range(len(self.names)):
            if not ready[i] or (rack is not None and self.rack[i] != rack):
                continue
            if ext and not self._ext_fits(i, ext):
                continue
            sid = sids[i]
            if sid < 0:
                self.state(i)
                sid = sids[i]
            got = scores.get(sid, missing)
            if got is missing:
                got = scores[sid] = self._score(by_id[sid], pod, reserve)
            if got is None:
                continue
            if best < 0 or got[:4] < best_key:
                best, best_key, choice = i, got[:4], got[4]
        if best >= 0:
            if isinstance(choice, tuple):
                self._card = next(k for k, v in sorted(self.shared[best].items())
                                  if (int(v[0]), round(v[1], 6)) == choice)
            else:
                self._card = choice
        return best

    def place(self, pods: Sequence[Pod], spread: bool, reserve: float,
              rack: str | None) -> list[int] | None:
        """Place every pod (tentatively taking resources; `placed` holds them with their
        cards); None and rolled back on failure."""
        chosen: list[int] = []
        placed: list[Pod] = []
        for pod in pods:
            self._card = -1
            i = self.pick(pod, spread, reserve, rack)
            if i < 0:
                for j, p in zip(chosen, placed, strict=True):
                    self.give(j, p)
                return None
            if is_fraction(pod[0]) and self._card != -1:
                pod = (*pod[:4], self._card, *pod[5:])
            placed.append(self.take(i, pod))
            chosen.append(i)
        self.placed = placed
        return chosen

    def empty_copy(self) -> Pool:
        """The same nodes, all ready and empty (for "could it ever fit" checks)."""
        pool = Pool(self.cluster, self.flavor, self.card_mem, Mix())
        for i, name in enumerate(self.names):
            pool.add_node(name, self.gpus[i], self.cpu[i], self.mem[i], self.rack[i], True,
                          [(res, cap[i]) for res, cap in self.ext_cap.items() if cap[i]])
        pool.build_index()
        return pool

    def racks(self, spread: bool) -> list[str]:
        free: dict[str, int] = {}
        for i, r in enumerate(self.ready):
            if r:
                free[self.rack[i]] = free.get(self.rack[i], 0) + max(self.fg[i], 0)
        return sorted(free, key=lambda name: ((-free[name] if spread else free[name]), name))
