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
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from typing import Any

from scheduling.engine.accounting import EPS

# gpus, cpu, memory of one pod, and (only when it asks any) its extended resources
# (`types.Resources`) as a fourth element.
Pod = tuple[Any, ...]


class Pool:
    """The nodes of one flavor in one cluster, with free resources and a free-GPU index."""

    def __init__(self, cluster: str, flavor: str) -> None:
        self.cluster = cluster
        self.flavor = flavor
        self.names: list[str] = []
        self.gpus: list[int] = []
        self.cpu: list[float] = []
        self.mem: list[float] = []
        self.rack: list[str] = []
        self.ready: list[bool] = []
        self.fg: list[int] = []
        self.fc: list[float] = []
        self.fm: list[float] = []
        self.buckets: list[list[int]] = []  # free GPUs -> sorted ready node indices
        self.max_gpus = 0
        self.free = 0  # free GPUs on ready nodes
        self.held = 0  # GPUs taken by ended workloads not confirmed gone (HeldCapacity)
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

    def build_index(self) -> None:
        self.max_gpus = max(self.gpus, default=0)
        self.buckets = [[] for _ in range(self.max_gpus + 1)]
        self.free = 0
        for i, r in enumerate(self.ready):
            if r:
                self.buckets[max(self.fg[i], 0)].append(i)
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

    def take(self, i: int, pod: Pod) -> None:
        g, c, m = pod[0], pod[1], pod[2]
        self._move(i, self.fg[i] - g)
        self.fc[i] -= c
        self.fm[i] -= m
        if len(pod) > 3:
            self._ext_add(i, pod[3], -1.0)

    def give(self, i: int, pod: Pod) -> None:
        g, c, m = pod[0], pod[1], pod[2]
        self._move(i, self.fg[i] + g)
        self.fc[i] += c
        self.fm[i] += m
        if len(pod) > 3:
            self._ext_add(i, pod[3], 1.0)

    def _ext_add(self, i: int, resources: Sequence[tuple[str, float]], sign: float) -> None:
        for res, amount in resources:
            free = self.ext.get(res)
            if free is None:  # a node that lost the resource still carries what used it
                free = self.ext[res] = [0.0] * len(self.names)
                self.ext_cap[res] = [0.0] * len(self.names)
            free[i] += sign * amount

    def _move(self, i: int, fg: int) -> None:
        """Set node i's free GPUs, keeping the index. Free GPUs go below zero when the
        workloads on a node hold more than it has (it shrank, or a release is unconfirmed):
        such a node is indexed, and counted, as having none free."""
        old, new = max(self.fg[i], 0), max(fg, 0)
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
        fg = max(self.fg[i], 0)
        if ready:
            insort(self.buckets[fg], i)
            self.free += fg
        else:
            b = self.buckets[fg]
            del b[bisect_left(b, i)]
            self.free -= fg

    def _node_fits(self, i: int, pod: Pod, reserve: float) -> bool:
        g, c, m = pod[0], pod[1], pod[2]
        if self.fg[i] < g or self.fm[i] + EPS < m:
            return False
        if len(pod) > 3:
            for res, amount in pod[3]:
                free = self.ext.get(res)
                if free is None or free[i] + EPS < amount:
                    return False
        if g == 0 and self.gpus[i]:
            return self.fc[i] - reserve * max(self.fg[i], 0) + EPS >= c
        return self.fc[i] + EPS >= c

    def pick(self, pod: Pod, spread: bool, reserve: float, rack: str | None) -> int:
        """The node for one pod (-1 when none fits)."""
        g = pod[0]
        if g > 0 and rack is None:
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
            k = float(max(self.fg[i], 0)) if g > 0 else self.fc[i]
            if best < 0 or (k > best_key if spread else k < best_key):
                best, best_key = i, k
        return best

    def place(self, pods: Sequence[Pod], spread: bool, reserve: float,
              rack: str | None) -> list[int] | None:
        """Place every pod (tentatively taking resources); None and rolled back on failure."""
        chosen: list[int] = []
        for pod in pods:
            i = self.pick(pod, spread, reserve, rack)
            if i < 0:
                for j, p in zip(chosen, pods, strict=False):
                    self.give(j, p)
                return None
            self.take(i, pod)
            chosen.append(i)
        return chosen

    def empty_copy(self) -> Pool:
        """The same nodes, all ready and empty (for "could it ever fit" checks)."""
        pool = Pool(self.cluster, self.flavor)
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
