"""Open resources in the importers (QUOTA-SEMANTICS.md §10): the Kueue examples with resource
names beyond gpu/cpu/memory, Kueue's cohort lending, Volcano's `4G`, `--flavor` creating the
flavor; each imports and exports back to the same quantities."""

from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ValidationError

from quotas.interop import quotas_export, quotas_import
from quotas.models import Flavor, QuotaEntry
from quotas.selectors import tree_specs

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "interop"


def _import(name: str, **kw):  # type: ignore[no-untyped-def]
    return quotas_import([(name, (FIXTURES / name).read_text())], **kw)


def _quantities(docs: list[dict]) -> dict[tuple[str, str, str], object]:
    """(queue, flavor, resource) -> nominalQuota (lending/borrowing limits too) as written."""
    out: dict[tuple[str, str, str], object] = {}
    for doc in docs:
        if doc.get("kind") not in ("ClusterQueue", "Cohort"):
            continue
        for group in doc.get("spec", {}).get("resourceGroups", []):
            for flavor in group["flavors"]:
                for res in flavor["resources"]:
                    for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                        if field in res and not (field == "nominalQuota"
                                                 and str(res[field]) == "0"):
                            key = (doc["metadata"]["name"], flavor["name"],
                                   f"{res['name']}.{field}")
                            out[key] = str(res[field])
    return out


KUEUE_EXAMPLES = {
    "kueue-shared-quota.yaml": {("credits", "cpu_credits"): Decimal(14),
                                ("spot", "cpu"): Decimal(9)},
    "kueue-dra-capacity.yaml": {("default-flavor", "gpu.memory"): Decimal(800),
                                ("default-flavor", "memory"): Decimal(200)},
    "kueue-dra-counter.yaml": {("default-flavor", "gpu.memory"): Decimal(800)},
    "kueue-dra.yaml": {("default-flavor", "example.com/gpu"): Decimal(8)},
    "kueue-hami.yaml": {("hami-flavor", "gpu"): Decimal(20),
                        ("hami-flavor", "nvidia.com/total-gpucores"): Decimal(600),
                        ("hami-flavor", "nvidia.com/total-gpumem"): Decimal(20480)},
}


@pytest.mark.parametrize("name", sorted(KUEUE_EXAMPLES))
def test_kueue_examples_import_and_export_back(name: str) -> None:
    _import(name)
    (leaf,) = [s for s in tree_specs().values() if s.parent is None]
    for key, amount in KUEUE_EXAMPLES[name].items():
        assert leaf.quota[key].min == amount
    before = _quantities(list(yaml.safe_load_all((FIXTURES / name).read_text())))
    exported = list(yaml.safe_load_all(quotas_export("kueue")))
    assert all(d["apiVersion"] == "kueue.x-k8s.io/v1beta2" for d in exported)
    assert _quantities(exported) == before
    # And back again: the same tree.
    stored = tree_specs()
    quotas_import([("again.yaml", quotas_export("kueue"))])
    assert tree_specs() == stored


def test_exact_bytes_are_stored_as_integers() -> None:
    _import("kueue-dra-capacity.yaml")
    entry = QuotaEntry.objects.get(resource="gpu.memory")
    assert entry.min_base == 800 * 2**30
    assert entry.min == Decimal(800)
    cpu = QuotaEntry.objects.get(resource="cpu")
    assert cpu.min_base == 40_000  # millicores


def test_cohort_lends_what_its_children_lend() -> None:
    _import("kueue-mig-lending.yaml")
    specs = tree_specs()
    research = specs["research"].quota[("a100-80g", "gpu")]
    # min 32 (16 + 16), children keep 6 + 6 exclusive: the cohort lends 20, not 32.
    assert (research.min, research.lendable) == (32, 20)
    mig = specs["research/vision"].quota[("a100-mig", "nvidia.com/mig-1g.10gb")]
    assert (mig.min, mig.max) == (14, 28)
    exported = list(yaml.safe_load_all(quotas_export("kueue")))
    cohort = next(d for d in exported if d["metadata"]["name"] == "research")
    cells = [r for g in cohort["spec"]["resourceGroups"] for f in g["flavors"]
             for r in f["resources"]]
    assert all("lendingLimit" not in c for c in cells)  # the derived default is not written
    vision = next(d for d in exported if d["metadata"]["name"] == "research.vision")
    names = [r["name"] for g in vision["spec"]["resourceGroups"] for f in g["flavors"]
             for r in f["resources"]]
    assert "nvidia.com/mig-1g.10gb" in names


def test_volcano_4g_exact_and_flavor_created() -> None:
    assert not Flavor.objects.filter(name="default").exists()
    result = _import("volcano-queue.yaml", default_flavor="default")
    assert Flavor.objects.filter(name="default").exists()
    assert result.replaced.flavors_created == ["default"]
    assert any("flavor 'default' did not exist: created it" in s for s in result.skipped)
    mem = tree_specs()["test"].quota[("default", "memory")]
    assert mem.max == Decimal("3.7252902984619140625")
    assert QuotaEntry.objects.get(resource="memory").max_base == 4_000_000_000
    queue = next(d for d in yaml.safe_load_all(quotas_export("volcano"))
                 if d["metadata"]["name"] == "test")
    assert queue["spec"]["capability"]["default.allot.io/memory"] == "4G"
    assert queue["spec"]["capability"]["default.allot.io/cpu"] == "2"


@pytest.mark.parametrize(("value", "message"), [
    ("4Q", "'4Q' is not a Kubernetes quantity"),
    ("0.5", "0.5 is not a whole number of bytes"),
    ("-1Gi", "-1Gi is negative"),
])
def test_bad_memory_quantities_refused(value: str, message: str) -> None:
    text = (FIXTURES / "volcano-queue.yaml").read_text().replace("memory: 4G",
                                                                  f"memory: {value!r}")
    with pytest.raises(ValidationError) as exc:
        quotas_import([("q.yaml", text)], default_flavor="default")
    assert message in exc.value.messages[0]
    assert "spec.capability[memory]" in exc.value.messages[0]
    assert not Flavor.objects.filter(name="default").exists()


def test_bad_resource_name_refused() -> None:
    text = (FIXTURES / "kueue-dra.yaml").read_text().replace("example.com/gpu", "bad name!")
    with pytest.raises(ValidationError) as exc:
        quotas_import([("q.yaml", text)])
    assert "'bad name!' is not a Kubernetes resource name" in exc.value.messages[0]


def test_flavor_gpu_equivalents_travel_in_a_kueue_annotation() -> None:
    text = (FIXTURES / "kueue-mig-lending.yaml").read_text().replace(
        "metadata: {name: a100-mig}",
        "metadata: {name: a100-mig, annotations: "
        "{allot.io/gpu-equivalents: '{\"nvidia.com/mig-1g.10gb\": 0.125}'}}")
    quotas_import([("mig.yaml", text)])
    assert Flavor.objects.get(name="a100-mig").gpu_equivalents == {
        "nvidia.com/mig-1g.10gb": 0.125}
    flavor = next(d for d in yaml.safe_load_all(quotas_export("kueue"))
                  if d["kind"] == "ResourceFlavor" and d["metadata"]["name"] == "a100-mig")
    assert flavor["metadata"]["annotations"]["allot.io/gpu-equivalents"] == (
        '{"nvidia.com/mig-1g.10gb": 0.125}')
    bad = text.replace("0.125", '\\"half\\"')
    with pytest.raises(ValidationError) as exc:
        quotas_import([("bad.yaml", bad)])
    assert "allot.io/gpu-equivalents" in exc.value.messages[0]
