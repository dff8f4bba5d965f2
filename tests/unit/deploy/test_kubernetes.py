"""The Kubernetes manifests (deploy/kubernetes/): rendered as `kubectl kustomize` does, valid
against the Kubernetes API schemas, hardened pods, references that resolve, probes on the
portal's health endpoints, and settings the portal reads (with which `check --deploy` is
clean)."""

from __future__ import annotations

import copy
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from portal.health import HEALTHZ, READYZ

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("base", "trial", "member-cluster")
# The oldest Kubernetes the manifests are for (the pre-stop `sleep` action) and the newest
# whose schemas kubernetes-validate ships.
VERSIONS = ("1.30.0", "1.37.0")
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
WORKLOADS = {"Deployment", "StatefulSet", "Job"}
# Made by the operator, not by the manifests (docs/operations.md, "Install").
MADE_BY_HAND = {"allot-secrets", "allot-trial-postgres", "allot-kubeconfigs", "allot-tls"}
APP_UID = 10001  # the Dockerfile's USER


# --- rendering: the part of kustomize these folders use ---------------------------------------

def render(folder: Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize folder` prints (resources, namespace, images)."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(spec) - {"apiVersion", "kind", "namespace", "resources", "images"}
    assert not unknown, f"{folder.name}: kustomize features this test does not render: {unknown}"
    objects: list[dict[str, Any]] = []
    for resource in spec["resources"]:
        path = folder / resource
        if path.is_dir():
            objects += render(path)
        else:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    if spec.get("namespace"):
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
    for image in spec.get("images", []):
        for container in containers(objects):
            if container["image"] == image["name"]:
                container["image"] = f"{image['newName']}:{image['newTag']}"
    return objects


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in WORKLOADS]


def containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for o in workloads(objects) for c in
            [*pod_spec(o).get("initContainers", []), *pod_spec(o)["containers"]]]


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in pod_spec(obj)["containers"] if c["name"] == name]
    return found


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {overlay: render(DEPLOY / overlay) for overlay in OVERLAYS}


# --- the tests ----------------------------------------------------------------------------------

def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubectl_kustomize_renders_the_same_objects(overlay, rendered):
    done = subprocess.run(["kubectl", "kustomize", str(DEPLOY / overlay)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    theirs = sorted((d for d in yaml.safe_load_all(done.stdout) if d), key=_key)
    assert theirs == sorted(rendered[overlay], key=_key)


def test_every_manifest_is_listed_in_its_kustomization():
    for overlay in OVERLAYS:
        folder = DEPLOY / overlay
        listed = set(yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"])
        files = {p.name for p in folder.glob("*.yaml")} - {
            "kustomization.yaml", "secret.example.yaml"}
        assert files <= listed, f"{overlay}: not applied: {sorted(files - listed)}"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_valid_against_the_kubernetes_schemas(version, rendered):
    objects = [*rendered["trial"], *rendered["member-cluster"],
               yaml.safe_load((DEPLOY / "base" / "secret.example.yaml").read_text())]
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{_key(obj)} on Kubernetes {version}: {error.message} at "
                        f"{'.'.join(str(p) for p in error.path)}")
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "StatefulSet", "Job", "Service", "Ingress", "ConfigMap", "Secret",
            "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Namespace",
            "PodDisruptionBudget"} <= kinds


def test_the_base_runs_web_workers_one_beat_and_the_migration(rendered):
    base = rendered["base"]
    assert sorted(_key(o) for o in workloads(base)) == [
        ("Deployment", "allot", "allot-beat"), ("Deployment", "allot", "allot-web"),
        ("Deployment", "allot", "allot-worker"), ("Job", "allot", "allot-migrate")]
    web = named(base, "Deployment", "allot-web")
    assert "command" not in container(web, "web") and "args" not in container(web, "web"), (
        "the web container runs the image's command: gunicorn with gunicorn.conf.py")
    assert web["spec"]["replicas"] >= 2
    assert web["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    worker = named(base, "Deployment", "allot-worker")
    assert container(worker, "worker")["command"][:4] == ["celery", "-A", "portal", "worker"]
    beat = named(base, "Deployment", "allot-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}  # never two beats at once
    command = container(beat, "beat")["command"]
    assert command[:4] == ["celery", "-A", "portal", "beat"]
    schedule = command[command.index("--schedule") + 1]
    mounts = {m["mountPath"] for m in container(beat, "beat")["volumeMounts"]}
    assert any(schedule.startswith(f"{m}/") for m in mounts), "the beat's schedule is read-only"
    migrate = named(base, "Job", "allot-migrate")
    assert container(migrate, "migrate")["command"] == [
        "python", "manage.py", "migrate", "--noinput"]
    for deployment in (web, worker, beat):
        (init,) = pod_spec(deployment)["initContainers"]
        assert "python manage.py migrate --check" in init["command"][-1], deployment


def test_the_web_probes_are_the_health_endpoints(rendered):
    web = container(named(rendered["base"], "Deployment", "allot-web"), "web")
    assert web["readinessProbe"]["httpGet"]["path"] == READYZ
    assert web["livenessProbe"]["httpGet"]["path"] == HEALTHZ
    assert web["startupProbe"]["httpGet"]["path"] == HEALTHZ
    ports = {p["name"]: p["containerPort"] for p in web["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert web[probe]["httpGet"]["port"] in ports
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(rf"^EXPOSE {ports['http']}$", dockerfile, re.M)
    assert f"GUNICORN_BIND=0.0.0.0:{ports['http']}" in dockerfile


def test_every_pod_is_hardened(rendered):
    for obj in workloads(rendered["trial"]):
        spec, where = pod_spec(obj), obj["metadata"]["name"]
        context = spec["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] > 0, where
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec["automountServiceAccountToken"] is False, where
        volumes = {v["name"] for v in spec.get("volumes", [])} | {
            t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            at = f"{where}/{c['name']}"
            assert c["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}, at
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), at
            repository, _, tag = c["image"].rpartition(":")
            assert repository and tag and tag != "latest" and "/" not in tag, at
            assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes, at
            if repository.endswith("/allot"):
                assert context["runAsUser"] == APP_UID, at
                # Python and gunicorn write only temporary files: /tmp is writable.
                assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, at


def test_every_reference_resolves(rendered):
    objects = rendered["trial"]
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for obj in workloads(objects):
        spec, where = pod_spec(obj), obj["metadata"]["name"]
        if "serviceAccountName" in spec:
            assert ("ServiceAccount", spec["serviceAccountName"]) in names, where
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            for source in c.get("envFrom", []):
                for kind, ref in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if ref in source:
                        name = source[ref]["name"]
                        assert (kind, name) in names or name in MADE_BY_HAND, (where, name)
            for env in c.get("env", []):
                if "valueFrom" in env:
                    assert env["valueFrom"]["secretKeyRef"]["name"] in MADE_BY_HAND, where
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in MADE_BY_HAND, where
    for service in (o for o in objects if o["kind"] == "Service"):
        selector = service["spec"]["selector"]
        matches = [o for o in workloads(objects)
                   if selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()]
        assert len(matches) == 1, service["metadata"]["name"]
        ports = {p["name"] for c in pod_spec(matches[0])["containers"] for p in c["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, service["metadata"]["name"]
    for obj in workloads(objects):
        selector = obj["spec"]["selector"]["matchLabels"] if obj["kind"] != "Job" else {}
        assert selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items()
    ingress = named(objects, "Ingress", "allot")
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            service = named(objects, "Service", backend["name"])
            assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    budget = named(objects, "PodDisruptionBudget", "allot-web")
    assert budget["spec"]["selector"]["matchLabels"] == named(
        objects, "Deployment", "allot-web")["spec"]["selector"]["matchLabels"]


def _settings_env(rendered) -> dict[str, str]:
    config = named(rendered["base"], "ConfigMap", "allot-settings")["data"]
    secret = yaml.safe_load((DEPLOY / "base" / "secret.example.yaml").read_text())["stringData"]
    return {**config, **secret}


def test_every_setting_in_the_manifests_is_one_the_portal_reads(rendered):
    read = (ROOT / "portal" / "settings.py").read_text() + (ROOT / "gunicorn.conf.py").read_text()
    for name in _settings_env(rendered):
        assert f'"{name}"' in read, f"{name} is not read by portal/settings.py or gunicorn.conf.py"


def test_check_deploy_is_clean_with_the_manifests_settings(rendered):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEBUG", "REDIS_URL", "PASSWORD_HASHERS", "DJANGO_ALLOW_ASYNC_UNSAFE")
           and not k.startswith(("SECURE_", "SESSION_", "CSRF_", "ALLOT_"))}
    env.update(_settings_env(rendered))
    env.update({"DJANGO_SETTINGS_MODULE": "portal.settings",
                "SECRET_KEY": secrets.token_urlsafe(50)})
    done = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level",
                           "WARNING"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "System check identified no issues (0 silenced)."


def test_the_trial_services_are_the_hosts_the_examples_name(rendered):
    trial = rendered["trial"]
    for service, port in (("allot-postgres", 5432), ("allot-redis", 6379)):
        assert [p["port"] for p in named(trial, "Service", service)["spec"]["ports"]] == [port]
        text = (DEPLOY / "trial" / f"{service.removeprefix('allot-')}.yaml").read_text()
        assert f"@{service}:{port}/" in text or f"//{service}:{port}/" in text
    # No copy of the base is changed by the overlay: the trial adds, it does not patch.
    base = {_key(o): o for o in rendered["base"]}
    assert all(copy.deepcopy(o) == base[_key(o)] for o in trial if _key(o) in base)
