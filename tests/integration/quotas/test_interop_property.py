"""Property: any valid tree survives export -> import in each format (hypothesis)."""

from decimal import Decimal

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.quantity import parse_quantity
from quotas import selectors
from quotas.interop import quotas_export, quotas_import
from quotas.models import Queue, QuotaEntry
from quotas.services import QueueDef, tree_replace
from quotas.tree_rules import QuotaSpec, Resolved, validate_tree
from tests.factories import FlavorFactory

pytestmark = pytest.mark.django_db
KEYS = [("a100-80g", "gpu"), ("h100-80g", "gpu"), ("a100-80g", "cpu"), ("a100-80g", "memory")]
STEP = {"gpu": Decimal(1), "cpu": Decimal("0.5"), "memory": Decimal("0.25")}


def _amount(draw, resource, low, high):
    step = STEP[resource]
    if high < low:
        return low
    n = draw(st.integers(int(low / step), int(high / step)))
    return n * step


@st.composite
def trees(draw):
    """A valid tree, built top-down so each child fits its parent (V1-V4)."""
    defs = []

    def build(path, parent_res, depth):
        quota = {}
        res = {}
        for key in KEYS:
            parent = parent_res.get(key)
            if parent is not None and draw(st.integers(0, 3)) == 0:
                continue  # not set here: min 0, max inherited
            if parent is None and path.count("/") and not draw(st.booleans()):
                continue
            r = key[1]
            room = parent["room"] if parent else Decimal(64)
            excl_room = parent["excl_room"] if parent else Decimal(64)
            pmax = parent["max"] if parent else None
            qmin = _amount(draw, r, Decimal(0), min(room, pmax if pmax is not None else room))
            low_lend = max(Decimal(0), qmin - excl_room)
            lendable = None
            if low_lend > 0 or draw(st.booleans()):
                lendable = _amount(draw, r, low_lend, qmin)
            qmax = None
            if draw(st.booleans()):
                qmax = _amount(draw, r, qmin, pmax if pmax is not None else qmin + 32)
            if parent:
                parent["room"] -= qmin
                parent["excl_room"] -= qmin - (lendable if lendable is not None else qmin)
            quota[key] = QuotaSpec(min=qmin, max=qmax, lendable=lendable)
            eff_lend = lendable if lendable is not None else qmin
            res[key] = {"room": qmin, "excl_room": qmin - eff_lend,
                        "max": qmax if qmax is not None else pmax}
        # Keys this queue does not set: children get min 0 (room 0).
        for key in KEYS:
            if key not in res:
                pmax = parent_res[key]["max"] if key in parent_res else None
                res[key] = {"room": Decimal(0), "excl_room": Decimal(0), "max": pmax}
        defs.append(QueueDef(path=path, quota=quota,
                             strategy=draw(st.sampled_from(["", "binpack", "spread"]))))
        if depth < 3:
            for i in range(draw(st.integers(0, 3))):
                build(f"{path}/c{i}", res, depth + 1)

    for i in range(draw(st.integers(1, 3))):
        build(f"top{i}", {}, 1)
    return defs


def stored():
    return sorted(
        (p, f, r, mn.normalize(), None if mx is None else mx.normalize(),
         None if ld is None else ld.normalize())
        for p, f, r, mn, mx, ld in QuotaEntry.objects.values_list(
            "queue__path", "flavor__name", "resource", "min", "max", "lendable")
    ), sorted(Queue.objects.values_list("path", "namespace", "strategy"))


def resolved():
    report = validate_tree(selectors.tree_specs().values())
    zero = Resolved(min=0, max=None, lendable=0)
    return {
        path: {key: (res.get(key, zero).min, res.get(key, zero).max, res.get(key, zero).lendable)
               for key in KEYS if res.get(key, zero) != zero}
        for path, res in report.resolved.items()
    }


def check_accepted(fmt, docs):
    """The checks the target system's admission webhook makes on these objects."""
    if fmt == "koordinator":
        assert len({tuple(sorted(d["spec"].get("max", {}))) for d in docs}) <= 1
        for d in docs:
            for name, value in d["spec"].get("min", {}).items():
                assert parse_quantity(value) <= parse_quantity(d["spec"]["max"][name])
    if fmt == "volcano":
        for d in docs:
            cap = d["spec"].get("capability", {})
            deserved = d["spec"].get("deserved", {})
            guarantee = d["spec"].get("guarantee", {}).get("resource", {})
            for name, value in [*deserved.items(), *guarantee.items()]:
                if cap:  # Volcano: a missing capability dimension counts as zero
                    assert parse_quantity(value) <= parse_quantity(cap[name])
            for name, value in guarantee.items():
                assert parse_quantity(value) <= parse_quantity(deserved[name])
    if fmt == "kueue":
        for d in docs:
            if d["kind"] not in ("ClusterQueue", "Cohort"):
                continue
            has_parent = any(d["spec"].get(f) for f in ("cohort", "cohortName", "parentName"))
            for group in d["spec"].get("resourceGroups", []):
                for flavor in group["flavors"]:
                    names = [r["name"] for r in flavor["resources"]]
                    assert names == group["coveredResources"]
                    for r in flavor["resources"]:
                        if "borrowingLimit" in r or "lendingLimit" in r:
                            assert has_parent
                        if d["kind"] == "ClusterQueue" and "lendingLimit" in r:
                            assert (parse_quantity(r["lendingLimit"])
                                    <= parse_quantity(r["nominalQuota"]))


def wipe():
    QuotaEntry.objects.all().delete()
    for q in Queue.objects.order_by("-depth"):
        q.delete()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(defs=trees())
def test_round_trips(defs):
    FlavorFactory(name="a100-80g")
    FlavorFactory(name="h100-80g")
    wipe()
    tree_replace(queues=defs)
    original, original_resolved = stored(), resolved()
    for fmt in ("volcano", "koordinator", "kueue"):
        text = quotas_export(fmt)
        check_accepted(fmt, list(yaml.safe_load_all(text)))
        wipe()
        quotas_import([(f"{fmt}.yaml", text)])
        if fmt == "kueue":
            # Kueue has no "explicitly zero": compare what the tree means.
            assert resolved() == original_resolved, fmt
            assert stored()[1] == original[1], fmt
        else:
            assert stored() == original, fmt
        wipe()
        tree_replace(queues=defs)
