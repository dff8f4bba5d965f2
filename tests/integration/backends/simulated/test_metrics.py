"""scheduling.backends.simulated.metrics: the DCGM-format exporter, scraped and parsed back."""

import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from scheduling.backends.simulated.backend import SimulatedBackend
from scheduling.backends.simulated.metrics import gpu_uuid, pod_fb_used_mib, pod_gpu_util
from scheduling.backends.simulated.models import SimJob
from tests.integration.backends.simulated.helpers import NS, make_spec

pytestmark = pytest.mark.django_db

SAMPLE = re.compile(r'^(?P<name>[A-Z_]+)\{(?P<labels>.*)\} (?P<value>[0-9.]+)$')
LABEL = re.compile(r'(?P<key>[A-Za-z_]+)="(?P<value>(?:[^"\\]|\\.)*)"')
LABEL_ORDER = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "container",
               "namespace", "pod"]


def parse_exposition(text):
    """Prometheus text format -> {metric: [(labels dict, float)]}, checking HELP/TYPE."""
    metrics, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind == "gauge"
            typed.add(name)
            continue
        if line.startswith("# HELP ") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = LABEL.findall(match["labels"])
        assert [k for k, _ in labels] == LABEL_ORDER
        assert match["name"] in typed, f"{match['name']} sample before its TYPE"
        metrics.setdefault(match["name"], []).append((dict(labels), float(match["value"])))
    return metrics


TOKEN = "sim-metrics-token-for-tests"


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.ALLOT_SIM_METRICS_TOKEN = TOKEN


def scrape(client, name="sim-bj"):
    response = client.get(reverse("sim-dcgm-metrics", args=[name]),
                          HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse_exposition(response.content.decode())


def test_metrics_label_gpus_of_running_pods_and_leave_idle_ones_empty(cluster, client):
    backend = SimulatedBackend(name=cluster.name)
    # Two pods of 4 GPUs on node 0, one 2-GPU pod on node 1; one suspended workload.
    ref = backend.create_workload(make_spec(duration_s=None))
    backend.start_workload(ref)
    small = backend.create_workload(make_spec(
        workload_id=8, duration_s=None, pods=1, gpus=2, nodes=["sim-bj-a100-80g-1"]))
    backend.start_workload(small)
    backend.create_workload(make_spec(workload_id=9, duration_s=None, pods=1, gpus=8,
                                      nodes=["sim-bj-a100-80g-1"]))

    metrics = scrape(client)
    assert set(metrics) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                            "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    util = {(lab["Hostname"], lab["gpu"]): (lab, v) for lab, v in metrics["DCGM_FI_DEV_GPU_UTIL"]}
    assert len(util) == 16
    node0, node1 = "sim-bj-a100-80g-0", "sim-bj-a100-80g-1"
    for gpu in range(8):
        labels, value = util[(node0, str(gpu))]
        pod = f"allot-w7-0-{gpu // 4}"
        assert (labels["namespace"], labels["pod"], labels["container"]) == (NS, pod, "main")
        assert value == pod_gpu_util(pod)
        assert labels["modelName"] == "NVIDIA A100-SXM4-80GB"
        assert labels["UUID"] == gpu_uuid("sim-bj", node0, gpu)
        assert labels["device"] == f"nvidia{gpu}"
    for gpu in range(8):
        labels, value = util[(node1, str(gpu))]
        if gpu < 2:
            assert labels["pod"] == "allot-w8-0-0" and value == pod_gpu_util("allot-w8-0-0")
        else:  # idle: empty pod labels and zero figures (w9 is still suspended)
            assert (labels["namespace"], labels["pod"], labels["container"]) == ("", "", "")
            assert value == 0
    fb_used = {(lab["Hostname"], lab["gpu"]): v for lab, v in metrics["DCGM_FI_DEV_FB_USED"]}
    fb_free = {(lab["Hostname"], lab["gpu"]): v for lab, v in metrics["DCGM_FI_DEV_FB_FREE"]}
    assert fb_used[(node0, "5")] == pod_fb_used_mib("allot-w7-0-1", 80 * 1024)
    assert fb_used[(node0, "5")] + fb_free[(node0, "5")] == 80 * 1024
    assert fb_used[(node1, "7")] == 0 and fb_free[(node1, "7")] == 80 * 1024
    engine = {(lab["Hostname"], lab["gpu"]): v
              for lab, v in metrics["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]}
    assert engine[(node0, "0")] == pytest.approx(pod_gpu_util("allot-w7-0-0") / 100)
    assert engine[(node1, "3")] == 0


def test_suspended_pods_hold_gpus_through_the_grace_period(cluster, client):
    backend = SimulatedBackend(name=cluster.name)
    ref = backend.create_workload(make_spec(duration_s=None, pods=1, gpus=8))
    backend.start_workload(ref)
    backend.suspend_workload(ref, grace_s=30)  # 3 s of wall time at speedup 10
    held = [lab["pod"] for lab, _ in scrape(client)["DCGM_FI_DEV_GPU_UTIL"] if lab["pod"]]
    assert held == ["allot-w7-0-0"] * 8
    SimJob.objects.update(suspended_at=datetime.now(UTC) - timedelta(seconds=3.1))
    held = [lab["pod"] for lab, _ in scrape(client)["DCGM_FI_DEV_GPU_UTIL"] if lab["pod"]]
    assert held == []


def test_finished_pods_release_their_gpus(cluster, client):
    backend = SimulatedBackend(name=cluster.name)
    ref = backend.create_workload(make_spec(duration_s=60, pods=1, gpus=8))
    backend.start_workload(ref)
    assert any(lab["pod"] for lab, _ in scrape(client)["DCGM_FI_DEV_GPU_UTIL"])
    SimJob.objects.update(started_at=datetime.now(UTC) - timedelta(seconds=7))
    assert not any(lab["pod"] for lab, _ in scrape(client)["DCGM_FI_DEV_GPU_UTIL"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus) not installed")
def test_exposition_parses_with_prometheus_own_checker(cluster, client):
    backend = SimulatedBackend(name=cluster.name)
    backend.start_workload(backend.create_workload(make_spec(duration_s=None)))
    text = client.get(reverse("sim-dcgm-metrics", args=["sim-bj"]),
                      HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                             timeout=30, check=False)
    output = (checked.stdout + checked.stderr).decode()
    assert "parsing error" not in output
    # Only the lint dcgm-exporter's own output draws too: its camelCase labels (UUID, ...).
    problems = [line for line in output.splitlines() if line.strip()]
    assert all("camelCase" in line for line in problems), problems
