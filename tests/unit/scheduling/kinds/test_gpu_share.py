"""A share of one card asked in a manifest the way its sharing mechanism reads it (KAI's
`gpu-fraction` / `gpu-memory` pod annotations, HAMi's `nvidia.com/gpucores` / `gpumem` /
`gpumem-percentage`): the fraction and slice Allot counts, hand-computed; bad shares named by
kind and path; and the cluster's own mechanism's fields replacing them on the created object."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduling import kinds
from scheduling.kinds import ManifestError, Placement
from tests.manifests import container, manifest


def _kai(template: dict, **annotations: str) -> dict:
    template.setdefault("metadata", {})["annotations"] = dict(annotations)
    for c in template["spec"]["containers"]:
        for part in ("requests", "limits"):
            c["resources"][part].pop("nvidia.com/gpu", None)
    return template


def _hami(template: dict, **limits: str) -> dict:
    c = template["spec"]["containers"][0]
    c["resources"]["limits"] = {"nvidia.com/gpu": "1", **{
        f"nvidia.com/{k.replace('_', '-')}": v for k, v in limits.items()}}
    c["resources"]["requests"].pop("nvidia.com/gpu", None)
    return template


def _counted(obj: dict, card_gib: int | None = 80) -> list[tuple[str, int, Decimal, int | None]]:
    return [(s.name, s.count, *s.counted(card_gib)) for s in kinds.kind_of(obj).derive(obj)]


def test_a_kai_job_asks_half_a_card_per_pod():
    obj = manifest("Job")  # parallelism 4
    _kai(obj["spec"]["template"], **{"gpu-fraction": "0.5"})
    (s,) = kinds.kind_of(obj).derive(obj)
    assert (s.count, s.gpus, s.gpu_memory_mib, s.share_path) == (
        4, Decimal("0.5"), None, "spec.template.metadata.annotations.gpu-fraction")
    assert s.counted(80) == (Decimal("0.5"), None)  # the slice: half the card (engine's default)
    assert "nvidia.com/gpu" not in s.other


def test_a_kai_memory_slice_is_its_fraction_of_the_flavors_card():
    obj = manifest("Job")
    _kai(obj["spec"]["template"], **{"gpu-memory": "20000"})
    # 20000 MiB of an 80 GiB card (81920 MiB) = 0.2441... -> 0.245 (rounded up to 0.001);
    # counted as a 20 GiB slice (19.53 GiB, rounded up to whole GiB); on a 40 GiB card 0.489.
    assert _counted(obj, 80) == [("main", 4, Decimal("0.245"), 20)]
    assert _counted(obj, 40) == [("main", 4, Decimal("0.489"), 20)]
    (s,) = kinds.kind_of(obj).derive(obj)
    assert s.gpus == 0 and s.shared and s.gpu_memory_mib == 20000
    with pytest.raises(ValueError, match="memory per card is not known"):
        s.counted(None)
    with pytest.raises(ValueError, match="not less than a card"):
        s.counted(16)  # 20000 MiB > 16 GiB


def test_a_hami_pytorchjob_counts_cores_as_the_fraction():
    obj = manifest("PyTorchJob")  # Master 1, Worker 3
    specs = obj["spec"]["pytorchReplicaSpecs"]
    _hami(specs["Master"]["template"], gpucores="50", gpumem="20480")
    _hami(specs["Worker"]["template"], gpucores="30", gpumem_percentage="40")
    # Master: 50 % of the cores = 0.5, a 20480 MiB = 20 GiB slice; Worker: 0.3 of the card,
    # 40 % of its memory = 32 GiB of 80.
    assert _counted(obj) == [("Master", 1, Decimal("0.5"), 20), ("Worker", 3, Decimal("0.3"), 32)]
    sets = kinds.kind_of(obj).derive(obj)
    assert [s.other for s in sets] == [{}, {}]  # HAMi's resources are no extended resources
    assert sets[0].share_path == "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]" \
        ".resources"


def test_hami_memory_alone_and_a_whole_card_of_cores():
    obj = manifest("PyTorchJob")
    specs = obj["spec"]["pytorchReplicaSpecs"]
    _hami(specs["Master"]["template"], gpumem_percentage="25")  # 0.25, the default slice
    _hami(specs["Worker"]["template"], gpucores="100")  # the whole card
    assert _counted(obj) == [("Master", 1, Decimal("0.25"), None),
                             ("Worker", 3, Decimal(1), None)]
    # HAMi's default: nvidia.com/gpu left out is one card.
    del specs["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"]
    assert _counted(obj)[0] == ("Master", 1, Decimal("0.25"), None)


def test_a_leaderworkerset_of_kai_shares():
    obj = manifest("LeaderWorkerSet")  # 2 groups of 4: leaders 2, workers 6
    lwt = obj["spec"]["leaderWorkerTemplate"]
    _kai(lwt["leaderTemplate"], **{"gpu-memory": "10240"})
    _kai(lwt["workerTemplate"], **{"gpu-fraction": "0.125"})
    # leader: 10240 MiB of a 40 GiB card (40960 MiB) = 0.25, a 10 GiB slice.
    assert _counted(obj, 40) == [("leader", 2, Decimal("0.25"), 10),
                                 ("workers", 6, Decimal("0.125"), None)]
    gangs = kinds.kind_of(obj).gangs(obj)
    assert [[s.gpus for s in kinds.kind_of(g).derive(g)] for g in gangs] == [
        [0, Decimal("0.125")]] * 2


def _job_with(annotations=None, limits=None, **spec) -> dict:
    obj = manifest("Job")
    tpl = obj["spec"]["template"]
    if annotations is not None:
        _kai(tpl, **annotations)
    if limits is not None:
        c = tpl["spec"]["containers"][0]
        c["resources"]["requests"].pop("nvidia.com/gpu", None)
        c["resources"]["limits"] = limits
    tpl["spec"].update(spec)
    return obj


ANN = "spec.template.metadata.annotations"
C0 = "spec.template.spec.containers[0].resources"


@pytest.mark.parametrize(("obj", "path", "words"), [
    (_job_with({"gpu-fraction": "1.5"}), f"{ANN}.gpu-fraction",
     "1.5 is not a fraction of one card (0 < f < 1"),
    (_job_with({"gpu-fraction": "abc"}), f"{ANN}.gpu-fraction", "'abc' is not a number"),
    (_job_with({"gpu-fraction": "0"}), f"{ANN}.gpu-fraction", "0 is not a fraction"),
    (_job_with({"gpu-fraction": "0.0005"}), f"{ANN}.gpu-fraction", "in steps of 0.001"),
    (_job_with({"gpu-memory": "20Gi"}), f"{ANN}.gpu-memory", "'20Gi' is not a whole number of MiB"),
    (_job_with({"gpu-fraction": "0.5", "gpu-memory": "100"}), ANN, "both gpu-fraction and"),
    (_job_with(limits={"nvidia.com/gpu": "2", "nvidia.com/gpucores": "50"}),
     f"{C0}.limits.nvidia.com/gpu", "2 cards with nvidia.com/gpucores"),
    (_job_with(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"}),
     f"{C0}.limits.nvidia.com/gpucores", "0 is out of range (1..100 percent)"),
    (_job_with(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "101"}),
     f"{C0}.limits.nvidia.com/gpucores", "101 is out of range (1..100 percent)"),
    (_job_with(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100",
                       "nvidia.com/gpumem-percentage": "10"}),
     f"{C0}.limits.nvidia.com/gpumem-percentage", "give the slice one way"),
    (_job_with(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"},
               initContainers=[{**container("1", "1Gi", name="warm"), "resources": {
                   "limits": {"nvidia.com/gpucores": "10"}}}]),
     "spec.template.spec.initContainers[0].resources.limits.nvidia.com/gpucores",
     "not an init container"),
])
def test_bad_shares_name_kind_path_problem(obj, path, words):
    with pytest.raises(ManifestError) as exc:
        kinds.kind_of(obj).derive(obj)
    assert (exc.value.kind, exc.value.path) == ("Job", path)
    assert words in exc.value.problem


def test_a_kai_fraction_beside_whole_cards_is_refused():
    obj = manifest("Job")  # its container asks nvidia.com/gpu: 1
    obj["spec"]["template"]["metadata"] = {"annotations": {"gpu-fraction": "0.5"}}
    with pytest.raises(ManifestError, match="with nvidia.com/gpu 1 in the containers"):
        kinds.kind_of(obj).derive(obj)


def test_two_containers_sharing_cards_are_refused():
    obj = _job_with(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"})
    side = container("1", "1Gi", name="side")
    side["resources"]["limits"] = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
    obj["spec"]["template"]["spec"]["containers"].append(side)
    with pytest.raises(ManifestError) as exc:
        kinds.kind_of(obj).derive(obj)
    assert exc.value.path == "spec.template.spec.containers[1].resources"
    assert "one per pod" in exc.value.problem


def _placement(annotations: dict, gpu_limits: dict) -> Placement:
    return Placement(labels={}, annotations=annotations, node_selector={}, nodes=(),
                     gpus=True, gpu_limits=gpu_limits)


def test_a_kai_share_on_a_hami_cluster_becomes_hamis_resources():
    obj = _job_with({"gpu-fraction": "0.5", "team": "vision"})
    kind = kinds.kind_of(obj)
    body = kind.prepare(obj, name="allot-w1-0", namespace="ns", labels={}, annotations={},
                        placements=[_placement({}, {"nvidia.com/gpu": "1",
                                                    "nvidia.com/gpucores": "50",
                                                    "nvidia.com/gpumem": "40960"})])
    tpl = body["spec"]["template"]
    assert tpl["metadata"]["annotations"] == {"team": "vision"}
    assert tpl["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1", "nvidia.com/gpucores": "50", "nvidia.com/gpumem": "40960"}


def test_a_hami_share_on_a_kai_cluster_becomes_kais_annotation():
    obj = _job_with(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30",
                            "nvidia.com/gpumem": "8000", "memory": "1Gi"})
    body = kinds.kind_of(obj).prepare(
        obj, name="allot-w1-0", namespace="ns", labels={}, annotations={},
        placements=[_placement({"gpu-fraction": "0.3"}, {})])
    tpl = body["spec"]["template"]
    assert tpl["metadata"]["annotations"] == {"gpu-fraction": "0.3"}
    resources = tpl["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "1Gi"}
    assert "nvidia.com/gpu" not in resources["requests"]
