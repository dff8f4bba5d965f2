"""The Kubernetes backend against the HTTP-level API double: the official client makes real
requests on loopback, and the double answers with the real paths, shapes and Status errors."""

import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest

from scheduling.backends import (
    BackendError,
    ClusterEventType,
    DispatchRefused,
    FlavorMatch,
    PodSetSpec,
    PriorityClassSpec,
    RefusalReason,
    RunPhase,
    WorkloadRef,
    WorkloadSpec,
    clear_backend_cache,
    get_backend,
)
from scheduling.backends.k8s import KubernetesBackend
from scheduling.backends.k8s.jobs import format_cpu, format_memory
from tests.k8s_double import KubeDouble

A100 = FlavorMatch(
    name="a100-80g",
    node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    interconnect_label="allot.io/nvlink-domain",
)
H100 = FlavorMatch(name="h100", node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
FLAVORS = [A100, H100]
NS = "rd-vision"


@pytest.fixture
def kube():
    with KubeDouble() as double:
        double.state.add_node(
            "bj-a100-0",
            labels={**A100.node_selector, "allot.io/nvlink-domain": "rack-1",
                    "topology.kubernetes.io/zone": "bj-1a"},
            gpus=8, cpu="95500m", memory="1056763364Ki",
        )
        double.state.add_node("bj-a100-1", labels=dict(A100.node_selector), gpus=8)
        double.state.add_node(
            "bj-h100-0",
            labels={**H100.node_selector, "topology.kubernetes.io/zone": "bj-1b"},
            gpus=8, ready=False,
        )
        double.state.add_node("bj-cpu-0", labels={"node-role": "cpu"}, gpus=0, cpu="64",
                              memory="256Gi")
        double.state.add_node("bj-a100-2", labels=dict(A100.node_selector), unschedulable=True)
        yield double


@pytest.fixture
def backend(kube):
    return KubernetesBackend(name="bj", connection={**kube.connection, "timeout_s": 0.5})


def make_spec(workload_id=7, *, image="registry.local/train:1.4", pod_sets=None, **extra):
    pod_sets = pod_sets or (
        PodSetSpec(
            index=0, count=2, flavor="a100-80g", gpus=8, cpu=Decimal("32"),
            memory_gib=Decimal("256"), node_selector=dict(A100.node_selector),
            nodes=("bj-a100-0", "bj-a100-1"),
        ),
    )
    values = {
        "workload_id": workload_id, "name": "resnet-sweep-3", "namespace": NS,
        "queue_path": "rd/vision", "pod_sets": tuple(pod_sets), "image": image,
        "command": ("python", "train.py"), "priority_class": "", "termination_grace_s": 45,
        "labels": {"allot.io/team": "vision"},
    }
    values.update(extra)
    return WorkloadSpec(**values)


# ------------------------------------------------------------------ nodes


def test_node_inventory_reads_flavor_resources_readiness_and_rack(backend):
    nodes = {n.name: n for n in backend.list_nodes(FLAVORS)}
    assert set(nodes) == {"bj-a100-0", "bj-a100-1", "bj-a100-2", "bj-h100-0", "bj-cpu-0"}
    first = nodes["bj-a100-0"]
    assert first.flavor == "a100-80g"
    assert first.gpus == 8
    assert first.cpu == Decimal("95.500")
    assert first.memory_gib == Decimal("1007.808")  # 1056763364 KiB
    assert first.ready is True
    assert first.rack == "rack-1"  # the flavor's interconnect label wins over the zone
    assert first.labels["kubernetes.io/hostname"] == "bj-a100-0"
    assert nodes["bj-a100-1"].rack == ""
    assert nodes["bj-h100-0"].flavor == "h100"
    assert nodes["bj-h100-0"].ready is False  # Ready condition False
    assert nodes["bj-h100-0"].rack == "bj-1b"  # no interconnect label: the zone
    assert nodes["bj-a100-2"].ready is False  # cordoned
    assert nodes["bj-cpu-0"].flavor is None
    assert nodes["bj-cpu-0"].gpus == 0 and nodes["bj-cpu-0"].memory_gib == Decimal("256.000")


def test_most_specific_flavor_selector_wins(kube, backend):
    kube.state.add_node("bj-a100-mig", labels={**A100.node_selector, "nvidia.com/mig": "on"})
    mig = FlavorMatch(name="a100-mig", node_selector={**A100.node_selector,
                                                      "nvidia.com/mig": "on"})
    nodes = {n.name: n.flavor for n in backend.list_nodes([*FLAVORS, mig])}
    assert nodes["bj-a100-mig"] == "a100-mig"
    assert nodes["bj-a100-0"] == "a100-80g"


# ------------------------------------------------------------------ creation


def test_create_makes_namespace_and_a_suspended_job_per_pod_set(kube, backend):
    kube.state.create_priority_class({"metadata": {"name": "training"}, "value": 1000})
    spec = make_spec(
        pod_sets=(
            PodSetSpec(index=0, count=1, flavor="a100-80g", gpus=0, cpu=Decimal("1.5"),
                       memory_gib=Decimal("1.5"), node_selector=dict(A100.node_selector),
                       nodes=("bj-a100-0",)),
            PodSetSpec(index=1, count=2, flavor="a100-80g", gpus=8, cpu=Decimal("32"),
                       memory_gib=Decimal("256"), node_selector=dict(A100.node_selector),
                       nodes=("bj-a100-1", "bj-a100-0")),
        ),
        priority_class="training",
    )
    ref = backend.create_workload(spec)

    assert ref == WorkloadRef(namespace=NS, workload_id=7, job_names=("allot-w7-0", "allot-w7-1"))
    namespace = kube.state.namespaces[NS]
    assert namespace["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "allot"
    job = kube.state.jobs[(NS, "allot-w7-1")]
    assert job["spec"]["suspend"] is True
    assert job["spec"]["parallelism"] == 2 and job["spec"]["completions"] == 2
    assert job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["labels"] == {
        "allot.io/team": "vision",
        "app.kubernetes.io/managed-by": "allot",
        "allot.io/workload-id": "7",
        "allot.io/queue": "rd.vision",
        "allot.io/pod-set": "1",
        "allot.io/flavor": "a100-80g",
    }
    assert job["metadata"]["annotations"]["allot.io/workload-name"] == "resnet-sweep-3"
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["priorityClassName"] == "training"
    assert pod["terminationGracePeriodSeconds"] == 45
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["image"] == "registry.local/train:1.4"
    assert container["command"] == ["python", "train.py"]
    assert container["resources"] == {
        "requests": {"cpu": "32", "memory": "256Gi"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "bj-a100-0", "bj-a100-1",
    ]
    assert job["spec"]["template"]["metadata"]["labels"]["allot.io/workload-id"] == "7"
    small = kube.state.jobs[(NS, "allot-w7-0")]["spec"]["template"]["spec"]
    assert small["containers"][0]["resources"] == {
        "requests": {"cpu": "1500m", "memory": "1536Mi"}, "limits": {},
    }
    assert "tolerations" not in small
    # Suspended Jobs hold no pods.
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED
    assert kube.state.pods == {}


def test_quantities_are_formatted_as_kubernetes_expects():
    assert format_cpu(Decimal("4")) == "4"
    assert format_cpu(Decimal("0.25")) == "250m"
    assert format_memory(Decimal("80")) == "80Gi"
    assert format_memory(Decimal("0.5")) == "512Mi"


def test_create_twice_is_idempotent_409_means_already_there(kube, backend):
    spec = make_spec()
    backend.create_workload(spec)
    backend.create_workload(spec)
    posts = kube.requests("POST", r"/jobs$")
    assert len(posts) == 2
    assert len(kube.state.jobs) == 1
    assert kube.requests("GET", r"/jobs/allot-w7-0$")  # it read the existing Job to adopt it


def test_job_of_another_workload_is_a_conflict(kube, backend):
    backend.create_workload(make_spec(workload_id=7))
    kube.state.jobs[(NS, "allot-w7-0")]["metadata"]["labels"]["allot.io/workload-id"] = "99"
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec(workload_id=7))
    assert refused.value.reason is RefusalReason.CONFLICT
    assert "belongs to workload 99, not 7" in refused.value.message


def test_stale_suspended_job_is_replaced_with_the_new_flavor(kube, backend):
    backend.create_workload(make_spec())
    h100 = PodSetSpec(index=0, count=1, flavor="h100", gpus=8, cpu=Decimal(8),
                      memory_gib=Decimal(64), node_selector=dict(H100.node_selector))
    backend.create_workload(make_spec(pod_sets=(h100,)))
    job = kube.state.jobs[(NS, "allot-w7-0")]
    assert job["spec"]["template"]["spec"]["nodeSelector"] == dict(H100.node_selector)
    assert job["metadata"]["labels"]["allot.io/flavor"] == "h100"
    assert len(kube.requests("DELETE", r"/jobs/allot-w7-0$")) == 1


# ------------------------------------------------------------------ lifecycle


def test_start_run_finish(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.start_workload(ref)
    job = kube.state.jobs[(NS, "allot-w7-0")]
    assert job["spec"]["suspend"] is False
    patch = kube.requests("PATCH", r"/jobs/allot-w7-0$")[-1]
    assert patch["content_type"] == "application/merge-patch+json"
    assert patch["body"] == {"spec": {"suspend": False}}

    status = backend.workload_status(ref)
    assert status.phase is RunPhase.PENDING
    assert status.pod_sets[0].pending == 2 and status.pod_sets[0].count == 2

    kube.state.set_pod_phases(NS, "allot-w7-0", "Running", 1)
    status = backend.workload_status(ref)
    assert (status.pod_sets[0].pending, status.pod_sets[0].running) == (1, 1)
    assert status.phase is RunPhase.PENDING

    kube.state.set_pod_phases(NS, "allot-w7-0", "Running")
    assert backend.workload_status(ref).phase is RunPhase.RUNNING

    kube.state.set_pod_phases(NS, "allot-w7-0", "Succeeded")
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.SUCCEEDED
    assert status.totals() == {"pending": 0, "running": 0, "succeeded": 2, "failed": 0}


def test_failed_pod_fails_the_gang_with_the_job_message(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.start_workload(ref)
    kube.state.set_pod_phases(NS, "allot-w7-0", "Running")
    kube.state.set_pod_phases(NS, "allot-w7-0", "Failed", 1)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.FAILED
    assert status.pod_sets[0].failed == 1
    assert status.message == (
        "BackoffLimitExceeded: Job has reached the specified backoff limit"
    )


def test_suspend_on_preemption_stops_pods_and_resume_restarts_them(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.start_workload(ref)
    kube.state.set_pod_phases(NS, "allot-w7-0", "Running")
    backend.suspend_workload(ref, grace_s=45)
    assert kube.state.jobs[(NS, "allot-w7-0")]["spec"]["suspend"] is True
    assert kube.state.pods == {}
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED
    backend.suspend_workload(ref, grace_s=45)  # idempotent
    backend.start_workload(ref)
    assert backend.workload_status(ref).pod_sets[0].pending == 2


def test_delete_removes_jobs_and_pods_and_is_idempotent(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.start_workload(ref)
    backend.delete_workload(ref)
    assert kube.state.jobs == {} and kube.state.pods == {}
    delete = kube.requests("DELETE")[-1]
    assert delete["query"]["propagationPolicy"] == "Background"
    backend.delete_workload(ref)  # 404 is fine
    assert backend.workload_status(ref).phase is RunPhase.MISSING
    backend.suspend_workload(ref, grace_s=5)  # a gone Job is as stopped as suspended


def test_list_workloads_groups_jobs_by_workload(kube, backend):
    two_sets = (
        PodSetSpec(index=0, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                   memory_gib=Decimal(1), node_selector=dict(A100.node_selector)),
        PodSetSpec(index=1, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                   memory_gib=Decimal(1), node_selector=dict(A100.node_selector)),
    )
    backend.create_workload(make_spec(workload_id=3, pod_sets=two_sets))
    backend.create_workload(make_spec(workload_id=12, namespace="rd-nlp"))
    refs = backend.list_workloads()
    assert refs == [
        WorkloadRef(namespace="rd-nlp", workload_id=12, job_names=("allot-w12-0",)),
        WorkloadRef(namespace=NS, workload_id=3, job_names=("allot-w3-0", "allot-w3-1")),
    ]


# ------------------------------------------------------------------ events


def test_reasons_are_events_regarding_the_job(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.post_event(ref, ClusterEventType.WARNING, "Preempted",
                       "preempted by workload 9 (priority 10000 > 1000) to reclaim 16 GPUs")
    events = kube.state.events_about(NS, "Job", "allot-w7-0")
    assert len(events) == 1
    event = events[0]
    assert event["type"] == "Warning"
    assert event["reason"] == "Preempted"
    assert event["note"].startswith("preempted by workload 9")
    assert event["reportingController"] == "allot.io/scheduler"
    assert event["regarding"]["uid"] == kube.state.jobs[(NS, "allot-w7-0")]["metadata"]["uid"]
    assert event["regarding"]["apiVersion"] == "batch/v1"
    # MicroTime: RFC 3339 with microseconds and a UTC offset
    event_time = datetime.fromisoformat(event["eventTime"].replace("Z", "+00:00"))
    assert event_time.utcoffset() == timedelta(0)
    assert abs((datetime.now(UTC) - event_time).total_seconds()) < 60

    backend.post_event(ref, "Normal", "Admitted", "x" * 5000)
    assert len(kube.state.events_about(NS, "Job", "allot-w7-0")[-1]["note"]) == 1024


def test_event_about_a_deleted_job_is_skipped(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.delete_workload(ref)
    backend.post_event(ref, "Normal", "Finished", "done")
    assert kube.state.events == []


# ------------------------------------------------------------------ priority classes


def test_priority_classes_are_created_patched_and_replaced(kube, backend):
    classes = [
        PriorityClassSpec("inference-high", 10000, "serving"),
        PriorityClassSpec("training", 1000, "training jobs"),
        PriorityClassSpec("batch-low", 100, "batch", preemption_policy="Never"),
    ]
    backend.sync_priority_classes(classes)
    stored = kube.state.priority_classes
    assert {n: pc["value"] for n, pc in stored.items()} == {
        "inference-high": 10000, "training": 1000, "batch-low": 100,
    }
    assert stored["batch-low"]["preemptionPolicy"] == "Never"

    before = len(kube.requests())
    backend.sync_priority_classes(classes)
    assert [r["method"] for r in kube.requests()[before:]] == ["GET"]  # nothing to change

    backend.sync_priority_classes([
        PriorityClassSpec("training", 1000, "model training"),
        PriorityClassSpec("inference-high", 20000, "serving"),
    ])
    assert stored["training"]["description"] == "model training"
    assert stored["inference-high"]["value"] == 20000  # value is immutable: replaced
    methods = [(r["method"], r["path"].rsplit("/", 1)[-1]) for r in kube.requests()]
    assert ("PATCH", "training") in methods
    assert ("DELETE", "inference-high") in methods


# ------------------------------------------------------------------ errors


def test_422_is_a_refusal_with_the_api_message(kube, backend):
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec(image=""))
    assert refused.value.reason is RefusalReason.INVALID
    assert "HTTP 422" in refused.value.message
    assert "spec.template.spec.containers[0].image: Required value" in refused.value.message
    assert kube.state.jobs == {}


def test_refusal_of_a_later_pod_set_removes_the_jobs_already_created(kube, backend):
    ok = PodSetSpec(index=0, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                    memory_gib=Decimal(1), node_selector=dict(A100.node_selector))
    kube.fail("POST", r"/jobs$", 422, message='Job.batch "allot-w7-1" is invalid: nope',
              after=1)
    with pytest.raises(DispatchRefused, match="is invalid: nope"):
        backend.create_workload(
            make_spec(pod_sets=(ok, PodSetSpec(**{**ok.__dict__, "index": 1})))
        )
    assert kube.state.jobs == {}  # the gang is all or nothing


def test_500_is_a_retryable_backend_error_with_status_and_message(kube, backend):
    kube.fail("POST", r"/jobs$", 500, message="etcdserver: request timed out, possibly due to "
              "previous leader failure")
    with pytest.raises(BackendError) as error:
        backend.create_workload(make_spec())
    assert error.value.status == 500 and error.value.retryable
    assert "etcdserver: request timed out" in str(error.value)
    backend.create_workload(make_spec())  # the retry succeeds
    assert (NS, "allot-w7-0") in kube.state.jobs


def test_timeout_is_a_quick_retryable_error_and_the_retry_adopts_the_job(kube, backend):
    kube.fail("POST", r"/jobs$", delay_s=1.5)  # the server creates it, the answer comes late
    started = time.monotonic()
    with pytest.raises(BackendError, match="timed out") as error:
        backend.create_workload(make_spec())
    assert time.monotonic() - started < 1.4
    assert error.value.retryable and error.value.status is None
    time.sleep(1.2)
    ref = backend.create_workload(make_spec())  # 409 -> ours -> fine
    assert ref.job_names == ("allot-w7-0",)
    assert len(kube.state.jobs) == 1


def test_forbidden_namespace_is_a_refusal(kube, backend):
    kube.forbid_namespace(NS)
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.NAMESPACE_FORBIDDEN
    assert f'namespace "{NS}" forbidden on cluster bj' in refused.value.message
    assert "cannot create resource" in refused.value.message


def test_forbidden_job_creation_is_a_namespace_refusal(kube, backend):
    kube.state.create_namespace({"metadata": {"name": NS}})
    kube.fail("POST", r"/jobs$", 403, message='jobs.batch "allot-w7-0" is forbidden: User '
              '"allot" cannot create resource "jobs" in API group "batch"')
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.NAMESPACE_FORBIDDEN


@pytest.mark.django_db
def test_missing_priority_class_is_synced_from_the_database_first(kube, backend):
    ref = backend.create_workload(make_spec(priority_class="training"))
    stored = kube.state.priority_classes
    assert {n: (pc["value"], pc["preemptionPolicy"]) for n, pc in stored.items()} == {
        "inference-high": (10000, "Never"), "training": (1000, "Never"),
        "batch-low": (100, "Never"),
    }  # Allot's seeded classes; Allot, not the kube-scheduler, decides preemption
    assert kube.state.jobs[(NS, ref.job_names[0])]["spec"]["template"]["spec"][
        "priorityClassName"] == "training"
    before = len(kube.requests())
    backend.create_workload(make_spec(workload_id=8, priority_class="training"))
    assert not kube.requests("GET", r"/priorityclasses/")[before:]  # known from now on


@pytest.mark.django_db
def test_priority_class_unknown_everywhere_is_refused_before_the_job_stalls(kube, backend):
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec(priority_class="nope"))
    assert refused.value.reason is RefusalReason.INVALID
    assert refused.value.message == (
        "PriorityClass nope does not exist on cluster bj, nor in Allot's priority classes "
        "to create it from"
    )
    assert kube.state.jobs == {}


def test_the_double_refuses_pods_not_jobs_of_an_unknown_priority_class(kube, backend):
    # What a real cluster does when the check above is skipped: the Job waits without pods.
    backend._known_priority_classes.add("ghost")
    ref = backend.create_workload(make_spec(priority_class="ghost"))
    backend.start_workload(ref)
    assert backend.workload_status(ref).phase is RunPhase.PENDING
    assert kube.state.pods == {}
    failed = kube.state.events_about(NS, "Job", "allot-w7-0")
    assert failed[-1]["reason"] == "FailedCreate"
    assert "no PriorityClass with name ghost was found" in failed[-1]["note"]


@pytest.mark.parametrize(
    ("node", "change", "words"),
    [
        ("bj-a100-1", "delete", "node bj-a100-1 no longer exists on cluster bj"),
        ("bj-a100-1", "not-ready", "node bj-a100-1 on cluster bj is not ready"),
    ],
)
def test_assigned_node_gone_is_a_refusal(kube, backend, node, change, words):
    if change == "delete":
        del kube.state.nodes[node]
    else:
        kube.state.set_node_ready(node, False)
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.NODE_GONE
    assert words in refused.value.message
    assert kube.state.jobs == {}


def test_start_of_a_vanished_job_is_a_refusal(kube, backend):
    ref = backend.create_workload(make_spec())
    del kube.state.jobs[(NS, "allot-w7-0")]
    with pytest.raises(DispatchRefused) as refused:
        backend.start_workload(ref)
    assert refused.value.reason is RefusalReason.JOB_GONE


def test_wrong_token_is_not_retryable(kube):
    backend = KubernetesBackend(name="bj", connection={**kube.connection, "token": "wrong"})
    with pytest.raises(BackendError) as error:
        backend.list_nodes(FLAVORS)
    assert error.value.status == 401 and not error.value.retryable
    assert "check its credentials" in str(error.value)


def test_unreachable_cluster_is_retryable(kube):
    url = kube.url
    kube.stop()
    backend = KubernetesBackend(name="bj", connection={"host": url, "token": "t",
                                                        "timeout_s": 0.5})
    with pytest.raises(BackendError, match="unreachable") as error:
        backend.list_nodes(FLAVORS)
    assert error.value.retryable


def test_503_on_status_read_is_retryable(kube, backend):
    ref = backend.create_workload(make_spec())
    kube.fail("GET", r"/pods$", 503, message="the server is currently unable to handle it")
    with pytest.raises(BackendError) as error:
        backend.workload_status(ref)
    assert error.value.status == 503 and error.value.retryable


# ------------------------------------------------------------------ configuration


def test_get_backend_builds_from_cluster_connection_and_caches(kube):
    clear_backend_cache()
    cluster = SimpleNamespace(name="bj", backend="kubernetes", connection=kube.connection)
    backend = get_backend(cluster)
    assert isinstance(backend, KubernetesBackend)
    assert get_backend(cluster) is backend
    assert [n.name for n in backend.list_nodes(FLAVORS)][:1] == ["bj-a100-0"]
    clear_backend_cache()


def test_kubeconfig_file_with_context(kube, tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(f"""
apiVersion: v1
kind: Config
clusters:
- name: bj
  cluster: {{server: "{kube.url}", insecure-skip-tls-verify: true}}
users:
- name: allot
  user: {{token: "{kube.token}"}}
contexts:
- name: bj-admin
  context: {{cluster: bj, user: allot}}
- name: other
  context: {{cluster: bj, user: nobody}}
current-context: other
""")
    backend = KubernetesBackend(
        name="bj", connection={"kubeconfig": str(kubeconfig), "context": "bj-admin"}
    )
    assert len(backend.list_nodes(FLAVORS)) == 5


def test_missing_connection_settings_are_a_clear_error():
    backend = KubernetesBackend(name="bj", connection={"speedup": 60})
    with pytest.raises(BackendError, match="needs 'kubeconfig', 'in_cluster' or 'host'") as err:
        backend.list_nodes(FLAVORS)
    assert not err.value.retryable


def test_statuses_of_many_workloads_take_two_calls_per_namespace(kube, backend):
    running = backend.create_workload(make_spec(workload_id=3))
    backend.start_workload(running)
    kube.state.set_pod_phases(NS, "allot-w3-0", "Running")
    suspended = backend.create_workload(make_spec(workload_id=4))
    other_ns = backend.create_workload(make_spec(workload_id=5, namespace="rd-nlp"))
    missing = WorkloadRef.for_workload(namespace=NS, workload_id=6, pod_set_indexes=[0])
    before = len(kube.requests())
    statuses = backend.workload_statuses([running, suspended, other_ns, missing])
    assert [s.phase for s in statuses] == [
        RunPhase.RUNNING, RunPhase.SUSPENDED, RunPhase.SUSPENDED, RunPhase.MISSING,
    ]
    assert [s.ref for s in statuses] == [running, suspended, other_ns, missing]
    calls = kube.requests()[before:]
    assert len(calls) == 4
    assert {c["query"]["labelSelector"] for c in calls} == {
        "allot.io/workload-id in (3,4,6)", "allot.io/workload-id in (5)",
    }


def test_a_big_gang_checks_its_nodes_with_one_list_call(kube, backend):
    for i in range(3, 8):
        kube.state.add_node(f"bj-a100-{i}", labels=dict(A100.node_selector))
    nodes = ("bj-a100-0", "bj-a100-1", "bj-a100-3", "bj-a100-4", "bj-a100-5")
    pod_set = PodSetSpec(index=0, count=5, flavor="a100-80g", gpus=8, cpu=Decimal(8),
                         memory_gib=Decimal(64), node_selector=dict(A100.node_selector),
                         nodes=nodes)
    backend.create_workload(make_spec(pod_sets=(pod_set,)))
    assert len(kube.requests("GET", r"/api/v1/nodes$")) == 1
    assert not kube.requests("GET", r"/api/v1/nodes/")
    kube.state.set_node_ready("bj-a100-4", False)
    with pytest.raises(DispatchRefused, match="node bj-a100-4 on cluster bj is not ready"):
        backend.create_workload(make_spec(workload_id=8, pod_sets=(pod_set,)))


# ------------------------------------------------------------------ watch


def test_watch_resyncs_without_a_bookmark_then_returns_at_the_first_change(kube, backend):
    first = backend.create_workload(make_spec(workload_id=3))
    backend.create_workload(make_spec(workload_id=4))
    resync = backend.watch_workloads(timeout_s=5)
    assert resync.changed == {3, 4} and resync.resource_version and not resync.expired

    backend.start_workload(first)  # a change after the bookmark is seen at once
    seen = backend.watch_workloads(timeout_s=5, resource_version=resync.resource_version)
    assert seen.changed == {3}
    watch_call = kube.requests("GET", r"/apis/batch/v1/jobs$")[-1]["query"]
    assert watch_call["watch"] in ("true", "True")
    assert watch_call["labelSelector"] == "app.kubernetes.io/managed-by=allot,allot.io/workload-id"

    def pods_start_soon():
        time.sleep(0.4)
        kube.state.set_pod_phases(NS, "allot-w3-0", "Running")

    threading.Thread(target=pods_start_soon).start()
    started = time.monotonic()
    later = backend.watch_workloads(timeout_s=10, resource_version=seen.resource_version)
    assert later.changed == {3}
    assert 0.3 < time.monotonic() - started < 3  # woke up by the change, not the timeout


def test_watch_times_out_empty_handed(kube, backend):
    backend.create_workload(make_spec(workload_id=3))
    bookmark = backend.watch_workloads(timeout_s=1).resource_version
    started = time.monotonic()
    quiet = backend.watch_workloads(timeout_s=1, resource_version=bookmark)
    assert quiet.changed == frozenset() and not quiet.expired
    assert 0.9 < time.monotonic() - started < 3


def test_watch_from_a_compacted_bookmark_asks_for_a_resync(kube, backend):
    backend.create_workload(make_spec(workload_id=3))
    bookmark = backend.watch_workloads(timeout_s=1).resource_version
    backend.create_workload(make_spec(workload_id=4))
    kube.state.compact()
    result = backend.watch_workloads(timeout_s=2, resource_version=bookmark)
    assert result.expired and result.changed == frozenset()


def test_in_cluster_config_outside_a_cluster_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    backend = KubernetesBackend(name="bj", connection={"in_cluster": True})
    with pytest.raises(BackendError, match="cannot load its Kubernetes configuration") as err:
        backend.list_nodes(FLAVORS)
    assert not err.value.retryable


def test_missing_kubeconfig_file_is_a_clear_error(tmp_path):
    backend = KubernetesBackend(name="bj", connection={"kubeconfig": str(tmp_path / "none")})
    with pytest.raises(BackendError, match="cannot load its Kubernetes configuration"):
        backend.list_nodes(FLAVORS)


def test_many_reasons_in_a_burst_are_all_kept(kube, backend):
    ref = backend.create_workload(make_spec())
    for i in range(20):
        backend.post_event(ref, "Normal", "Pending", f"waiting {i}")
    events = kube.state.events_about(NS, "Job", "allot-w7-0")
    assert [e["note"] for e in events] == [f"waiting {i}" for i in range(20)]
    assert len({e["metadata"]["name"] for e in events}) == 20
