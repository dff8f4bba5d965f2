"""An interactive session on a Kubernetes cluster (the API double): its pods' DCGM series
(Prometheus, joined by the real pod names) found idle, the session warned, stopped, and its
Job deleted from the cluster."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import tasks as billing_tasks
from billing.prometheus import PrometheusClient, Series
from scheduling.fleet import dispatch
from scheduling.fleet import sync as fleet_sync
from scheduling.fleet.delivery import outbox_deliver
from scheduling.models import EndReason, EventCode, Workload, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import request, world_on_kube
from tests.k8s_double import KubeDouble

pytestmark = pytest.mark.django_db


class PodsPrometheus(PrometheusClient):
    """Answers the utilisation query with one series per pod of the double: `util` percent."""

    def __init__(self, kube, util):
        super().__init__("http://prometheus.invalid")
        self.kube, self.util = kube, util

    def query_range(self, query, *, start, end, step_s=60):
        ts = int(end.timestamp())
        return [Series({"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x",
                        "exported_namespace": ns, "exported_pod": name},
                       [(ts, Decimal(self.util))])
                for (ns, name) in self.kube.state.pods]


@pytest.fixture
def kube():
    with KubeDouble() as double:
        yield double


@pytest.fixture
def world(kube):
    with world_on_kube(kube) as world:
        world.vision.idle_timeout_s = 1800
        world.vision.save()
        yield world


def test_an_idle_notebook_is_stopped_and_its_job_deleted(world, kube, monkeypatch):
    body = request("lab", gpus=2, interactive=True,
                   image="quay.io/jupyter/pytorch-notebook:2024-10-07",
                   command=["start-notebook.py"])
    body.pop("duration_hint_s")
    w = workload_submit(user=world.alice, data=body, nudge=False)
    assert cycle_run(wait=True).admitted == [w.pk]
    assert dispatch.cluster_dispatch(cluster_id=world.bj.pk).started == [w.pk]
    job = f"allot-w{w.pk}-0"
    kube.state.set_pod_phases("rd-vision", job, "Running")
    assert fleet_sync.cluster_sync(cluster_id=world.bj.pk).running == [w.pk]
    assert [name for (_, name) in kube.state.pods][0].startswith(f"{job}-")

    prometheus = PodsPrometheus(kube, util=55)
    monkeypatch.setattr(billing_tasks, "default_client", lambda: prometheus)
    assert billing_tasks.cull_idle_sessions()["read"] == 1
    w.refresh_from_db()
    assert w.idle_since is None  # in use

    prometheus.util = 1
    billing_tasks.cull_idle_sessions()
    w.refresh_from_db()
    assert w.idle_since is not None
    # Half an hour later (its idle start moved back): warned, then stopped.
    Workload.objects.filter(pk=w.pk).update(idle_since=timezone.now() - timedelta(seconds=1700))
    assert billing_tasks.cull_idle_sessions()["warned"] == [w.pk]
    Workload.objects.filter(pk=w.pk).update(idle_since=timezone.now() - timedelta(seconds=1800))
    assert billing_tasks.cull_idle_sessions()["stopped"] == [w.pk]
    w.refresh_from_db()
    assert w.state == WorkloadState.CANCELLED
    assert w.admissions.get().end_reason == EndReason.IDLE
    assert list(w.events.filter(code__startswith="IDLE").values_list("code", flat=True)) == [
        EventCode.IDLE_WARNING, EventCode.IDLE_STOPPED]

    outbox_deliver()
    assert ("rd-vision", job) not in kube.state.jobs
