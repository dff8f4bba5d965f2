"""A fraction of a card on Kubernetes: what each sharing mechanism (the cluster connection's
`gpu_sharing`) needs on the pods, as the API double stores the Jobs."""

import json
from decimal import Decimal

import pytest

from scheduling.backends import DispatchRefused, PodSetSpec
from scheduling.backends.k8s import KubernetesBackend
from tests.integration.backends.k8s.specs import A100, NS, make_spec


def _backend(kube, sharing):
    return KubernetesBackend(name="bj", connection={**kube.connection, "timeout_s": 0.5,
                                                    "gpu_sharing": sharing})


def _quarter(*, nodes=("bj-a100-0", "bj-a100-0"), cards=(1, 1), slice_gib=None):
    return PodSetSpec(index=0, count=len(nodes), flavor="a100-80g", gpus=Decimal("0.250"),
                      cpu=Decimal("4"), memory_gib=Decimal("32"),
                      node_selector=dict(A100.node_selector), nodes=nodes,
                      gpu_memory_gib=slice_gib, card_memory_gib=Decimal("80"), cards=cards)


def _pod(kube):
    return kube.state.jobs[(NS, "allot-w7-0")]["spec"]["template"]


def test_hami_asks_cores_and_memory_and_pins_the_card_it_registers(kube):
    uuids = [{"id": "GPU-aaaa", "index": 0, "count": 10, "devmem": 81920, "type": "A100"},
             {"id": "GPU-bbbb", "index": 1, "count": 10, "devmem": 81920, "type": "A100"}]
    node = kube.state.nodes["bj-a100-0"]
    node["metadata"].setdefault("annotations", {})["hami.io/node-nvidia-register"] = \
        json.dumps(uuids)
    _backend(kube, "hami").create_workload(make_spec(pod_sets=(_quarter(),)))
    template = _pod(kube)
    assert template["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1", "nvidia.com/gpucores": "25", "nvidia.com/gpumem": "20480"}
    assert template["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == "GPU-bbbb"


def test_hami_without_a_single_card_or_known_memory_does_not_pin(kube):
    spec = make_spec(pod_sets=(PodSetSpec(
        index=0, count=2, flavor="a100-80g", gpus=Decimal("0.5"), cpu=Decimal("1"),
        memory_gib=Decimal("8"), node_selector=dict(A100.node_selector),
        nodes=("bj-a100-0", "bj-a100-1"), cards=(0, 0)),))
    _backend(kube, "hami").create_workload(spec)
    template = _pod(kube)
    assert template["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1", "nvidia.com/gpucores": "50",
        "nvidia.com/gpumem-percentage": "50"}
    assert "nvidia.com/use-gpuuuid" not in template["metadata"]["annotations"]


def test_kai_writes_the_gpu_fraction_annotation_or_the_memory_slice(kube):
    _backend(kube, "kai").create_workload(make_spec(pod_sets=(_quarter(),)))
    template = _pod(kube)
    assert template["metadata"]["annotations"]["gpu-fraction"] == "0.25"
    assert "nvidia.com/gpu" not in template["spec"]["containers"][0]["resources"]["limits"]
    _backend(kube, "kai").create_workload(
        make_spec(workload_id=8, pod_sets=(_quarter(slice_gib=Decimal("10")),)))
    sliced = kube.state.jobs[(NS, "allot-w8-0")]["spec"]["template"]
    assert sliced["metadata"]["annotations"]["gpu-memory"] == "10240"
    assert "gpu-fraction" not in sliced["metadata"]["annotations"]


def test_time_slicing_asks_one_replica_of_a_shared_card(kube):
    _backend(kube, "time-slicing").create_workload(make_spec(pod_sets=(_quarter(),)))
    template = _pod(kube)
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "gpu-fraction" not in template["metadata"]["annotations"]


def test_without_a_sharing_mechanism_a_fraction_asks_a_whole_card(kube):
    _backend(kube, "").create_workload(make_spec(pod_sets=(_quarter(),)))
    assert _pod(kube)["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1"}


def test_whole_cards_are_unchanged_by_the_sharing_mechanism(kube):
    _backend(kube, "hami").create_workload(make_spec())
    limits = _pod(kube)["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8"}


def test_an_unknown_sharing_mechanism_is_a_refusal_naming_it(kube):
    with pytest.raises(DispatchRefused) as info:
        _backend(kube, "mps").create_workload(make_spec(pod_sets=(_quarter(),)))
    assert "gpu_sharing 'mps'" in str(info.value) and "hami, kai, time-slicing" in str(info.value)
    assert (NS, "allot-w7-0") not in kube.state.jobs
