"""Quota accounting (QUOTA-SEMANTICS.md §3): usage per queue and key, `available`, guarantees.

Every check is O(depth x keys of the demand): the usage `u`, each parent's sum of its
children's `reserved` (unused exclusive part) and each parent's sum of its children's
guaranteed usage `min(u, min)` are kept up to date incrementally by `add`.

Choices where the semantics page is silent:
- "within guarantee" ignores the borrowed excess of *other* subtrees: at each ancestor a, the
  usage counted is the preemptor's own branch plus `min(u(s), min(s))` for every other child s.
  With nobody else borrowing this is exactly `u(a) + d <= min(a)`; when a sibling borrows, the
  sibling's excess is capacity that reclaim can take back, so the workload is still within its
  guarantee (Kueue: a ClusterQueue below its nominal quota may reclaim from its cohort).
- The root's capacity is what healthy clusters' ready nodes hold plus what workloads still use
  on unhealthy clusters, so `capacity - u(root)` is the free room on healthy clusters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from scheduling.engine.types import Key, KeyQuota, QueueSpec, Reason, ReasonCode

INF = float("inf")
EPS = 1e-9
ROOT = 0

Demand = list[tuple[int, float]]  # (key index, amount) over accounted keys, amount > 0

_BRIEF: dict[tuple[ReasonCode, str], Reason] = {}  # `QuotaTree.quota_reason_brief`'s answers


def fmt(value: float) -> str:
    """A number as people write it: 16, 0.5, unlimited."""
    if value == INF:
        return "unlimited"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def key_name(key: Key) -> str:
    return f"{key[0]}/{key[1]}"


class QuotaTree:
    """The queue tree with live usage; index 0 is the implicit root."""

    def __init__(self, queues: Sequence[QueueSpec], capacity: Mapping[Key, float] | None = None):
        specs = {q.path: q for q in queues}
        keys: list[Key] = sorted({k for q in queues for k in q.quota})
        self.keys = keys
        self.kidx: dict[Key, int] = {k: i for i, k in enumerate(keys)}
        nk = len(keys)
        self._link(queues)
        n = len(self.paths)
        self.mn = [[0.0] * nk for _ in range(n)]
        self.mx = [[INF] * nk for _ in range(n)]
        self.ln = [[0.0] * nk for _ in range(n)]
        self.ex = [[0.0] * nk for _ in range(n)]
        self.max_policy: list[list[str | None]] = [[None] * nk for _ in range(n)]
        self.u = [[0.0] * nk for _ in range(n)]
        self.rsv_sum = [[0.0] * nk for _ in range(n)]
        self.g_sum = [[0.0] * nk for _ in range(n)]
        self.strategy: list[str] = [""] * n
        for i in range(1, n):
            spec = specs[self.paths[i]]
            p = self.parent[i]
            self.strategy[i] = spec.strategy or self.strategy[p]
            for k, key in enumerate(keys):
                kq: KeyQuota | None = spec.quota.get(key)
                if kq is None:
                    self.mx[i][k] = self.mx[p][k]
                    continue
                self.mn[i][k] = float(kq.min)
                self.ln[i][k] = float(kq.lendable)
                self.mx[i][k] = self.mx[p][k] if kq.max is None else float(kq.max)
                self.max_policy[i][k] = kq.max_policy
                self.ex[i][k] = self.mn[i][k] - self.ln[i][k]
        # Reserved (unused exclusive) sums start at the children's exclusive parts.
        for i in range(1, n):
            p = self.parent[i]
            for k in range(nk):
                self.rsv_sum[p][k] += max(0.0, self.ex[i][k])
        # chain[q]: the queues from the top level down to q (the root excluded).
        self.chain: list[list[int]] = [[]]
        for i in range(1, n):
            self.chain.append([*self.chain[self.parent[i]], i])
        self.is_leaf = [not c for c in self.children]
        # up[q]: (queue, its parent) from q up to a top-level queue (what `add` walks).
        self.up: list[list[tuple[int, int]]] = [
            [(node, self.parent[node]) for node in reversed(c)] for c in self.chain]
        # down[q]: the same from the top level down to q (what `fits` walks).
        self.down: list[list[tuple[int, int]]] = [list(reversed(c)) for c in self.up]
        # Changes of usage per top-level subtree (what a within-guarantee answer depends on).
        self.ver = [0] * n
        self.cap = [0.0] * nk
        if capacity:
            self.set_capacity(capacity)

    def _link(self, queues: Sequence[QueueSpec]) -> None:
        """Index the queues, parents first (the root is 0): paths, parents, children, depth."""
        self.paths: list[str] = ["(root)"]
        self.parent: list[int] = [-1]
        self.children: list[list[int]] = [[]]
        self.index: dict[str, int] = {}
        self.depth: list[int] = [0]
        # Parents first, so each queue's parent already has an index.
        pending = list(queues)
        placed: set[str] = set()
        while pending:
            rest = []
            for q in pending:
                if q.parent is None or q.parent in placed:
                    i = len(self.paths)
                    self.paths.append(q.path)
                    p = ROOT if q.parent is None else self.index[q.parent]
                    self.parent.append(p)
                    self.children.append([])
                    self.children[p].append(i)
                    self.depth.append(self.depth[p] + 1)
                    self.index[q.path] = i
                    placed.add(q.path)
                else:
                    rest.append(q)
            if len(rest) == len(pending):
                names = ", ".join(sorted(q.path for q in rest))
                raise ValueError(f"queues with unknown parents or cycles: {names}")
            pending = rest

    # ---- state changes ---------------------------------------------------------------

    def set_capacity(self, capacity: Mapping[Key, float]) -> None:
        """Set the root's capacity per accounted key (keys not given become 0)."""
        self.cap = [float(capacity.get(key, 0.0)) for key in self.keys]

    def add(self, q: int, demand: Demand, sign: float = 1.0) -> None:
        """Add (sign 1) or remove (sign -1) a demand at leaf q and all its ancestors."""
        u, ex, mn, rsv, gs = self.u, self.ex, self.mn, self.rsv_sum, self.g_sum
        self.ver[self.chain[q][0]] += 1
        for node, p in self.up[q]:
            un, exn, mnn, rp, gp = u[node], ex[node], mn[node], rsv[p], gs[p]
            for k, amount in demand:
                old = un[k]
                new = old + sign * amount
                if -EPS < new < EPS:
                    new = 0.0
                un[k] = new
                # (max(0, e - new) - max(0, e - old) and min(new, m) - min(old, m), inlined)
                e = exn[k]
                a, b = e - new, e - old
                rp[k] += (a if a > 0.0 else 0.0) - (b if b > 0.0 else 0.0)
                m = mnn[k]
                gp[k] += (m if m < new else new) - (m if m < old else old)
        u0 = u[ROOT]
        for k, amount in demand:
            u0[k] += sign * amount

    # ---- checks ----------------------------------------------------------------------

    def available(self, q: int, k: int) -> float:
        """available(q, k) of §3, clamped at 0."""
        u, ex, mx, rsv, parent = self.u, self.ex, self.mx, self.rsv_sum, self.parent
        a = self.cap[k] - u[ROOT][k]
        for node in self.chain[q]:
            p = parent[node]
            own = ex[node][k] - u[node][k]
            sib = rsv[p][k] - (own if own > 0.0 else 0.0)
            a = min(mx[node][k] - u[node][k], a - sib)
            if a < 0.0:
                a = 0.0
        return a

    def available_raw(self, q: int, k: int) -> float:
        """available(q, k) without the clamping at 0 (negative: how far it is short), so a
        parked workload knows how much must be freed before it could fit."""
        u, ex, mx, rsv, parent = self.u, self.ex, self.mx, self.rsv_sum, self.parent
        a = self.cap[k] - u[ROOT][k]
        for node in self.chain[q]:
            p = parent[node]
            own = ex[node][k] - u[node][k]
            sib = rsv[p][k] - (own if own > 0.0 else 0.0)
            a = min(mx[node][k] - u[node][k], a - sib)
        return a

    def fits(self, q: int, demand: Demand) -> bool:
        """The demand fits the quota of leaf q: d <= available(q, k) for every key."""
        # (`available`, inlined: the cycle's most frequent check.)
        u, ex, mx, rsv = self.u, self.ex, self.mx, self.rsv_sum
        u0 = u[ROOT]
        down = self.down[q]
        for k, amount in demand:
            a = self.cap[k] - u0[k]
            for node, p in down:
                un = u[node][k]
                own = ex[node][k] - un
                a2 = a - (rsv[p][k] - own) if own > 0.0 else a - rsv[p][k]
                a = mx[node][k] - un
                if a2 < a:
                    a = a2
                if a < 0.0:
                    a = 0.0
            if amount > a + EPS:
                return False
        return True

    def within_guarantee(self, q: int, demand: Demand) -> bool:
        """u + d <= min at q and every ancestor, other subtrees' borrowed excess ignored."""
        u, mn, gs, parent = self.u, self.mn, self.g_sum, self.parent
        for k, amount in demand:
            node = q
            eff = u[node][k]
            while node > 0:
                if eff + amount > mn[node][k] + EPS:
                    return False
                p = parent[node]
                if p == ROOT:
                    break
                eff = eff + gs[p][k] - min(u[node][k], mn[node][k])
                node = p
        return True

    def borrowing(self, q: int, k: int) -> bool:
        return self.u[q][k] > self.mn[q][k] + EPS

    def borrow_ratio(self, q: int, k: int) -> float:
        """(u - min) / min on key k: how much q borrows (infinite when min is 0)."""
        excess = self.u[q][k] - self.mn[q][k]
        if excess <= EPS:
            return 0.0
        m = self.mn[q][k]
        return excess / m if m > EPS else INF

    def attainment(self, q: int, k: int | None) -> float:
        """u / min on key k; 1 when min is 0 or the key is not accounted."""
        if k is None:
            return 1.0
        m = self.mn[q][k]
        return self.u[q][k] / m if m > EPS else 1.0

    # ---- reasons ---------------------------------------------------------------------

    def quota_reason(self, q: int, demand: Demand) -> Reason | None:
        """Why the demand does not fit the quota of leaf q (None when it fits)."""
        for k, amount in demand:
            if amount <= self.available(q, k) + EPS:
                continue
            kn = key_name(self.keys[k])
            for node in reversed(self.chain[q]):
                if self.u[node][k] + amount > self.mx[node][k] + EPS:
                    policy = self.max_policy[node][k]
                    suffix = f" (lowered by policy {policy})" if policy else ""
                    return Reason(ReasonCode.QUOTA_MAX, (
                        f"queue {self.paths[node]} {kn}: used {fmt(self.u[node][k])} + requested "
                        f"{fmt(amount)} > max {fmt(self.mx[node][k])}{suffix}"))
            # Find the highest level where the room runs short.
            a = self.cap[k] - self.u[ROOT][k]
            if a + EPS < amount:
                return Reason(ReasonCode.NO_CAPACITY, (
                    f"fleet {kn}: requested {fmt(amount)} > free {fmt(max(0.0, a))} "
                    f"(capacity {fmt(self.cap[k])}, used {fmt(self.u[ROOT][k])})"))
            for node in self.chain[q]:
                p = self.parent[node]
                own = self.ex[node][k] - self.u[node][k]
                sib = self.rsv_sum[p][k] - max(0.0, own)
                room = a - sib
                if room + EPS < amount:
                    where = self.paths[p] if p != ROOT else "the fleet"
                    return Reason(ReasonCode.QUOTA_BORROW_UNAVAILABLE, (
                        f"queue {self.paths[node]} {kn}: used {fmt(self.u[node][k])}, min "
                        f"{fmt(self.mn[node][k])}, requested {fmt(amount)} > {fmt(max(0.0, room))}"
                        f" available from {where} ({fmt(sib)} held unused by siblings' "
                        f"exclusive min)"))
                a = max(0.0, min(self.mx[node][k] - self.u[node][k], room))
        return None

    def quota_code(self, q: int, demand: Demand) -> ReasonCode | None:
        """The code `quota_reason` gives, without building its message."""
        for k, amount in demand:
            if amount <= self.available(q, k) + EPS:
                continue
            for node in reversed(self.chain[q]):
                if self.u[node][k] + amount > self.mx[node][k] + EPS:
                    return ReasonCode.QUOTA_MAX
            a = self.cap[k] - self.u[ROOT][k]
            if a + EPS < amount:
                return ReasonCode.NO_CAPACITY
            for node in self.chain[q]:
                p = self.parent[node]
                own = self.ex[node][k] - self.u[node][k]
                room = a - (self.rsv_sum[p][k] - max(0.0, own))
                if room + EPS < amount:
                    return ReasonCode.QUOTA_BORROW_UNAVAILABLE
                a = max(0.0, min(self.mx[node][k] - self.u[node][k], room))
        return None

    def quota_reason_brief(self, q: int, demand: Demand) -> Reason | None:
        """`quota_reason`'s code, with only the "(lowered by policy ...)" part of its message
        (for a reason the cycle replaces before anyone sees it); None when the demand fits.
        Reasons are immutable: one instance per code and suffix is shared."""
        code = self.quota_code(q, demand)
        if code is None:
            return None
        suffix = ""
        if code == ReasonCode.QUOTA_MAX:
            for k, amount in demand:
                if amount <= self.available(q, k) + EPS:
                    continue
                for node in reversed(self.chain[q]):
                    if self.u[node][k] + amount > self.mx[node][k] + EPS:
                        policy = self.max_policy[node][k]
                        suffix = f"(lowered by policy {policy})" if policy else ""
                        break
                break
        got = _BRIEF.get((code, suffix))
        if got is None:
            got = _BRIEF[(code, suffix)] = Reason(code, suffix)
        return got

    def guarantee_reason(self, q: int, demand: Demand) -> Reason | None:
        """Why the demand is beyond the guarantee (for a non-preemptible workload)."""
        u, mn, gs, parent = self.u, self.mn, self.g_sum, self.parent
        for k, amount in demand:
            node = q
            eff = u[node][k]
            while node > 0:
                if eff + amount > mn[node][k] + EPS:
                    return Reason(ReasonCode.NON_PREEMPTIBLE_BEYOND_MIN, (
                        f"queue {self.paths[node]} {key_name(self.keys[k])}: non-preemptible, "
                        f"used {fmt(eff)} + requested {fmt(amount)} > min {fmt(mn[node][k])}"))
                p = parent[node]
                if p == ROOT:
                    break
                eff = eff + gs[p][k] - min(u[node][k], mn[node][k])
                node = p
        return None

    def static_reasons(
        self, q: int, demand: Demand, *, preemptible: bool, policy_aware: bool = True
    ) -> list[Reason]:
        """Reasons the demand can never fit: above a max, or non-preemptible above a min."""
        out: list[Reason] = []
        for k, amount in demand:
            kn = key_name(self.keys[k])
            for node in reversed(self.chain[q]):
                if policy_aware and self.max_policy[node][k]:
                    continue
                if amount > self.mx[node][k] + EPS:
                    out.append(Reason(ReasonCode.QUOTA_MAX, (
                        f"queue {self.paths[node]} {kn}: requested {fmt(amount)} > max "
                        f"{fmt(self.mx[node][k])}")))
                    break
            if not preemptible:
                for node in reversed(self.chain[q]):
                    if amount > self.mn[node][k] + EPS:
                        out.append(Reason(ReasonCode.NON_PREEMPTIBLE_BEYOND_MIN, (
                            f"queue {self.paths[node]} {kn}: non-preemptible, requested "
                            f"{fmt(amount)} > min {fmt(self.mn[node][k])}")))
                        break
        return out

    def demand(self, flavor: str, amounts: Iterable[tuple[str, float]]) -> Demand:
        """The accounted part of a demand on one flavor, as (key index, amount) pairs."""
        out: Demand = []
        for resource, amount in amounts:
            k = self.kidx.get((flavor, resource))
            if k is not None and amount > 0:
                out.append((k, float(amount)))
        return out
