"""portal/monitoring.py: `/metrics` in Prometheus' text format, for the bearer token of
ALLOT_METRICS_TOKEN or a staff user; a real Prometheus scrapes it and evaluates the alert
rules of deploy/prometheus on what it scraped."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
import requests
from django.core.wsgi import get_wsgi_application
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from billing.models import LedgerVerification
from portal.monitoring import REGISTRY, exposition
from scheduling.pacing import cycle_mark
from scheduling.workers.cycle import cycle_run
from tests.factories import AdminFactory, UserFactory
from tests.integration.scheduling.world import make_world, submit

TOKEN = "allot-metrics-token-for-tests"
ROOT = Path(__file__).resolve().parents[3]


def scrape(client, token=None):
    extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    return client.get(reverse("metrics"), **extra)


def parsed(body: str) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def scenario() -> None:
    """Two workloads admitted in vision, a third pending there (its max), one not seen yet."""
    world = make_world(nodes_per_cluster=2)
    submit(world, "a", count=2)
    submit(world, "b")
    report = cycle_run(wait=True)
    cycle_mark(ended_at=timezone.now(), seconds=report.seconds)
    submit(world, "c")
    cycle_run(wait=True)
    submit(world, "d", user=world.carol, queue="rd/nlp")


@pytest.mark.django_db
def test_the_token_reads_the_metrics_after_a_scenario(client, settings):
    settings.ALLOT_METRICS_TOKEN = TOKEN
    scenario()
    response = scrape(client, TOKEN)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    found = parsed(response.content.decode())
    vision = frozenset({("queue", "rd/vision")})
    assert found[("allot_pending_workloads", vision | {("reason", "QUOTA_MAX")})] == 1
    assert found[("allot_pending_workloads",
                  frozenset({("queue", "rd/nlp"), ("reason", "QUEUED")}))] == 1
    assert found[("allot_admitted_active_workloads", vision)] == 2
    assert found[("allot_admitted_workloads_total", vision)] == 2
    gpu = frozenset({("flavor", "a100-80g"), ("resource", "gpu")})
    assert found[("allot_quota_reserved_resource", vision | gpu)] == 24
    assert found[("allot_nominal_quota", vision | gpu)] == 8
    assert found[("allot_cycle_duration_seconds_count", frozenset())] == 2
    assert found[("allot_ledger_entries_total", frozenset())] == 0


@pytest.mark.django_db
def test_without_the_token_nothing_is_read(client, settings):
    settings.ALLOT_METRICS_TOKEN = TOKEN
    for response in (scrape(client), scrape(client, "wrong"), scrape(client, "")):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="allot-metrics"'
        assert b"allot_" not in response.content
    assert scrape(client, "wrong").content.decode().startswith("bearer token refused: ")
    assert "ALLOT_METRICS_TOKEN" in scrape(client).content.decode()
    assert client.post(reverse("metrics"), HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code \
        == 405


@pytest.mark.django_db
def test_with_no_token_set_only_a_staff_user_reads_them(client, settings):
    settings.ALLOT_METRICS_TOKEN = ""
    response = scrape(client, "anything")
    assert response.status_code == 401
    assert "no ALLOT_METRICS_TOKEN is set" in response.content.decode()
    client.force_login(UserFactory(username="researcher"))
    refused = scrape(client)
    assert refused.status_code == 403
    assert refused.content.decode().startswith("researcher is not staff: ")
    client.force_login(AdminFactory(username="ops"))
    ok = scrape(client)
    assert ok.status_code == 200 and b"allot_pending_workloads" in ok.content


@pytest.mark.django_db
def test_the_exposition_is_the_text_prometheus_client_writes():
    scenario()
    odd = GaugeMetricFamily("allot_odd", 'help with a \\ and a\nnew line',
                            labels=["queue", "reason"])
    odd.add_metric(['a"b\\c\nd', "é"], 1e7)
    odd.add_metric(["x", "y"], float("inf"))
    families = [*REGISTRY.collect(), odd]

    class Fixed(Collector):
        def collect(self):
            return iter(families)

    registry = CollectorRegistry()
    registry.register(Fixed())
    assert exposition(families) == generate_latest(registry)


# --- a real Prometheus -----------------------------------------------------------------------

PORTS = range(8211, 8220)  # this module's loopback ports


def free_port(exclude=()) -> int:
    for port in PORTS:
        if port in exclude:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8211-8219")


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


@pytest.fixture
def prometheus(tmp_path, django_server, settings):
    settings.ALLOT_METRICS_TOKEN = TOKEN
    port = free_port(exclude={django_server})
    shutil.copy(ROOT / "deploy/prometheus/allot-alerts.yml", tmp_path / "allot-alerts.yml")
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 300ms
rule_files: [allot-alerts.yml]
scrape_configs:
  - job_name: allot
    scrape_interval: 300ms
    scrape_timeout: 250ms
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


def query(url: str, promql: str) -> list:
    body = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def until(check, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.3)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_the_metrics_and_evaluates_the_alert_rules(prometheus):
    scenario()
    LedgerVerification.objects.create(ran_at=timezone.now(), ok=False, problem="tampered")
    connection.close()  # the server thread reads with its own connection
    pending = until(lambda: query(prometheus, 'allot_pending_workloads{queue="rd/vision"}'))
    assert [(r["metric"]["reason"], r["value"][1]) for r in pending] == [("QUOTA_MAX", "1")]
    assert query(prometheus, 'up{job="allot"}')[0]["value"][1] == "1"
    reserved = query(prometheus, 'allot_quota_reserved_resource{queue="rd", resource="gpu"}')
    assert reserved[0]["value"][1] == "24"
    # The rules load, and the one without a waiting time fires on what was scraped.
    rules = requests.get(f"{prometheus}/api/v1/rules", timeout=5).json()["data"]["groups"]
    assert sorted(g["name"] for g in rules) == ["allot-billing", "allot-clusters",
                                                "allot-scheduling"]
    assert all(r["health"] != "err" for g in rules for r in g["rules"]), rules

    def firing():
        alerts = requests.get(f"{prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return [a["labels"]["alertname"] for a in alerts if a["state"] == "firing"]

    assert "AllotLedgerVerifyFailed" in until(firing)
