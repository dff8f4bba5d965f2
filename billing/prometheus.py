"""A small Prometheus HTTP API client and the DCGM queries metering runs against it.

Usage is read from node telemetry (dcgm-exporter on each GPU node, scraped by Prometheus), never
from what a container reports about itself. dcgm-exporter labels each GPU's series with the pod
and namespace using it; when Prometheus' own target labels already hold `pod`/`namespace` it
renames the exporter's as `exported_pod`/`exported_namespace`, which then win.

On a MIG GPU the exporter reports each MIG instance apart (`GPU_I_ID`, `GPU_I_PROFILE` such as
`1g.10gb`), its activity a share of that instance, not of the card: a slice is weighed by what
it is worth in cards (N/7 for an `Ng` profile), so a `1g` instance fully busy is 1/7 of a card
active, as its slice is billed 1/7 of a card reserved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import requests
from django.conf import settings

from billing.metering import HOUR, MINUTE_S, WorkloadTelemetry
from scheduling.backends.naming import PodOwners

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
_BY = "namespace, pod, exported_namespace, exported_pod, GPU_I_PROFILE"
_MIG_PROFILE = re.compile(r"^(\d+)g\.")


def instance_cards(labels: dict[str, str]) -> Decimal:
    """What one series' GPU is worth in cards: a MIG instance N/7 by its profile (`3g.40gb`:
    3/7), a whole GPU 1."""
    match = _MIG_PROFILE.match(labels.get("GPU_I_PROFILE", ""))
    return Decimal(int(match.group(1))) / 7 if match else Decimal(1)


class TelemetryUnavailable(Exception):
    """Prometheus could not answer (down, timeout, bad response)."""


@dataclass(frozen=True)
class Series:
    """One result series of a range query: its labels and (epoch seconds, value) samples."""

    labels: dict[str, str]
    values: list[tuple[int, Decimal]]


class PrometheusClient:
    """Queries one Prometheus server over its HTTP API."""

    def __init__(self, base_url: str, *, timeout_s: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = requests.Session()

    def query_range(
        self, query: str, *, start: datetime, end: datetime, step_s: int = MINUTE_S
    ) -> list[Series]:
        """`/api/v1/query_range` (POST form, so long queries fit), parsed to Decimal values."""
        try:
            response = self.session.post(
                f"{self.base_url}/api/v1/query_range",
                data={
                    "query": query, "start": f"{start.timestamp():.3f}",
                    "end": f"{end.timestamp():.3f}", "step": str(step_s),
                },
                timeout=self.timeout_s,
            )
        except requests.RequestException as exc:
            raise TelemetryUnavailable(f"Prometheus at {self.base_url}: {exc}") from exc
        try:
            body: dict[str, Any] = response.json()
        except ValueError as exc:
            raise TelemetryUnavailable(
                f"Prometheus at {self.base_url}: HTTP {response.status_code}, not JSON"
            ) from exc
        if body.get("status") != "success":
            raise TelemetryUnavailable(
                f"Prometheus at {self.base_url}: {body.get('errorType')}: {body.get('error')}"
            )
        out = []
        for item in body["data"]["result"]:
            values = []
            for ts, raw in item["values"]:
                try:
                    value = Decimal(raw)
                except InvalidOperation:
                    continue
                if value.is_nan() or value.is_infinite():
                    continue
                values.append((int(round(float(ts))), value))
            out.append(Series(labels=item["metric"], values=values))
        return out


def default_client() -> PrometheusClient | None:
    """The configured Prometheus (ALLOT_PROMETHEUS_URL), or None when there is none."""
    url = settings.ALLOT_PROMETHEUS_URL
    return PrometheusClient(url) if url else None


_NO_ADOPTED = PodOwners()


def _pod_of(labels: dict[str, str], owners: PodOwners = _NO_ADOPTED) -> tuple[int | None, str]:
    pod = labels.get("exported_pod") or labels.get("pod") or ""
    namespace = labels.get("exported_namespace") or labels.get("namespace") or ""
    return (owners.workload_of(namespace, pod) if pod else None), namespace


def _per_workload(series: list[Series], scale: Decimal = Decimal(1), *,
                  per_card: bool = True, owners: PodOwners = _NO_ADOPTED) -> dict[str, Any]:
    """Per workload, per step: the sum over its series (`per_card`: each weighed by what its GPU
    is worth in cards, for activity; not for memory); pods of adopted workloads found through
    `owners`."""
    out: dict[int, dict] = {}
    namespaces: dict[int, str] = {}
    for s in series:
        workload_id, namespace = _pod_of(s.labels, owners)
        if workload_id is None:
            continue
        namespaces[workload_id] = namespace
        steps = out.setdefault(workload_id, {})
        weight = scale * instance_cards(s.labels) if per_card else scale
        for ts, value in s.values:
            steps[ts] = steps.get(ts, Decimal(0)) + value * weight
    return {"steps": out, "namespaces": namespaces}


def fetch_hour(client: PrometheusClient, hour: datetime, owners: PodOwners = _NO_ADOPTED
               ) -> dict[int, WorkloadTelemetry]:
    """Per workload, per minute of [hour, hour + 1 h): active GPUs (sum over its GPUs) and MiB.

    A series is its workload's by its pod's name (`owners`: Allot's objects by their names,
    adopted ones by theirs).

    The step at t averages the samples of the minute ending at t, so the range runs from the
    end of the hour's first minute to the end of the hour.
    """
    start = hour + timedelta(seconds=MINUTE_S)
    end = hour + HOUR
    window = f"[{MINUTE_S}s]"

    def run(metric: str) -> list[Series]:
        query = f"sum by ({_BY}) (avg_over_time({metric}{window}))"
        return client.query_range(query, start=start, end=end)

    active = _per_workload(run(ENGINE_ACTIVE), owners=owners)
    util = _per_workload(run(GPU_UTIL), Decimal("0.01"), owners=owners)
    fb = _per_workload(run(FB_USED), per_card=False, owners=owners)
    out: dict[int, WorkloadTelemetry] = {}
    for source_name, source in ((ENGINE_ACTIVE, active), (GPU_UTIL, util)):
        for workload_id, steps in source["steps"].items():
            if workload_id in out:
                # Profiling metrics win where present; utilisation only where that is all.
                continue
            out[workload_id] = WorkloadTelemetry(
                active=steps, source=source_name,
                namespace=source["namespaces"].get(workload_id, ""),
            )
    for workload_id, steps in fb["steps"].items():
        if workload_id in out:
            out[workload_id].fb_mib = steps
    return out


def fetch_session_utilisation(client: PrometheusClient, workload_ids: set[int], at: datetime,
                              owners: PodOwners = _NO_ADOPTED) -> dict[int, Decimal]:
    """Per workload of `workload_ids`, its busiest GPU's utilisation (percent) over the minute
    ending at `at`, as dcgm-exporter reports it (scheduling/sessions.py culls idle sessions
    with it); a workload with no series is left out."""
    query = f"max by ({_BY}) (avg_over_time({GPU_UTIL}[{MINUTE_S}s]))"
    out: dict[int, Decimal] = {}
    for s in client.query_range(query, start=at, end=at):
        workload_id, _ = _pod_of(s.labels, owners)
        if workload_id is None or workload_id not in workload_ids or not s.values:
            continue
        value = s.values[-1][1]
        out[workload_id] = max(value, out.get(workload_id, Decimal(0)))
    return out
