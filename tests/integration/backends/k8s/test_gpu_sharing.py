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


def test_hami_pins_a_pod_set_spread_over_cards_to_that_list_of_cards(kube):
    """Four quarter pods on cards 1 and 0 of one node and card 1 of another: the pods (one
    template) may use exactly those three cards, listed in node and card order."""
    for node, prefix in (("bj-a100-0", "GPU-a"), ("bj-a100-1", "GPU-b")):
        cards = [{"id": f"{prefix}{i}", "index": i, "count": 10, "devmem": 81920,
                  "type": "A100"} for i in range(2)]
        kube.state.nodes[node]["metadata"].setdefault("annotations", {})[
            "hami.io/node-nvidia-register"] = json.dumps(cards)
    spread = _quarter(nodes=("bj-a100-0", "bj-a100-0", "bj-a100-0", "bj-a100-1"),
                      cards=(1, 1, 0, 1))
    _backend(kube, "hami").create_workload(make_spec(pod_sets=(spread,)))
    assert _pod(kube)["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == (
        "GPU-a0,GPU-a1,GPU-b1")
    # A card the node does not register (index 5): no pinning rather than a wrong one.
    unknown = _quarter(nodes=("bj-a100-0", "bj-a100-1"), cards=(0, 5))
    _backend(kube, "hami").create_workload(make_spec(workload_id=8, pod_sets=(unknown,)))
    annotations = kube.state.jobs[(NS, "allot-w8-0")]["spec"]["template"]["metadata"][
        "annotations"]
    assert "nvidia.com/use-gpuuuid" not in annotations


def test_kai_pods_name_the_kai_scheduler_and_its_queue(kube):
    """Every pod of a KAI cluster (fractions and whole cards) goes to the KAI Scheduler
    (`schedulerName: kai-scheduler`) in the queue the connection names (`kai.scheduler/queue`
    on the Job and its pods; `default-queue` when unset)."""
    _backend(kube, "kai").create_workload(make_spec(pod_sets=(_quarter(),)))
    job = kube.state.jobs[(NS, "allot-w7-0")]
    assert job["spec"]["template"]["spec"]["schedulerName"] == "kai-scheduler"
    assert job["metadata"]["labels"]["kai.scheduler/queue"] == "default-queue"
    assert job["spec"]["template"]["metadata"]["labels"]["kai.scheduler/queue"] == (
        "default-queue")
    backend = KubernetesBackend(name="bj", connection={
        **kube.connection, "timeout_s": 0.5, "gpu_sharing": "kai", "kai_queue": "research"})
    backend.create_workload(make_spec(workload_id=8))  # whole cards
    whole = kube.state.jobs[(NS, "allot-w8-0")]["spec"]["template"]
    assert whole["spec"]["schedulerName"] == "kai-scheduler"
    assert whole["metadata"]["labels"]["kai.scheduler/queue"] == "research"
    # Other mechanisms leave the default scheduler.
    _backend(kube, "hami").create_workload(make_spec(workload_id=9))
    other = kube.state.jobs[(NS, "allot-w9-0")]["spec"]["template"]
    assert "schedulerName" not in other["spec"]
    assert "kai.scheduler/queue" not in other["metadata"]["labels"]


def test_a_kai_queue_that_is_no_label_value_is_a_refusal_naming_it(kube):
    backend = KubernetesBackend(name="bj", connection={
        **kube.connection, "timeout_s": 0.5, "gpu_sharing": "kai", "kai_queue": "team a/"})
    with pytest.raises(DispatchRefused) as info:
        backend.create_workload(make_spec(pod_sets=(_quarter(),)))
    assert "kai_queue 'team a/' is not a label value" in str(info.value)
    assert (NS, "allot-w7-0") not in kube.state.jobs


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


def _register(kube, cards_by_node):
    for node, prefix in cards_by_node.items():
        cards = [{"id": f"{prefix}{i}", "index": i, "count": 10, "devmem": 81920,
                  "type": "A100"} for i in range(2)]
        kube.state.nodes[node]["metadata"].setdefault("annotations", {})[
            "hami.io/node-nvidia-register"] = json.dumps(cards)


def _pin_webhook(kube):
    """Allot's admission webhook for pods, registered as the docs say (pods labelled
    `allot.io/pin-cards`), so the double's API server calls it on each new pod."""
    from scheduling.admission import admission_review

    kube.state.pod_webhooks.append(
        ("allot.io/pin-cards", lambda review: admission_review(cluster=None, review=review)))


def test_hami_pins_each_pod_of_a_spread_pod_set_to_its_own_card(kube):
    """Four quarter pods on cards a1, a1, a0 and b1: the template keeps the list of the three
    cards and the card of each pod index (`allot.io/gpu-cards`); the webhook gives pod `i`
    (the Job's completion index) `nvidia.com/use-gpuuuid` = its own card only."""
    _register(kube, {"bj-a100-0": "GPU-a", "bj-a100-1": "GPU-b"})
    _pin_webhook(kube)
    spread = _quarter(nodes=("bj-a100-0", "bj-a100-0", "bj-a100-0", "bj-a100-1"),
                      cards=(1, 1, 0, 1))
    backend = _backend(kube, "hami")
    ref = backend.create_workload(make_spec(pod_sets=(spread,)))
    template = _pod(kube)
    assert template["metadata"]["annotations"]["allot.io/gpu-cards"] == (
        "GPU-a1,GPU-a1,GPU-a0,GPU-b1")
    assert template["metadata"]["labels"]["allot.io/pin-cards"] == "true"
    backend.start_workload(ref)
    pods = [p for p in kube.state.pods.values()
            if p["metadata"]["labels"].get("allot.io/workload-id") == "7"]
    pins = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]:
            p["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] for p in pods}
    assert pins == {"0": "GPU-a1", "1": "GPU-a1", "2": "GPU-a0", "3": "GPU-b1"}


def test_hami_pods_of_one_card_need_no_per_pod_pin(kube):
    """Both pods on one card: the template's pin is already each pod's; no list, no label."""
    _register(kube, {"bj-a100-0": "GPU-a"})
    _backend(kube, "hami").create_workload(make_spec(pod_sets=(_quarter(),)))
    template = _pod(kube)
    assert template["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == "GPU-a1"
    assert "allot.io/gpu-cards" not in template["metadata"]["annotations"]
    assert "allot.io/pin-cards" not in template["metadata"]["labels"]


MANIFEST_KINDS = ["Deployment", "JAXJob", "Job", "JobSet", "LeaderWorkerSet", "MPIJob",
                  "PaddleJob", "PyTorchJob", "RayCluster", "RayJob", "StatefulSet", "TFJob",
                  "VolcanoJob", "XGBoostJob"]


def _fractional_kind_spec(name):
    """A manifest workload whose GPU pod sets ask half a card each (as Allot dispatches a
    fraction), spread over both nodes, card 0."""
    from dataclasses import replace

    from tests.integration.backends.k8s.test_kinds import kind_spec

    kind, spec = kind_spec(name)
    sets = tuple(replace(p, gpus=Decimal("0.5") if p.gpus else p.gpus,
                         cards=tuple(0 for _ in p.nodes) if p.gpus else ())
                 for p in spec.pod_sets)
    return kind, replace(spec, pod_sets=sets)


def _kind_pods(kube):
    return [p for p in kube.state.pods.values()
            if p["metadata"]["labels"].get("allot.io/workload-id") == "7"
            and p["status"]["phase"] in ("Pending", "Running")]


@pytest.mark.parametrize("name", MANIFEST_KINDS)
def test_kai_fields_on_every_pod_template_of_every_manifest_kind(kube, name):
    """On a KAI cluster every pod of a manifest kind goes to the KAI Scheduler in the
    connection's queue (also labelled on the object), and a fraction is KAI's `gpu-fraction`
    annotation with no `nvidia.com/gpu` limit, as for a plain Job."""
    from tests.integration.backends.k8s.test_kinds import stored

    kind, spec = _fractional_kind_spec(name)
    backend = KubernetesBackend(name="bj", connection={
        **kube.connection, "timeout_s": 10, "gpu_sharing": "kai", "kai_queue": "research"})
    ref = backend.create_workload(spec)
    obj = kube.state.jobs[(NS, "allot-w7-0")] if name == "Job" else stored(kube, kind)
    assert obj["metadata"]["labels"]["kai.scheduler/queue"] == "research"
    backend.start_workload(ref)
    pods = _kind_pods(kube)
    assert len(pods) == sum(p.count for p in spec.pod_sets)
    gpu_sets = {str(p.index) for p in spec.pod_sets if p.gpus}  # XGBoostJob's: none
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "research"
        fractional = pod["metadata"]["labels"]["allot.io/pod-set"] in gpu_sets
        assert (pod["metadata"]["annotations"].get("gpu-fraction") == "0.5") == fractional
        for container in pod["spec"]["containers"]:
            for part in ("limits", "requests"):
                assert "nvidia.com/gpu" not in (container.get("resources") or {}).get(
                    part, {}) or not fractional


@pytest.mark.parametrize("name", MANIFEST_KINDS)
def test_hami_resources_on_every_pod_template_of_every_manifest_kind(kube, name):
    """On a HAMi cluster a fraction of a manifest kind's pod is one `nvidia.com/gpu` with
    HAMi's cores and memory (half of an 80 GB card: 40960 MiB) in the GPU container, and
    its pods stay with the default scheduler."""
    kind, spec = _fractional_kind_spec(name)
    from dataclasses import replace

    backend = KubernetesBackend(name="bj", connection={
        **kube.connection, "timeout_s": 10, "gpu_sharing": "hami"})
    spec = replace(spec, pod_sets=tuple(replace(p, card_memory_gib=Decimal("80"))
                                        for p in spec.pod_sets))
    backend.start_workload(backend.create_workload(spec))
    gpu_sets = {str(p.index) for p in spec.pod_sets if p.gpus}
    for pod in _kind_pods(kube):
        assert "schedulerName" not in pod["spec"]
        if pod["metadata"]["labels"]["allot.io/pod-set"] not in gpu_sets:
            continue
        limits = [c["resources"]["limits"] for c in pod["spec"]["containers"]
                  if "nvidia.com/gpucores" in (c.get("resources") or {}).get("limits", {})]
        assert limits == [{**limits[0], "nvidia.com/gpu": "1", "nvidia.com/gpucores": "50",
                           "nvidia.com/gpumem": "40960"}]
