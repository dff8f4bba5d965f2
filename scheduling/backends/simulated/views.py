"""The simulated clusters' DCGM exporter endpoint: read by Prometheus with the bearer token of
ALLOT_SIM_METRICS_TOKEN, or by a logged-in staff user; nobody else (it names every running
pod, its namespace and its node)."""

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from core.bearer import bearer_refusal
from scheduling.backends.simulated.metrics import gpu_samples, render_metrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NEEDS = ("the simulated DCGM metrics need the bearer token of ALLOT_SIM_METRICS_TOKEN "
         "(Authorization: Bearer ...) or a logged-in staff user")


@require_GET
def dcgm_metrics(request: HttpRequest, cluster: str) -> HttpResponse:
    """`/sim/<cluster>/metrics`: every GPU of a simulated cluster in dcgm-exporter's format."""
    from scheduling.models import BackendKind, Cluster

    refused = bearer_refusal(request, token=settings.ALLOT_SIM_METRICS_TOKEN,
                             setting="ALLOT_SIM_METRICS_TOKEN", needs=NEEDS,
                             realm="allot-sim-metrics")
    if refused is not None:
        return refused
    found = Cluster.objects.filter(name=cluster, backend=BackendKind.SIMULATED).first()
    if found is None:
        raise Http404(f"no simulated cluster named {cluster!r}")
    return HttpResponse(
        render_metrics(gpu_samples(found, timezone.now())), content_type=CONTENT_TYPE
    )
