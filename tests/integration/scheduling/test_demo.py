"""The demo (scheduling/demo.py, run by seed_demo): a PyTorchJob, a RayJob and a
LeaderWorkerSet are queued next to the plain Jobs, none rejected."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from scheduling.models import Workload

pytestmark = pytest.mark.django_db


def test_demo_queues_manifests_next_to_plain_jobs():
    out = StringIO()
    call_command("seed_demo", stdout=out)
    kinds = dict(Workload.objects.exclude(kind="").values_list("name", "kind"))
    assert kinds == {"llama-ddp": "kubeflow.org/v1/PyTorchJob",
                     "ray-tune-grasp": "ray.io/v1/RayJob",
                     "vllm-serving": "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"}
    assert not Workload.objects.filter(state="rejected").exists()
    assert Workload.objects.filter(kind="").count() >= 10
    assert "a PyTorchJob, a RayJob, a LeaderWorkerSet" in out.getvalue()
    notebook = Workload.objects.get(name="jupyter-grasp")
    assert notebook.interactive and notebook.queue.idle_timeout_s == 900
    assert notebook.state != "rejected"
    ray = Workload.objects.get(name="ray-tune-grasp")
    assert [(p.count, p.gpus) for p in ray.pod_sets.order_by("index")] == [(1, 0), (2, 2), (1, 0)]
