"""A real Prometheus scrapes a simulated cluster's DCGM endpoint served by the real Django app;
PromQL then sees every GPU, with the pod labels billing joins on."""

import shutil
import socket
import subprocess
import threading
import time
from decimal import Decimal
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
import requests
from django.core.wsgi import get_wsgi_application

from scheduling.backends import PodSetSpec, WorkloadSpec
from scheduling.backends.naming import parse_pod_name
from scheduling.backends.simulated.backend import SimulatedBackend
from scheduling.backends.simulated.metrics import pod_gpu_util
from tests.factories import ClusterFactory, FlavorFactory, NodeFactory

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
]
PORTS = range(8201, 8210)  # this suite's loopback ports


def free_port(exclude=()):
    for port in PORTS:
        if port in exclude:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8201-8209")


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def django_server():
    port = free_port()
    server = make_server("127.0.0.1", port, get_wsgi_application(),
                         server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield port
    server.shutdown()
    server.server_close()


TOKEN = "sim-metrics-token-for-tests"


@pytest.fixture
def prometheus(tmp_path, django_server, settings):
    # The endpoint answers Prometheus's bearer token (as `make run` configures it).
    settings.ALLOT_SIM_METRICS_TOKEN = TOKEN
    port = free_port(exclude={django_server})
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: dcgm-sim-bj
    scrape_interval: 300ms
    scrape_timeout: 250ms
    metrics_path: /sim/sim-bj/metrics
    authorization: {{credentials: {TOKEN}}}
    static_configs:
      - targets: ["127.0.0.1:{django_server}"]
""")
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def query(url, promql):
    body = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_the_simulated_exporter(prometheus):
    cluster = ClusterFactory(name="sim-bj", backend="simulated", connection={"speedup": 1})
    flavor = FlavorFactory(name="a100-80g", gpu_memory_gib=80)
    NodeFactory(cluster=cluster, name="sim-bj-a100-80g-0", flavor=flavor, gpus=8)
    backend = SimulatedBackend(name="sim-bj")
    spec = WorkloadSpec(
        workload_id=41, name="bert", namespace="rd-nlp", queue_path="rd/nlp",
        pod_sets=(PodSetSpec(index=0, count=2, flavor="a100-80g", gpus=2, cpu=Decimal(8),
                             memory_gib=Decimal(64),
                             nodes=("sim-bj-a100-80g-0", "sim-bj-a100-80g-0")),),
        duration_s=None,
    )
    backend.start_workload(backend.create_workload(spec))

    deadline = time.monotonic() + 30
    held = {}
    while time.monotonic() < deadline:
        result = query(prometheus, "DCGM_FI_DEV_GPU_UTIL")
        # Prometheus drops empty labels: idle GPUs have no pod label at all.
        held = {r["metric"]["gpu"]: r for r in result if r["metric"].get("pod")}
        if len(result) == 8 and len(held) == 4:
            break
        time.sleep(0.3)
    assert len(result) == 8, result
    idle = [r["metric"] for r in result if not r["metric"].get("pod")]
    assert all("namespace" not in m and "container" not in m for m in idle)
    assert sorted(held) == ["0", "1", "2", "3"]
    for gpu, series in held.items():
        labels = series["metric"]
        pod = f"allot-w41-0-{int(gpu) // 2}"
        assert labels["pod"] == pod and labels["namespace"] == "rd-nlp"
        assert labels["container"] == "main"
        assert labels["Hostname"] == "sim-bj-a100-80g-0"
        assert labels["modelName"] == "NVIDIA A100-SXM4-80GB"
        assert parse_pod_name(labels["pod"]) == (41, 0)
        assert float(series["value"][1]) == pod_gpu_util(pod)
    # What billing asks: busy GPUs per workload from the profiling metric.
    busy = query(prometheus, 'sum by (namespace, pod) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!=""})')
    per_pod = {r["metric"]["pod"]: float(r["value"][1]) for r in busy}
    assert per_pod == {
        p: pytest.approx(2 * pod_gpu_util(p) / 100) for p in ("allot-w41-0-0", "allot-w41-0-1")
    }
