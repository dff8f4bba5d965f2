"""The request page's "from a manifest" tab (scheduling/manifest_views.py): paste or upload
YAML, the derived pod sets and the live feasibility before submitting, errors naming the kind
and the path, the submission as the API's."""

from __future__ import annotations

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile

from scheduling.models import Workload
from tests.manifests import manifest

pytestmark = pytest.mark.django_db


def _post(client, url, **extra):
    data = {"queue": "rd/vision", "priority_class": "training", "preemptible": "on",
            "checkpoint": "on", **extra}
    return client.post(url, data)


def test_the_tab_shows_derived_pod_sets_and_feasibility(world, client):
    client.force_login(world.alice)
    page = client.get("/workloads/new/manifest/").content.decode()
    assert "From a manifest" in page and 'aria-current="page"' in page
    assert "From a manifest" in client.get("/workloads/new/").content.decode()
    text = yaml.safe_dump(manifest("PyTorchJob"))
    resp = _post(client, "/workloads/new/manifest/check/", manifest_text=text)
    body = resp.content.decode()
    assert resp.status_code == 200
    assert "Pod sets of this kubeflow.org/v1/PyTorchJob" in body
    assert "<td title=\"spec.pytorchReplicaSpecs.Worker.template\">Worker</td>" in body
    assert "16 GPUs" in body  # 4 pods of 4 GPUs
    assert "Can it ever fit?" in body and "Estimated start" in body


def test_upload_and_submit(world, client):
    client.force_login(world.alice)
    upload = SimpleUploadedFile("job.yaml", yaml.safe_dump(manifest("Job")).encode())
    resp = client.post("/workloads/new/manifest/", {
        "queue": "rd/vision", "priority_class": "training", "preemptible": "on",
        "manifest_file": upload, "duration_h": "2"})
    assert resp.status_code == 302, resp.content.decode()[-2000:]
    w = Workload.objects.get(name="sweep")
    assert w.kind == "batch/v1/Job" and w.duration_hint_s == 7200
    assert [(p.count, p.gpus) for p in w.pod_sets.all()] == [(4, 1)]


def test_bad_yaml_and_bad_manifest_are_named(world, client):
    client.force_login(world.alice)
    body = _post(client, "/workloads/new/manifest/check/",
                 manifest_text="kind: [unclosed").content.decode()
    assert "not YAML (line 1" in body
    obj = manifest("RayJob")
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "two"
    resp = _post(client, "/workloads/new/manifest/", manifest_text=yaml.safe_dump(obj))
    assert resp.status_code == 400
    body = resp.content.decode()
    assert "manifest.spec.rayClusterSpec.workerGroupSpecs[0].replicas" in body
    assert "RayJob: &#x27;two&#x27; is not a whole number" in body
    assert not Workload.objects.exists()
