"""scheduling.backends.simulated.views: the DCGM endpoint serves simulated clusters only, to
Prometheus with the bearer token of ALLOT_SIM_METRICS_TOKEN or to a logged-in staff user."""

import pytest
from django.urls import reverse

from tests.factories import AdminFactory, ClusterFactory, UserFactory

pytestmark = pytest.mark.django_db

TOKEN = "sim-metrics-token-for-tests"


def get(client, name="sim-bj", token=None):
    extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    return client.get(reverse("sim-dcgm-metrics", args=[name]), **extra)


def test_metrics_of_unknown_or_kubernetes_clusters_are_404(client, cluster, settings):
    settings.ALLOT_SIM_METRICS_TOKEN = TOKEN
    ClusterFactory(name="k8s-bj", backend="kubernetes")
    assert get(client, "k8s-bj", TOKEN).status_code == 404
    assert get(client, "nope", TOKEN).status_code == 404


def test_the_bearer_token_reads_the_metrics_and_nothing_else_does_anonymously(
        client, cluster, settings):
    settings.ALLOT_SIM_METRICS_TOKEN = TOKEN
    ok = get(client, token=TOKEN)
    assert ok.status_code == 200 and b"DCGM_FI_DEV_GPU_UTIL" in ok.content
    for response in (get(client), get(client, token="wrong"), get(client, "nope")):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="allot-sim-metrics"'
        assert b"DCGM_FI_" not in response.content
    assert get(client, token="wrong").content.decode().startswith("bearer token refused: ")
    assert "ALLOT_SIM_METRICS_TOKEN" in get(client).content.decode()


def test_without_a_token_set_no_bearer_is_accepted(client, cluster, settings):
    settings.ALLOT_SIM_METRICS_TOKEN = ""
    for token in ("", "anything"):
        response = get(client, token=token)
        assert response.status_code == 401
        assert "no ALLOT_SIM_METRICS_TOKEN is set" in response.content.decode()


def test_a_staff_user_reads_the_metrics_and_another_user_is_refused(client, cluster, settings):
    settings.ALLOT_SIM_METRICS_TOKEN = ""
    client.force_login(UserFactory(username="researcher"))
    refused = get(client)
    assert refused.status_code == 403
    assert refused.content.decode().startswith("researcher is not staff: ")
    client.force_login(AdminFactory(username="ops"))
    assert get(client).status_code == 200
