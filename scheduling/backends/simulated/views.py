"""The simulated clusters' DCGM exporter endpoint (Prometheus scrapes it without a login)."""

from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from scheduling.backends.simulated.metrics import gpu_samples, render_metrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@require_GET
def dcgm_metrics(request: HttpRequest, cluster: str) -> HttpResponse:
    """`/sim/<cluster>/metrics`: every GPU of a simulated cluster in dcgm-exporter's format."""
    from scheduling.models import BackendKind, Cluster

    found = Cluster.objects.filter(name=cluster, backend=BackendKind.SIMULATED).first()
    if found is None:
        raise Http404(f"no simulated cluster named {cluster!r}")
    return HttpResponse(
        render_metrics(gpu_samples(found, timezone.now())), content_type=CONTENT_TYPE
    )
