"""Upstream-shaped manifests of every kind Allot runs, shared by the kinds' tests, the API
double's end-to-end tests and the demo's tests (each a fresh copy)."""

from __future__ import annotations

import copy
from typing import Any


def container(cpu: str = "4", memory: str = "32Gi", gpus: int = 0, *, name: str = "main",
              limits_only: bool = False) -> dict[str, Any]:
    res: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        res["nvidia.com/gpu"] = str(gpus)
    resources = {"limits": res} if limits_only else {"requests": res, "limits": (
        {"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"name": name, "image": "ghcr.io/example/train:1", "resources": resources}


def template(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": list(containers) or [container()], **spec}}


_MANIFESTS: dict[str, dict[str, Any]] = {
    "Job": {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sweep"},
        "spec": {"parallelism": 4, "completions": 8, "template": template(
            container("2", "8Gi", 1), restartPolicy="Never")},
    },
    "JobSet": {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "llm-pretrain"},
        "spec": {"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": template(container("2", "4Gi"))}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {
                "parallelism": 2, "completions": 2, "backoffLimit": 0,
                "template": template(container("16", "128Gi", 8))}}},
        ]},
    },
    "PyTorchJob": {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "resnet-ddp"},
        "spec": {"pytorchReplicaSpecs": {
            "Worker": {"replicas": 3, "restartPolicy": "OnFailure",
                       "template": template(container("8", "64Gi", 4, name="pytorch"))},
            "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                       "template": template(container("8", "64Gi", 4, name="pytorch"))},
        }},
    },
    "TFJob": {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf-dist"},
        "spec": {"tfReplicaSpecs": {
            "PS": {"replicas": 1, "template": template(container("4", "16Gi", name="tensorflow"))},
            "Worker": {"replicas": 2,
                       "template": template(container("8", "32Gi", 2, name="tensorflow"))},
        }},
    },
    "XGBoostJob": {
        "apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "metadata": {"name": "xgb"},
        "spec": {"xgbReplicaSpecs": {
            "Master": {"replicas": 1, "template": template(container("2", "8Gi",
                                                                     name="xgboost"))},
            "Worker": {"replicas": 2, "template": template(container("4", "16Gi",
                                                                     name="xgboost"))},
        }},
    },
    "JAXJob": {
        "apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {"name": "jax"},
        "spec": {"jaxReplicaSpecs": {"Worker": {
            "replicas": 2, "template": template(container("8", "32Gi", 8, name="jax"))}}},
    },
    "PaddleJob": {
        "apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": {"name": "paddle"},
        "spec": {"paddleReplicaSpecs": {"Worker": {
            "replicas": 2, "template": template(container("4", "16Gi", 1, name="paddle"))}}},
    },
    "MPIJob": {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "mpi"},
        "spec": {"slotsPerWorker": 8, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": template(container("1", "2Gi"))},
            "Worker": {"replicas": 2, "template": template(container("32", "256Gi", 8))},
        }},
    },
    "TrainJob": {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "llama-ft"},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 2, "resourcesPerNode": {
                     "requests": {"cpu": "16", "memory": "128Gi"},
                     "limits": {"nvidia.com/gpu": "8"}}}},
    },
    "RayJob": {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "ray-tune"},
        "spec": {"entrypoint": "python tune.py", "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template(
                container("2", "8Gi", name="ray-head"))},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 1,
                                  "maxReplicas": 4, "rayStartParams": {},
                                  "template": template(container("8", "32Gi", 2,
                                                                 name="ray-worker"))}],
        }},
    },
    "RayCluster": {
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray-dev"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": template(
            container("2", "8Gi", name="ray-head"))},
            "workerGroupSpecs": [{"groupName": "tpu-like", "replicas": 1, "numOfHosts": 2,
                                  "rayStartParams": {},
                                  "template": template(container("4", "16Gi", 1,
                                                                 name="ray-worker"))}]},
    },
    "LeaderWorkerSet": {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {
            "size": 4,
            "leaderTemplate": template(container("8", "64Gi", 8, name="vllm-leader")),
            "workerTemplate": template(container("8", "64Gi", 8, name="vllm-worker")),
        }},
    },
    "Deployment": {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "infer"}},
                 "template": {"metadata": {"labels": {"app": "infer"}},
                              "spec": {"containers": [container("4", "16Gi", 1)]}}},
    },
    "StatefulSet": {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "triton"},
        "spec": {"replicas": 2, "serviceName": "triton",
                 "selector": {"matchLabels": {"app": "triton"}},
                 "template": {"metadata": {"labels": {"app": "triton"}},
                              "spec": {"containers": [container("4", "16Gi", 2)]}}},
    },
    "VolcanoJob": {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "vc"},
        "spec": {"minAvailable": 3, "schedulerName": "volcano", "tasks": [
            {"name": "ps", "replicas": 1, "template": template(container("2", "8Gi"))},
            {"name": "worker", "replicas": 2, "template": template(container("8", "32Gi", 4))},
        ]},
    },
}

# Hand-computed pod sets of each: (name, count, cpu, memory GiB, GPUs per pod).
EXPECTED: dict[str, list[tuple[str, int, str, str, int]]] = {
    "Job": [("main", 4, "2", "8", 1)],
    "JobSet": [("driver", 1, "2", "4", 0), ("workers", 4, "16", "128", 8)],
    "PyTorchJob": [("Master", 1, "8", "64", 4), ("Worker", 3, "8", "64", 4)],
    "TFJob": [("PS", 1, "4", "16", 0), ("Worker", 2, "8", "32", 2)],
    "XGBoostJob": [("Master", 1, "2", "8", 0), ("Worker", 2, "4", "16", 0)],
    "JAXJob": [("Worker", 2, "8", "32", 8)],
    "PaddleJob": [("Worker", 2, "4", "16", 1)],
    "MPIJob": [("Launcher", 1, "1", "2", 0), ("Worker", 2, "32", "256", 8)],
    "TrainJob": [("node", 2, "16", "128", 8)],
    # KubeRay's default submitter: 500m cpu, 200Mi memory (0.1953125 GiB, counted 0.196).
    "RayJob": [("head", 1, "2", "8", 0), ("gpu", 2, "8", "32", 2),
               ("submitter", 1, "0.5", "0.196", 0)],
    "RayCluster": [("head", 1, "2", "8", 0), ("tpu-like", 2, "4", "16", 1)],
    "LeaderWorkerSet": [("leader", 2, "8", "64", 8), ("workers", 6, "8", "64", 8)],
    "Deployment": [("replicas", 3, "4", "16", 1)],
    "StatefulSet": [("replicas", 2, "4", "16", 2)],
    "VolcanoJob": [("ps", 1, "2", "8", 0), ("worker", 2, "8", "32", 4)],
}


def manifest(name: str) -> dict[str, Any]:
    """A fresh copy of the manifest of `name` (a kind, or VolcanoJob)."""
    return copy.deepcopy(_MANIFESTS[name])


NAMES = sorted(_MANIFESTS)
