"""`/metrics`: Allot's figures in Prometheus' text format, for a Prometheus holding the bearer
token of ALLOT_METRICS_TOKEN (or a logged-in staff user): scheduling (scheduling/monitoring.py)
and billing (billing/monitoring.py), read from the database at each scrape, so any web process
answers the same and the workers' figures (cycles, admissions, preemptions) are there too.
docs/operations.md lists the metrics, the dashboard and the alert rules."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from billing.monitoring import billing_families
from core.bearer import bearer_refusal
from scheduling.monitoring import scheduling_families

NEEDS = ("Allot's metrics need the bearer token of ALLOT_METRICS_TOKEN "
         "(Authorization: Bearer ...) or a logged-in staff user")


class AllotCollector(Collector):
    """Every family, computed when a scrape asks (nothing is kept in the process)."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield from scheduling_families(now)
        yield from billing_families(now)


REGISTRY = CollectorRegistry()
REGISTRY.register(AllotCollector())


def metrics_text() -> bytes:
    """The exposition, as a scrape gets it."""
    return exposition(REGISTRY.collect())


def exposition(families: Iterable[Metric]) -> bytes:
    """Counter, gauge and histogram families in the text format 0.0.4: the bytes
    prometheus_client's `generate_latest` writes for them, without its check and escaping of
    every label name of every sample (our names need none), which is most of the time of a
    scrape with a thousand queues."""
    out: list[str] = []
    for family in families:
        name = f"{family.name}_total" if family.type == "counter" else family.name
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {family.type}\n")
        for sample in family.samples:
            value = floatToGoString(sample.value)
            if not sample.labels:
                out.append(f"{sample.name} {value}\n")
                continue
            labels = ",".join(f'{key}="{_escaped(text)}"'
                              for key, text in sorted(sample.labels.items()))
            out.append(f"{sample.name}{{{labels}}} {value}\n")
    return "".join(out).encode()


def _escaped(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """`/metrics` for Prometheus (docs/operations.md, Monitoring)."""
    refused = bearer_refusal(request, token=settings.ALLOT_METRICS_TOKEN,
                             setting="ALLOT_METRICS_TOKEN", needs=NEEDS, realm="allot-metrics")
    if refused is not None:
        return refused
    # The classic text format every Prometheus reads (its names need none of 1.0.0's escaping).
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
