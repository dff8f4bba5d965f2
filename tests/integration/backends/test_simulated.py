"""The simulated backend: clusters from the database, pods computed from the clock, refusals,
failures, events, and the DCGM-format exporter parsed back."""

import re
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from scheduling.backends import (
    ClusterEventType,
    DispatchRefused,
    PodSetSpec,
    PriorityClassSpec,
    RefusalReason,
    RunPhase,
    WorkloadRef,
    WorkloadSpec,
    clear_backend_cache,
    get_backend,
)
from scheduling.backends.simulated.backend import SimulatedBackend
from scheduling.backends.simulated.metrics import gpu_uuid, pod_fb_used_mib, pod_gpu_util
from scheduling.backends.simulated.models import SimControl, SimEvent, SimJob
from scheduling.backends.simulated.services import SimClusterError, sim_control_set
from tests.factories import ClusterFactory, FlavorFactory, NodeFactory

pytestmark = pytest.mark.django_db

NS = "rd-vision"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, start=T0):
        self.now = start

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def cluster():
    cluster = ClusterFactory(name="sim-bj", backend="simulated", connection={"speedup": 10})
    flavor = FlavorFactory(name="a100-80g", gpu_memory_gib=80)
    NodeFactory(cluster=cluster, name="sim-bj-a100-80g-0", flavor=flavor, gpus=8, rack="r1")
    NodeFactory(cluster=cluster, name="sim-bj-a100-80g-1", flavor=flavor, gpus=8, rack="r2")
    return cluster


@pytest.fixture
def backend(cluster, clock):
    return SimulatedBackend(name=cluster.name, clock=clock)


def set_connection(cluster, **values):
    cluster.connection = {**cluster.connection, **values}
    cluster.save(update_fields=["connection"])


def make_spec(workload_id=7, *, duration_s=600.0, pods=2, gpus=4, nodes=None, pod_sets=None):
    pod_sets = pod_sets or (
        PodSetSpec(index=0, count=pods, flavor="a100-80g", gpus=gpus, cpu=Decimal(16),
                   memory_gib=Decimal(128),
                   nodes=tuple(nodes or ["sim-bj-a100-80g-0"] * pods)),
    )
    return WorkloadSpec(
        workload_id=workload_id, name="resnet", namespace=NS, queue_path="rd/vision",
        pod_sets=tuple(pod_sets), priority_class="training", termination_grace_s=30,
        duration_s=duration_s,
    )


# ------------------------------------------------------------------ inventory


def test_nodes_are_the_clusters_node_rows(backend):
    nodes = backend.list_nodes()
    assert [(n.name, n.flavor, n.gpus, n.rack, n.ready) for n in nodes] == [
        ("sim-bj-a100-80g-0", "a100-80g", 8, "r1", True),
        ("sim-bj-a100-80g-1", "a100-80g", 8, "r2", True),
    ]
    assert nodes[0].memory_gib == Decimal("512.000")


def test_get_backend_picks_the_simulated_backend_and_state_is_in_the_database(cluster, clock):
    clear_backend_cache()
    backend = get_backend(cluster)
    assert isinstance(backend, SimulatedBackend)
    ref = backend.create_workload(make_spec())
    # Another process (another backend object) sees the same cluster.
    other = SimulatedBackend(name=cluster.name, clock=clock)
    assert other.workload_status(ref).phase is RunPhase.SUSPENDED
    clear_backend_cache()


# ------------------------------------------------------------------ lifecycle


def test_pods_pend_run_and_succeed_on_the_sped_up_clock(cluster, backend, clock):
    set_connection(cluster, start_delay_s=20)  # simulated seconds; speedup 10 -> 2 s wall
    ref = backend.create_workload(make_spec(duration_s=600))
    job = SimJob.objects.get(name="allot-w7-0")
    assert (job.pods, job.gpus_per_pod, job.nodes) == (2, 4, ["sim-bj-a100-80g-0"] * 2)
    assert job.suspended and job.speedup == 10 and job.duration_s == 600
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED

    backend.start_workload(ref)
    assert backend.workload_status(ref).pod_sets[0].pending == 2
    clock.advance(1.9)
    assert backend.workload_status(ref).phase is RunPhase.PENDING
    clock.advance(0.2)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.RUNNING and status.pod_sets[0].running == 2
    clock.advance(59.8)  # 2 + 59.8 s wall = 20 + 598 simulated
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    clock.advance(0.3)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.SUCCEEDED
    assert status.totals() == {"pending": 0, "running": 0, "succeeded": 2, "failed": 0}


def test_real_time_run_with_speedup(cluster):
    set_connection(cluster, speedup=200)
    backend = SimulatedBackend(name=cluster.name)  # the real clock
    ref = backend.create_workload(make_spec(duration_s=60))  # 0.3 s of wall time
    started = time.monotonic()
    backend.start_workload(ref)
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    while backend.workload_status(ref).phase is not RunPhase.SUCCEEDED:
        assert time.monotonic() - started < 5, "the simulated run never finished"
        time.sleep(0.02)
    assert 0.25 <= time.monotonic() - started < 2


def test_no_duration_runs_until_deleted(backend, clock):
    ref = backend.create_workload(make_spec(duration_s=None))
    backend.start_workload(ref)
    clock.advance(10**7)
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    backend.delete_workload(ref)
    assert backend.workload_status(ref).phase is RunPhase.MISSING
    backend.delete_workload(ref)  # idempotent


def test_suspend_then_resume_restarts_the_pods(backend, clock):
    ref = backend.create_workload(make_spec(duration_s=600))
    backend.start_workload(ref)
    clock.advance(50)  # 500 simulated seconds run
    backend.suspend_workload(ref, grace_s=30)
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED
    backend.suspend_workload(ref, grace_s=30)  # idempotent
    clock.advance(100)
    backend.start_workload(ref)
    clock.advance(50)  # a resumed Job's pods start over: 500 of 600 again
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    clock.advance(10)
    assert backend.workload_status(ref).phase is RunPhase.SUCCEEDED


def test_create_is_idempotent_and_foreign_jobs_conflict(backend):
    ref = backend.create_workload(make_spec())
    assert backend.create_workload(make_spec()) == ref
    assert SimJob.objects.count() == 1
    SimJob.objects.update(workload_id=99)
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.CONFLICT
    assert "belong to workload(s) [99], not 7" in refused.value.message


def test_start_of_a_deleted_workload_is_job_gone(backend):
    ref = backend.create_workload(make_spec())
    backend.delete_workload(ref)
    with pytest.raises(DispatchRefused) as refused:
        backend.start_workload(ref)
    assert refused.value.reason is RefusalReason.JOB_GONE


def test_list_workloads(backend):
    two = (
        PodSetSpec(index=0, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                   memory_gib=Decimal(1)),
        PodSetSpec(index=1, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                   memory_gib=Decimal(1)),
    )
    backend.create_workload(make_spec(workload_id=3, pod_sets=two))
    backend.create_workload(make_spec(workload_id=12))
    assert backend.list_workloads() == [
        WorkloadRef(namespace=NS, workload_id=3, job_names=("allot-w3-0", "allot-w3-1")),
        WorkloadRef(namespace=NS, workload_id=12, job_names=("allot-w12-0",)),
    ]


# ------------------------------------------------------------------ refusals


def test_connection_refuse_refuses_every_dispatch(cluster, backend):
    set_connection(cluster, refuse=True)
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.REFUSED
    assert refused.value.message == "simulated cluster sim-bj refuses dispatches"
    assert not SimJob.objects.exists()


def test_refuse_next_counts_down_then_accepts(cluster, backend):
    sim_control_set(cluster_name="sim-bj", refuse_next=2)
    for left in (1, 0):
        with pytest.raises(DispatchRefused, match=f"{left} more to refuse"):
            backend.create_workload(make_spec())
    backend.create_workload(make_spec())
    assert SimControl.objects.get(cluster=cluster).refuse_next == 0


def test_management_command_refuses_and_accepts(cluster, backend):
    out = StringIO()
    call_command("sim_cluster", "sim-bj", "--refuse", stdout=out)
    assert "sim-bj: refuse=yes refuse_next=0 fail_next=0" in out.getvalue()
    with pytest.raises(DispatchRefused):
        backend.create_workload(make_spec())
    call_command("sim_cluster", "sim-bj", "--accept", stdout=StringIO())
    backend.create_workload(make_spec())
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        call_command("sim_cluster", "nope", "--refuse")


def test_control_of_a_kubernetes_cluster_is_refused():
    ClusterFactory(name="k8s-bj", backend="kubernetes")
    with pytest.raises(SimClusterError, match="uses the kubernetes backend"):
        sim_control_set(cluster_name="k8s-bj", refuse=True)
    with pytest.raises(SimClusterError, match="fail_next must be 0 or more"):
        sim_control_set(cluster_name="k8s-bj", fail_next=-1)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("delete", "node sim-bj-a100-80g-1 no longer exists on simulated cluster sim-bj"),
        ("not-ready", "node sim-bj-a100-80g-1 on simulated cluster sim-bj is not ready"),
    ],
)
def test_assigned_node_gone_is_a_refusal(cluster, backend, change, words):
    node = cluster.nodes.get(name="sim-bj-a100-80g-1")
    if change == "delete":
        node.delete()
    else:
        node.ready = False
        node.save()
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec(nodes=["sim-bj-a100-80g-0", "sim-bj-a100-80g-1"]))
    assert refused.value.reason is RefusalReason.NODE_GONE
    assert refused.value.message == words


def test_forbidden_namespace(cluster, backend):
    set_connection(cluster, forbidden_namespaces=[NS])
    with pytest.raises(DispatchRefused) as refused:
        backend.ensure_namespace(NS)
    assert refused.value.reason is RefusalReason.NAMESPACE_FORBIDDEN
    with pytest.raises(DispatchRefused, match=f'namespace "{NS}" forbidden'):
        backend.create_workload(make_spec())
    backend.ensure_namespace("rd-nlp")


# ------------------------------------------------------------------ failures


def test_jobs_named_in_the_connection_fail_after_the_given_run_time(cluster, backend, clock):
    set_connection(cluster, fail=["allot-w7-0"], fail_after_s=100)
    ref = backend.create_workload(make_spec(duration_s=600))
    other = backend.create_workload(make_spec(workload_id=8, duration_s=600))
    backend.start_workload(ref)
    backend.start_workload(other)
    clock.advance(9.9)
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    clock.advance(0.2)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.FAILED
    assert status.pod_sets[0].failed == 1
    assert "failed after 100 s; simulated failure" in status.message
    assert backend.workload_status(other).phase is RunPhase.RUNNING


def test_fail_next_fails_half_way_by_default(cluster, backend, clock):
    call_command("sim_cluster", "sim-bj", "--fail-next", stdout=StringIO())
    ref = backend.create_workload(make_spec(duration_s=600))
    healthy = backend.create_workload(make_spec(workload_id=8, duration_s=600))
    backend.start_workload(ref)
    backend.start_workload(healthy)
    clock.advance(29.9)
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    clock.advance(0.2)
    assert backend.workload_status(ref).phase is RunPhase.FAILED
    assert backend.workload_status(healthy).phase is RunPhase.RUNNING
    assert SimControl.objects.get(cluster=cluster).fail_next == 0


def test_fail_job_now_from_the_command(cluster):
    backend = SimulatedBackend(name=cluster.name)
    ref = backend.create_workload(make_spec(duration_s=None))
    backend.start_workload(ref)
    out = StringIO()
    call_command("sim_cluster", "sim-bj", "--fail-job", "allot-w7-0", stdout=out)
    assert "allot-w7-0: fails now" in out.getvalue()
    assert f"{NS}/allot-w7-0: 2 pods, failed" in out.getvalue()
    assert backend.workload_status(ref).phase is RunPhase.FAILED
    with pytest.raises(CommandError, match="no Job named allot-w1-0"):
        call_command("sim_cluster", "sim-bj", "--fail-job", "allot-w1-0")


# ------------------------------------------------------------------ events, priority classes


def test_events_and_priority_classes_are_kept(cluster, backend, clock):
    ref = backend.create_workload(make_spec())
    backend.post_event(ref, ClusterEventType.WARNING, "Preempted", "preempted by workload 9")
    event = SimEvent.objects.get()
    assert (event.job_name, event.type, event.reason, event.note, event.at) == (
        "allot-w7-0", "Warning", "Preempted", "preempted by workload 9", T0,
    )
    backend.sync_priority_classes([PriorityClassSpec("training", 1000, "training jobs")])
    backend.sync_priority_classes([PriorityClassSpec("batch-low", 100, "",
                                                     preemption_policy="Never")])
    assert SimControl.objects.get(cluster=cluster).priority_classes == {
        "training": {"value": 1000, "description": "training jobs",
                     "preemption_policy": "PreemptLowerPriority"},
        "batch-low": {"value": 100, "description": "", "preemption_policy": "Never"},
    }


# ------------------------------------------------------------------ DCGM metrics

SAMPLE = re.compile(r'^(?P<name>[A-Z_]+)\{(?P<labels>.*)\} (?P<value>[0-9.]+)$')
LABEL = re.compile(r'(?P<key>[A-Za-z_]+)="(?P<value>(?:[^"\\]|\\.)*)"')
LABEL_ORDER = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "container",
               "namespace", "pod"]


def parse_exposition(text):
    """Prometheus text format -> {metric: [(labels dict, float)]}, checking HELP/TYPE."""
    metrics, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind == "gauge"
            typed.add(name)
            continue
        if line.startswith("# HELP ") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = LABEL.findall(match["labels"])
        assert [k for k, _ in labels] == LABEL_ORDER
        assert match["name"] in typed, f"{match['name']} sample before its TYPE"
        metrics.setdefault(match["name"], []).append((dict(labels), float(match["value"])))
    return metrics


def scrape(client, name="sim-bj"):
    response = client.get(reverse("sim-dcgm-metrics", args=[name]))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse_exposition(response.content.decode())


def test_metrics_label_gpus_of_running_pods_and_leave_idle_ones_empty(cluster, client):
    backend = SimulatedBackend(name=cluster.name)
    # Two pods of 4 GPUs on node 0, one 2-GPU pod on node 1; one suspended workload.
    ref = backend.create_workload(make_spec(duration_s=None))
    backend.start_workload(ref)
    small = backend.create_workload(make_spec(
        workload_id=8, duration_s=None, pods=1, gpus=2, nodes=["sim-bj-a100-80g-1"]))
    backend.start_workload(small)
    backend.create_workload(make_spec(workload_id=9, duration_s=None, pods=1, gpus=8,
                                      nodes=["sim-bj-a100-80g-1"]))

    metrics = scrape(client)
    assert set(metrics) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                            "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    util = {(lab["Hostname"], lab["gpu"]): (lab, v) for lab, v in metrics["DCGM_FI_DEV_GPU_UTIL"]}
    assert len(util) == 16
    node0, node1 = "sim-bj-a100-80g-0", "sim-bj-a100-80g-1"
    for gpu in range(8):
        labels, value = util[(node0, str(gpu))]
        pod = f"allot-w7-0-{gpu // 4}"
        assert (labels["namespace"], labels["pod"], labels["container"]) == (NS, pod, "main")
        assert value == pod_gpu_util(pod)
        assert labels["modelName"] == "NVIDIA A100-SXM4-80GB"
        assert labels["UUID"] == gpu_uuid("sim-bj", node0, gpu)
        assert labels["device"] == f"nvidia{gpu}"
    for gpu in range(8):
        labels, value = util[(node1, str(gpu))]
        if gpu < 2:
            assert labels["pod"] == "allot-w8-0-0" and value == pod_gpu_util("allot-w8-0-0")
        else:  # idle: empty pod labels and zero figures (w9 is still suspended)
            assert (labels["namespace"], labels["pod"], labels["container"]) == ("", "", "")
            assert value == 0
    fb_used = {(lab["Hostname"], lab["gpu"]): v for lab, v in metrics["DCGM_FI_DEV_FB_USED"]}
    fb_free = {(lab["Hostname"], lab["gpu"]): v for lab, v in metrics["DCGM_FI_DEV_FB_FREE"]}
    assert fb_used[(node0, "5")] == pod_fb_used_mib("allot-w7-0-1", 80 * 1024)
    assert fb_used[(node0, "5")] + fb_free[(node0, "5")] == 80 * 1024
    assert fb_used[(node1, "7")] == 0 and fb_free[(node1, "7")] == 80 * 1024
    engine = {(lab["Hostname"], lab["gpu"]): v
              for lab, v in metrics["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]}
    assert engine[(node0, "0")] == pytest.approx(pod_gpu_util("allot-w7-0-0") / 100)
    assert engine[(node1, "3")] == 0


def test_predicted_figures_are_stable_and_in_range():
    assert pod_gpu_util("allot-w7-0-0") == pod_gpu_util("allot-w7-0-0")
    values = {pod_gpu_util(f"allot-w{i}-0-0") for i in range(300)}
    assert min(values) >= 40 and max(values) <= 95 and len(values) > 30
    used = [pod_fb_used_mib(f"allot-w{i}-0-0", 81920) for i in range(300)]
    assert min(used) >= 81920 * 30 // 100 and max(used) <= 81920 * 90 // 100


def test_suspended_pods_hold_gpus_through_the_grace_period(cluster, client):
    backend = SimulatedBackend(name=cluster.name)
    ref = backend.create_workload(make_spec(duration_s=None, pods=1, gpus=8))
    backend.start_workload(ref)
    backend.suspend_workload(ref, grace_s=30)  # 3 s of wall time at speedup 10
    held = [lab["pod"] for lab, _ in scrape(client)["DCGM_FI_DEV_GPU_UTIL"] if lab["pod"]]
    assert held == ["allot-w7-0-0"] * 8
    SimJob.objects.update(suspended_at=datetime.now(UTC) - timedelta(seconds=3.1))
    held = [lab["pod"] for lab, _ in scrape(client)["DCGM_FI_DEV_GPU_UTIL"] if lab["pod"]]
    assert held == []


def test_finished_pods_release_their_gpus(cluster, client):
    backend = SimulatedBackend(name=cluster.name)
    ref = backend.create_workload(make_spec(duration_s=60, pods=1, gpus=8))
    backend.start_workload(ref)
    assert any(lab["pod"] for lab, _ in scrape(client)["DCGM_FI_DEV_GPU_UTIL"])
    SimJob.objects.update(started_at=datetime.now(UTC) - timedelta(seconds=7))
    assert not any(lab["pod"] for lab, _ in scrape(client)["DCGM_FI_DEV_GPU_UTIL"])


def test_metrics_of_unknown_or_kubernetes_clusters_are_404(client, cluster):
    ClusterFactory(name="k8s-bj", backend="kubernetes")
    assert client.get(reverse("sim-dcgm-metrics", args=["k8s-bj"])).status_code == 404
    assert client.get(reverse("sim-dcgm-metrics", args=["nope"])).status_code == 404


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus) not installed")
def test_exposition_parses_with_prometheus_own_checker(cluster, client):
    backend = SimulatedBackend(name=cluster.name)
    backend.start_workload(backend.create_workload(make_spec(duration_s=None)))
    text = client.get(reverse("sim-dcgm-metrics", args=["sim-bj"])).content
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                             timeout=30, check=False)
    output = (checked.stdout + checked.stderr).decode()
    assert "parsing error" not in output
    # Only the lint dcgm-exporter's own output draws too: its camelCase labels (UUID, ...).
    problems = [line for line in output.splitlines() if line.strip()]
    assert all("camelCase" in line for line in problems), problems


def test_statuses_of_many_workloads_in_one_query(backend, clock, django_assert_num_queries):
    first = backend.create_workload(make_spec(workload_id=3))
    backend.start_workload(first)
    second = backend.create_workload(make_spec(workload_id=4))
    missing = WorkloadRef.for_workload(namespace=NS, workload_id=5, pod_set_indexes=[0])
    with django_assert_num_queries(1):
        statuses = backend.workload_statuses([first, second, missing])
    assert [s.phase for s in statuses] == [RunPhase.RUNNING, RunPhase.SUSPENDED, RunPhase.MISSING]


def test_watch_wakes_up_when_pods_change_state_by_the_clock(cluster):
    set_connection(cluster, speedup=100, start_delay_s=30)  # pods run 0.3 s after start
    backend = SimulatedBackend(name=cluster.name)
    ref = backend.create_workload(make_spec(workload_id=3, duration_s=None))
    backend.create_workload(make_spec(workload_id=4, duration_s=None))
    resync = backend.watch_workloads(timeout_s=0)
    assert resync.changed == {3, 4}
    backend.start_workload(ref)
    started = backend.watch_workloads(timeout_s=5, resource_version=resync.resource_version)
    assert started.changed == {3}  # started after the bookmark
    assert backend.workload_status(ref).phase is RunPhase.PENDING
    began = time.monotonic()
    running = backend.watch_workloads(timeout_s=5, resource_version=started.resource_version)
    assert running.changed == {3}
    assert time.monotonic() - began < 1.5
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    quiet = backend.watch_workloads(timeout_s=0.3, resource_version=running.resource_version)
    assert quiet.changed == frozenset()
    assert backend.watch_workloads(timeout_s=0, resource_version="not-a-time").expired


def test_a_cluster_missing_from_the_database_is_a_clear_error():
    from scheduling.backends import BackendError

    backend = SimulatedBackend(name="gone")
    with pytest.raises(BackendError, match="simulated cluster gone does not exist") as error:
        backend.create_workload(make_spec())
    assert not error.value.retryable


def test_admin_lists_simulated_jobs_with_their_pods_now(cluster, client):
    from tests.factories import AdminFactory

    backend = SimulatedBackend(name=cluster.name)
    backend.start_workload(backend.create_workload(make_spec(duration_s=None)))
    client.force_login(AdminFactory())
    response = client.get(reverse("admin:simulated_simjob_changelist"))
    assert response.status_code == 200
    assert "allot-w7-0" in response.content.decode()
    assert "0 pending, 2 running, 0 succeeded" in response.content.decode()


# ------------------------------------------------------------------ batch dispatch


def test_dispatch_many_creates_and_starts_a_batch_in_a_few_queries(
        cluster, backend, clock, django_assert_max_num_queries):
    specs = [make_spec(workload_id=i, duration_s=600) for i in range(100, 140)]
    with django_assert_max_num_queries(8):
        outcomes = backend.dispatch_many(specs)
    assert [o.ref for o in outcomes] == [s.ref for s in specs]
    assert all(o.refused is None and o.error is None and o.running for o in outcomes)
    jobs = SimJob.objects.filter(workload_id__in=range(100, 140))
    assert jobs.count() == 40 and not jobs.filter(suspended=True).exists()
    job = jobs.get(workload_id=100)
    assert job.started_at == T0 and job.touched_at == T0 and job.ready_at == T0
    assert job.done_at == T0 + timedelta(seconds=60)  # 600 simulated s at speedup 10
    statuses = backend.workload_statuses([s.ref for s in specs])
    assert {s.phase for s in statuses} == {RunPhase.RUNNING}


def test_dispatch_many_keeps_the_one_by_one_rules(cluster, backend):
    set_connection(cluster, forbidden_namespaces=["ops"])
    backend.create_workload(make_spec(workload_id=9))  # allot-w9-0 exists already ...
    SimJob.objects.filter(workload_id=9).update(workload_id=99)  # ... owned by another one
    sim_control_set(cluster_name=cluster.name, refuse_next=1, fail_next=1)
    gone = make_spec(workload_id=3, nodes=["sim-bj-nope"] * 2)
    forbidden = WorkloadSpec(**{**make_spec(workload_id=4).__dict__, "namespace": "ops"})
    specs = [make_spec(workload_id=1), make_spec(workload_id=2), gone, forbidden,
             make_spec(workload_id=9)]
    out = backend.dispatch_many(specs)
    assert out[0].refused.reason is RefusalReason.REFUSED  # refuse-next takes the first
    assert out[1].refused is None and out[1].running
    assert out[2].refused.reason is RefusalReason.NODE_GONE
    assert out[3].refused.reason is RefusalReason.NAMESPACE_FORBIDDEN
    assert out[4].refused.reason is RefusalReason.CONFLICT
    control = SimControl.objects.get(cluster=cluster)
    assert (control.refuse_next, control.fail_next) == (0, 0)
    assert SimJob.objects.get(workload_id=2).fail_after_s == 300  # fail-next: half the run
    assert not SimJob.objects.filter(workload_id__in=[1, 3, 4]).exists()


def test_dispatch_many_is_idempotent_and_replaces_a_previous_interval(cluster, backend, clock):
    spec = make_spec(workload_id=5, duration_s=600)
    backend.dispatch_many([spec])
    clock.advance(10)
    again = backend.dispatch_many([spec])  # a retried dispatch: nothing new, still running
    assert again[0].refused is None and again[0].running
    assert SimJob.objects.get(workload_id=5).started_at == T0
    backend.suspend_workload(spec.ref, 0)
    assert backend.dispatch_many([spec], replace=frozenset({5}))[0].running
    assert SimJob.objects.get(workload_id=5).started_at == T0 + timedelta(seconds=10)


def test_dispatch_many_with_a_refusing_cluster_refuses_all(cluster, backend):
    set_connection(cluster, refuse=True)
    out = backend.dispatch_many([make_spec(workload_id=1), make_spec(workload_id=2)])
    assert [o.refused.reason for o in out] == [RefusalReason.REFUSED] * 2
    assert not SimJob.objects.exists()


def test_watch_reads_the_marks_not_every_job(cluster, django_assert_max_num_queries):
    set_connection(cluster, speedup=100)
    backend = SimulatedBackend(name=cluster.name)
    backend.dispatch_many([make_spec(workload_id=i, duration_s=20) for i in range(1, 50)])
    bookmark = backend.watch_workloads(timeout_s=0).resource_version
    began = time.monotonic()
    with django_assert_max_num_queries(40):
        done = backend.watch_workloads(timeout_s=3, resource_version=bookmark)
    assert done.changed == frozenset(range(1, 50))  # all end 0.2 s after their start
    assert time.monotonic() - began < 1.0
    statuses = backend.workload_statuses([make_spec(workload_id=1).ref])
    assert statuses[0].phase is RunPhase.SUCCEEDED


def test_watch_overlap_reports_recent_changes_again(cluster):
    backend = SimulatedBackend(name=cluster.name, watch_overlap_s=5)
    backend.dispatch_many([make_spec(workload_id=8, duration_s=None)])
    bookmark = backend.watch_workloads(timeout_s=0).resource_version
    # Written before the bookmark, but within the overlap: seen again (a late commit is safe).
    assert backend.watch_workloads(timeout_s=0, resource_version=bookmark).changed == {8}
    exact = SimulatedBackend(name=cluster.name)
    assert exact.watch_workloads(timeout_s=0, resource_version=bookmark).changed == frozenset()
