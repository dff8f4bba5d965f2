"""The admission webhook's endpoint: `POST /k8s/admission/<cluster>/<token>/` with an
AdmissionReview (scheduling/admission.py). The API server sends no credentials of its own: the
cluster's `connection.webhook_token`, in the URL its MutatingWebhookConfiguration names, says
which cluster is calling."""

from __future__ import annotations

import hmac
import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from scheduling.admission import AdmissionError, admission_review
from scheduling.models import Cluster


@csrf_exempt
@require_POST
def admission_webhook(request: HttpRequest, cluster: str, token: str) -> JsonResponse:
    """Answer one AdmissionReview of the named cluster (403 on an unknown cluster or token)."""
    found = Cluster.objects.filter(name=cluster).first()
    expected = str(((found.connection or {}) if found else {}).get("webhook_token") or "")
    if found is None or not expected or not hmac.compare_digest(expected, token):
        return JsonResponse({"detail": "unknown cluster or webhook token"}, status=403)
    try:
        review = json.loads(request.body or b"null")
        return JsonResponse(admission_review(cluster=found, review=review))
    except (ValueError, AdmissionError) as exc:
        return JsonResponse({"detail": str(exc)}, status=400)
