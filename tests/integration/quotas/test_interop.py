"""Import/export: the three formats, round trips, all-or-nothing, hostile YAML."""

from decimal import Decimal
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from core.quantity import QuantityError, format_quantity, to_amount
from quotas.interop import quotas_export, quotas_import
from quotas.models import Flavor, Queue, QuotaEntry
from quotas.services import queue_create
from quotas.tree_rules import QuotaSpec
from tests.factories import FlavorFactory

pytestmark = pytest.mark.django_db

KUEUE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: a100-80g
  annotations: {allot.io/gpu-memory-gib: "80"}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: cpu}
spec:
  nodeLabels: {node-type: cpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: rd}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100-80g
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 4, borrowingLimit: 16, lendingLimit: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: rd-vision}
spec:
  cohort: rd
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: a100-80g
      resources:
      - {name: cpu, nominalQuota: "96", borrowingLimit: 32}
      - {name: memory, nominalQuota: 1536Gi}
      - {name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 8, lendingLimit: 4}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: rd-nlp}
spec:
  cohort: rd
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100-80g
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 4}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: batch}
spec:
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: cpu
      resources:
      - {name: cpu, nominalQuota: 500m}
      - {name: memory, nominalQuota: 512Mi}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: vision, namespace: team-vision}
spec: {clusterQueue: rd-vision}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-vision}
"""

VOLCANO = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: root}
spec: {weight: 1}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec:
  weight: 1
  reclaimable: true
  parent: root
  capability: {nvidia.com/gpu: 32, cpu: "256", memory: 2048Gi}
  deserved: {nvidia.com/gpu: 16, cpu: "128", memory: 1024Gi, h100-80g.allot.io/gpu: 2}
  guarantee:
    resource: {nvidia.com/gpu: 8}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research-vision}
spec:
  parent: research
  capability: {nvidia.com/gpu: 24}
  deserved: {nvidia.com/gpu: 8, cpu: "64", memory: 512Gi}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research-nlp}
spec:
  parent: research
  deserved: {nvidia.com/gpu: 6, h100-80g.allot.io/gpu: 2}
"""

KOORD = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: research
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/is-parent: "true"
    quota.scheduling.koordinator.sh/parent: koordinator-root-quota
spec:
  max: {nvidia.com/gpu: 40, cpu: 320, memory: 2560Gi}
  min: {nvidia.com/gpu: 20, cpu: 160, memory: 1280Gi}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: vision
  namespace: team-vision
  labels:
    quota.scheduling.koordinator.sh/is-parent: "false"
    quota.scheduling.koordinator.sh/parent: research
spec:
  max: {nvidia.com/gpu: 40}
  min: {nvidia.com/gpu: 12, cpu: 96, memory: 768Gi}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: nlp
  namespace: team-nlp
  labels:
    quota.scheduling.koordinator.sh/parent: research
spec:
  min: {nvidia.com/gpu: 8}
"""


def stored_tree():
    """Everything the tree stores, comparable across imports."""
    queues = sorted(Queue.objects.values_list("path", "namespace", "strategy"))
    quotas = sorted(
        (p, f, r, mn.normalize(), mx if mx is None else mx.normalize(),
         ld if ld is None else ld.normalize())
        for p, f, r, mn, mx, ld in QuotaEntry.objects.values_list(
            "queue__path", "flavor__name", "resource", "min", "max", "lendable")
    )
    return queues, quotas


def wipe():
    QuotaEntry.objects.all().delete()
    for q in Queue.objects.order_by("-depth"):
        q.delete()


def entry(path, flavor="a100-80g", resource="gpu"):
    return QuotaEntry.objects.get(queue__path=path, flavor__name=flavor, resource=resource)


def test_kueue_import_mapping():
    result = quotas_import([("kueue.yaml", KUEUE)])
    assert result.system == "kueue"
    assert sorted(result.replaced.created) == ["batch", "rd", "rd/nlp", "rd/vision"]
    assert result.replaced.flavors_created == ["a100-80g", "cpu"]
    assert any("Namespace" in s for s in result.skipped)
    assert Flavor.objects.get(name="a100-80g").gpu_memory_gib == 80
    rd = entry("rd")  # own 4 + children 8 + 4 = 16; max = 16 + 16
    assert (rd.min, rd.max, rd.lendable) == (16, 32, 8)
    vision = entry("rd/vision")
    assert (vision.min, vision.max, vision.lendable) == (8, 16, 4)
    cpu = entry("rd/vision", resource="cpu")
    assert (cpu.min, cpu.max, cpu.lendable) == (96, 128, None)
    assert entry("rd/vision", resource="memory").min == 1536
    batch = entry("batch", flavor="cpu", resource="cpu")
    assert batch.min == Decimal("0.5")
    assert entry("batch", flavor="cpu", resource="memory").min == Decimal("0.5")
    assert Queue.objects.get(path="rd/vision").namespace == "team-vision"
    assert Queue.objects.get(path="rd/nlp").namespace == "rd-nlp"
    assert Queue.objects.get(path="rd").namespace == ""


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_kueue_round_trip(version):
    quotas_import([("kueue.yaml", KUEUE)])
    first = stored_tree()
    text = quotas_export("kueue", kueue_version=version)
    docs = list(yaml.safe_load_all(text))
    kinds = [(d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in docs]
    api = f"kueue.x-k8s.io/{version}"
    assert (api, "Cohort", "allot-root") in kinds
    assert (api, "Cohort", "rd") in kinds and (api, "ClusterQueue", "rd.vision") in kinds
    assert (api, "LocalQueue", "vision") in kinds
    rd = next(d for d in docs if d["metadata"]["name"] == "rd")
    resources = rd["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    gpu = next(r for r in resources if r["name"] == "nvidia.com/gpu")
    # children's cpu/memory add up into the cohort's min: own part 0
    assert {"name": "cpu", "nominalQuota": "0"} in resources
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "16",
                   "lendingLimit": "8"}
    cq = next(d for d in docs if d["metadata"]["name"] == "rd.vision")
    field = "cohortName" if version == "v1beta2" else "cohort"
    assert cq["spec"][field] == "rd"
    assert cq["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "memory",
                                                                  "nvidia.com/gpu"]
    assert {"name": "memory", "nominalQuota": "1536Gi"} in (
        cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"])
    wipe()
    quotas_import([("export.yaml", text)])
    assert stored_tree() == first


def test_volcano_import_mapping_and_round_trip():
    FlavorFactory(name="a100-80g")
    FlavorFactory(name="h100-80g")
    quotas_import([("volcano.yaml", VOLCANO)], default_flavor="a100-80g")
    research = entry("research")
    assert (research.min, research.max, research.lendable) == (16, 32, 8)  # guarantee 8
    assert entry("research", resource="memory").max == 2048
    assert entry("research/vision").max == 24
    assert entry("research/nlp", flavor="h100-80g").min == 2
    first = stored_tree()
    text = quotas_export("volcano")
    docs = list(yaml.safe_load_all(text))
    assert {d["apiVersion"] for d in docs} == {"scheduling.volcano.sh/v1beta1"}
    research_doc = next(d for d in docs if d["metadata"]["name"] == "research")
    assert research_doc["spec"]["parent"] == "root"
    assert research_doc["spec"]["capability"]["a100-80g.allot.io/memory"] == "2048Gi"
    assert research_doc["spec"]["guarantee"] == {"resource": {"a100-80g.allot.io/gpu": "8"}}
    wipe()
    quotas_import([("export.yaml", text)])
    assert stored_tree() == first


def test_koordinator_import_mapping_and_round_trip():
    FlavorFactory(name="a100-80g")
    queue_create(name="old")
    quotas_import([("koord.yaml", KOORD)], default_flavor="a100-80g", prune=True)
    assert not Queue.objects.filter(path="old").exists()
    assert entry("research").min == 20 and entry("research").max == 40
    assert Queue.objects.get(path="research/vision").namespace == "team-vision"
    assert entry("research/nlp").max is None
    # An explicit lendable (Koordinator has none) travels as an annotation.
    queue_create(name="x", parent=Queue.objects.get(path="research/nlp"),
                 quota={("a100-80g", "gpu"): QuotaSpec(Decimal(2), Decimal(4), Decimal(2))})
    first = stored_tree()
    text = quotas_export("koordinator")
    docs = list(yaml.safe_load_all(text))
    assert {d["kind"] for d in docs} == {"ElasticQuota"}
    nlp = next(d for d in docs if d["metadata"]["name"] == "research.nlp")
    labels = nlp["metadata"]["labels"]
    assert labels["quota.scheduling.koordinator.sh/parent"] == "research"
    assert labels["quota.scheduling.koordinator.sh/is-parent"] == "true"
    # Koordinator's webhook: min resources appear in max, and every quota names the same max
    # resources as its parent (filled-in ones are listed so an import restores "not set").
    key_sets = {tuple(sorted(d["spec"]["max"])) for d in docs}
    assert len(key_sets) == 1
    for d in docs:
        assert set(d["spec"].get("min", {})) <= set(d["spec"]["max"])
    assert nlp["metadata"]["annotations"]["allot.io/max-defaulted"] == (
        "a100-80g.allot.io/cpu,a100-80g.allot.io/gpu,a100-80g.allot.io/memory")
    assert nlp["spec"]["max"]["a100-80g.allot.io/gpu"] == "40"  # inherited from research
    leaf = next(d for d in docs if d["metadata"]["name"] == "research.nlp.x")
    assert leaf["metadata"]["annotations"]["allot.io/lendable"] == '{"a100-80g.allot.io/gpu": "2"}'
    wipe()
    quotas_import([("export.yaml", text)])
    assert stored_tree() == first


def refused(sources, **kwargs):
    before = stored_tree(), sorted(Flavor.objects.values_list("name", flat=True))
    with pytest.raises(Exception) as exc:
        quotas_import(sources, **kwargs)
    assert (stored_tree(), sorted(Flavor.objects.values_list("name", flat=True))) == before
    return " | ".join(getattr(exc.value, "messages", [str(exc.value)]))


def test_invalid_tree_changes_nothing():
    queue_create(name="keep")
    bad = KUEUE.replace("nominalQuota: 4, borrowingLimit: 16", "nominalQuota: 4, "
                        "borrowingLimit: 16, extra: 1").replace(
        "{name: nvidia.com/gpu, nominalQuota: 4}", "{name: nvidia.com/gpu, nominalQuota: 4, "
        "lendingLimit: 5}")
    message = refused([("bad.yaml", bad)])
    assert message == "rd/nlp: a100-80g/gpu: lendable 5 > min 4"
    assert not Flavor.objects.exists()


@pytest.mark.parametrize("doc,message", [
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n"
     "spec: {resourceGroups: [{coveredResources: [cpu], flavors: [{name: a100-80g, "
     "resources: [{name: cpu, nominalQuota: lots}]}]}]}",
     "x.yaml: ClusterQueue/q: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
     "'lots' is not a Kubernetes quantity (like 64, 500m, 2048Gi)"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n"
     "spec: {resourceGroups: {a: 1}}",
     "x.yaml: ClusterQueue/q: spec.resourceGroups: must be a list, not dict"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n"
     "spec: {cohort: [1, 2]}",
     "x.yaml: ClusterQueue/q: spec.cohort: must be a str, not list"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n"
     "spec: {resourceGroups: [{coveredResources: [pods!], flavors: [{name: a100-80g, "
     "resources: [{name: pods!, nominalQuota: 5}]}]}]}",
     "x.yaml: ClusterQueue/q: spec.resourceGroups[0].flavors[0].resources[0].name: resource "
     "name 'pods!' is not a Kubernetes resource name"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n"
     "spec: {resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: t4, "
     "resources: [{name: nvidia.com/gpu, nominalQuota: 5}]}]}]}",
     "x.yaml: ClusterQueue/q: spec: unknown flavor 't4' (define it first: a Kueue "
     "ResourceFlavor, the admin, or POST /api/v1/flavors)"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n"
     "spec: {resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: a100-80g, "
     "resources: [{name: nvidia.com/gpu, nominalQuota: -3}]}]}]}",
     "x.yaml: ClusterQueue/q: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
     "-3 is negative"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: a}\n"
     "spec: {parentName: b}\n---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\n"
     "metadata: {name: b}\nspec: {parentName: a}",
     "parent cycle"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n---\n"
     "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}",
     "x.yaml: ClusterQueue/q: metadata.name: defined twice (ClusterQueue/q too)"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {}",
     "metadata.name: must be a non-empty string"),
    ("- just\n- a list", "x.yaml: document 1 is a list, not a Kubernetes object"),
    ("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: v}\n"
     "spec: {deserved: {nvidia.com/gpu: 4}}",
     "x.yaml: Queue/v: spec.deserved: resource 'nvidia.com/gpu' names no flavor: pass "
     "--flavor NAME, or write <flavor>.allot.io/gpu"),
    ("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: v}\n"
     "spec: {deserved: {a100-80g.allot.io/gpu: 4}, guarantee: {resource: "
     "{a100-80g.allot.io/gpu: 6}}}",
     "x.yaml: Queue/v: spec.guarantee.resource: a100-80g/gpu: guarantee 6 > deserved 4"),
    ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n---\n"
     "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: v}",
     "the files mix systems: kueue (ClusterQueue/q), volcano (Queue/v); import one system "
     "at a time"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}",
     "no Kueue, Volcano or Koordinator quota objects found"),
    ("key: [unclosed", "x.yaml: not valid YAML"),
])
def test_bad_input_is_named_and_changes_nothing(doc, message):
    FlavorFactory(name="a100-80g")
    assert message in refused([("x.yaml", doc)])


def test_alias_bomb_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    message = refused([("bomb.yaml", bomb)])
    assert message == ("bomb.yaml: line 1: YAML anchors and aliases are not accepted "
                       "(write each value out)")


def test_huge_file_refused(monkeypatch):
    from quotas.interop import loader
    monkeypatch.setattr(loader, "MAX_BYTES", 1000)
    message = refused([("big.yaml", "# " + "x" * 2000)])
    assert message == "big.yaml: 2002 bytes is larger than the limit of 1000"


def test_deep_nesting_refused():
    message = refused([("deep.yaml", "[" * 20000 + "]" * 20000)])
    assert "deep.yaml" in message


def test_quantities_exact():
    assert to_amount("memory", "2048Gi") == 2048
    assert to_amount("memory", "512Mi") == Decimal("0.5")
    assert to_amount("cpu", "500m") == Decimal("0.5")
    assert to_amount("cpu", "1e3") == 1000
    assert to_amount("gpu", 64) == 64
    assert to_amount("memory", str(2**30)) == 1
    assert to_amount("memory", "100Mi") == Decimal("0.09765625")
    for resource, value in [("memory", "0.5"), ("gpu", "1.5"), ("cpu", "10u"),
                            ("cpu", "ten"), ("cpu", True)]:
        with pytest.raises(QuantityError):
            to_amount(resource, value)
    assert format_quantity("memory", Decimal(2048)) == "2048Gi"
    assert format_quantity("memory", Decimal("0.5")) == "512Mi"
    assert format_quantity("cpu", Decimal("0.5")) == "500m"
    assert format_quantity("gpu", Decimal(8)) == "8"


def test_commands(tmp_path):
    path = tmp_path / "kueue.yaml"
    path.write_text(KUEUE)
    out = StringIO()
    call_command("import_quotas", str(path), "--dry-run", stdout=out)
    assert "would import kueue: 4 queue(s) created" in out.getvalue()
    assert not Queue.objects.exists()
    out = StringIO()
    call_command("import_quotas", str(path), stdout=out)
    assert "imported kueue: 4 queue(s) created, 0 updated, 0 deleted, 2 flavor(s) created" in (
        out.getvalue())
    out = StringIO()
    call_command("export_quotas", "--format", "volcano", stdout=out)
    assert "kind: Queue" in out.getvalue()
    with pytest.raises(CommandError) as exc:
        call_command("import_quotas", str(tmp_path / "missing.yaml"))
    assert "no such file" in str(exc.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: &x 1\nb: *x\n")
    with pytest.raises(CommandError) as exc:
        call_command("import_quotas", str(bad))
    assert "import refused, nothing changed" in str(exc.value)
    assert "anchors and aliases" in str(exc.value)


def test_import_reads_standard_input_for_dash(monkeypatch):
    """`import_quotas -`: the manifests piped in, YAML or JSON, as from a file."""
    import io
    import json

    out = StringIO()
    call_command("import_quotas", "-", "--dry-run", stdin=StringIO(KUEUE), stdout=out)
    assert "would import kueue: 4 queue(s) created" in out.getvalue()
    assert not Queue.objects.exists()
    # JSON documents (one per YAML document), from the process's own standard input.
    FlavorFactory(name="a100-80g")
    FlavorFactory(name="h100-80g")
    as_json = "\n---\n".join(json.dumps(d) for d in yaml.safe_load_all(VOLCANO))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(as_json.encode())))
    out = StringIO()
    call_command("import_quotas", "-", "--flavor", "a100-80g", stdout=out)
    assert "imported volcano:" in out.getvalue()
    assert QuotaEntry.objects.get(queue__path="research/vision", resource="gpu").max == 24


def test_import_from_standard_input_refuses_a_terminal_a_second_dash_and_bad_input():
    class Terminal(StringIO):
        def isatty(self):
            return True

    with pytest.raises(CommandError, match="standard input, which is a terminal"):
        call_command("import_quotas", "-", stdin=Terminal(KUEUE))
    with pytest.raises(CommandError, match=r"'-' \(standard input\) given 2 times"):
        call_command("import_quotas", "-", "-", stdin=StringIO(KUEUE))
    with pytest.raises(CommandError) as exc:
        call_command("import_quotas", "-", stdin=StringIO("a: &x 1\nb: *x\n"))
    assert "<stdin>: line 1: YAML anchors and aliases are not accepted" in str(exc.value)
    assert not Queue.objects.exists()
