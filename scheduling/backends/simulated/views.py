"""The simulated clusters' DCGM exporter endpoint: read by Prometheus with the bearer token of
ALLOT_SIM_METRICS_TOKEN, or by a logged-in staff user; nobody else (it names every running
pod, its namespace and its node)."""

import hmac

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from scheduling.backends.simulated.metrics import gpu_samples, render_metrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NEEDS = ("the simulated DCGM metrics need the bearer token of ALLOT_SIM_METRICS_TOKEN "
         "(Authorization: Bearer ...) or a logged-in staff user")


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics; otherwise the answer saying why not."""
    token = settings.ALLOT_SIM_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        if token and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        reason = ("bearer token refused: " if token else
                  "no ALLOT_SIM_METRICS_TOKEN is set, so no bearer token is accepted: ")
        return _unauthorized(reason + NEEDS)
    user = request.user
    if user.is_authenticated and user.is_staff:
        return None
    if user.is_authenticated:
        return HttpResponse(f"{user.get_username()} is not staff: {NEEDS}\n", status=403,
                            content_type="text/plain; charset=utf-8")
    return _unauthorized(NEEDS)


def _unauthorized(message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=401, content_type="text/plain; charset=utf-8")
    response["WWW-Authenticate"] = 'Bearer realm="allot-sim-metrics"'
    return response


@require_GET
def dcgm_metrics(request: HttpRequest, cluster: str) -> HttpResponse:
    """`/sim/<cluster>/metrics`: every GPU of a simulated cluster in dcgm-exporter's format."""
    from scheduling.models import BackendKind, Cluster

    refused = _refusal(request)
    if refused is not None:
        return refused
    found = Cluster.objects.filter(name=cluster, backend=BackendKind.SIMULATED).first()
    if found is None:
        raise Http404(f"no simulated cluster named {cluster!r}")
    return HttpResponse(
        render_metrics(gpu_samples(found, timezone.now())), content_type=CONTENT_TYPE
    )
