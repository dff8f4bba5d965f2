"""A real Prometheus on a loopback port, scraping a DCGM-format exporter served by the test.

The exporter replays one past hour minute by minute: each scrape serves the next minute's
samples with explicit timestamps (Prometheus accepts them through an out-of-order window), so
an hour of telemetry lands in a few seconds.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

PROMETHEUS_PORTS = range(9091, 9100)
EXPORTER_PORTS = range(8501, 8510)
REPO = Path(__file__).resolve().parents[3]


def free_port(ports: range) -> int:
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")


def prometheus_binary() -> str:
    """The prometheus binary, installed through scripts/ensure_system_packages.sh if missing."""
    found = shutil.which("prometheus")
    if found is None:
        subprocess.run(["bash", str(REPO / "scripts/ensure_system_packages.sh")], check=True)
        found = shutil.which("prometheus")
    if found is None:
        raise RuntimeError("prometheus is not installed (Debian package `prometheus`)")
    return found


class ReplayExporter:
    """Serves `/metrics/<name>`: scrape k of a path returns that path's k-th minute of samples.

    `minutes[name]` is a list (one item per scrape) of lists of
    (metric, labels dict, value, timestamp seconds), or of exposition texts.
    """

    def __init__(self, minutes: dict[str, list]):
        self.minutes = minutes
        self.served = {name: 0 for name in minutes}
        self.lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                name = self.path.rsplit("/", 1)[-1]
                with exporter.lock:
                    k = exporter.served.get(name, 0)
                    batches = exporter.minutes.get(name, [])
                    batch = batches[k] if k < len(batches) else []
                    if k < len(batches):
                        exporter.served[name] = k + 1
                if isinstance(batch, str):  # an exporter's own text, already timestamped
                    self._send(batch.encode())
                    return
                lines = []
                for metric in sorted({m for m, *_ in batch}):
                    lines.append(f"# TYPE {metric} gauge")
                    for m, labels, value, ts in batch:
                        if m == metric:
                            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                            lines.append(f"{m}{{{text}}} {value} {int(ts * 1000)}")
                self._send(("\n".join(lines) + "\n").encode())

            def _send(self, body):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.port = free_port(EXPORTER_PORTS)
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def done(self) -> bool:
        with self.lock:
            return all(self.served[n] >= len(b) for n, b in self.minutes.items())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PrometheusProcess:
    """A Prometheus server scraping the exporter's paths every 200 ms."""

    def __init__(self, tmp: Path, exporter: ReplayExporter, target_labels: dict[str, dict]):
        self.port = free_port(PROMETHEUS_PORTS)
        jobs = []
        for name in exporter.minutes:
            labels = target_labels.get(name, {})
            label_text = "".join(f"\n          {k}: {v}" for k, v in labels.items())
            jobs.append(
                f"""  - job_name: dcgm-{name}
    scrape_interval: 200ms
    scrape_timeout: 150ms
    metrics_path: /metrics/{name}
    static_configs:
      - targets: ["127.0.0.1:{exporter.port}"]"""
                + (f"\n        labels:{label_text}" if labels else "")
            )
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\nstorage:\n  tsdb:\n"
            "    out_of_order_time_window: 3h\nscrape_configs:\n" + "\n".join(jobs) + "\n"
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / "prometheus.log", "wb")  # closed in stop()
        self.proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={config}",
             f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def with_timestamp(text: str, at: float) -> str:
    """Exposition text with every sample stamped `at` (seconds), as a replayed scrape."""
    ms = int(at * 1000)
    return "\n".join(
        line if not line or line.startswith("#") else f"{line} {ms}" for line in text.split("\n")
    )
