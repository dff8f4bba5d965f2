"""The request form's "from a manifest" tab: a Kubernetes manifest pasted or uploaded as YAML
(or JSON), with the submission's usual scheduling fields; `as_submission()` is the API's JSON
shape (`manifest` instead of `pods`, `image`, `command`)."""

from __future__ import annotations

from typing import Any

import yaml
from django import forms

from quotas.models import Flavor, Queue
from scheduling import kinds
from scheduling.forms import SchedulingFields
from scheduling.request import validation as limits
from scheduling.request.manifests import derived_pods_data, gang_manifests, validate_manifest


class ManifestRequestForm(SchedulingFields):
    """A manifest and where and how it runs; `derived` holds its pod sets once valid."""

    field_order = ["queue", "name", "manifest_text", "manifest_file", "flavor_1"]

    queue = forms.ModelChoiceField(queryset=Queue.objects.none(), to_field_name="path",
                                   empty_label=None, help_text="A leaf queue of your team.")
    name = forms.CharField(max_length=limits.MAX_NAME, required=False,
                           help_text="Empty: the manifest's metadata.name.")
    manifest_text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false",
                                     "class": "mono"}),
        required=False, label="Manifest (YAML)",
        help_text="A Job, JobSet, PyTorchJob, TFJob, XGBoostJob, JAXJob, PaddleJob, MPIJob, "
                  "TrainJob, RayJob, RayCluster, LeaderWorkerSet, Deployment, StatefulSet or "
                  "Volcano Job.")
    manifest_file = forms.FileField(required=False, label="Or upload a file",
                                    help_text="YAML or JSON; it replaces the text above.")
    flavor_1 = forms.ModelChoiceField(queryset=Flavor.objects.all(), to_field_name="name",
                                      label="GPU model", required=False,
                                      empty_label="any its nodeSelector allows")
    def __init__(self, *args: Any, queues: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if queues is not None:
            self.fields["queue"].queryset = queues  # type: ignore[attr-defined]
        self.derived: list[dict[str, Any]] = []
        self.kind = ""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upload = data.get("manifest_file")
        text = data.get("manifest_text") or ""
        if upload is not None:
            if upload.size > kinds.MAX_MANIFEST_BYTES:
                self.add_error("manifest_file", f"{upload.size} bytes > "
                               f"{kinds.MAX_MANIFEST_BYTES}: too large")
                return data
            text = upload.read().decode("utf-8", errors="replace")
        if not text.strip():
            self.add_error("manifest_text", "paste a manifest or upload one")
            return data
        try:
            manifest = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
            self.add_error("manifest_text", f"not YAML{at}: {getattr(exc, 'problem', exc)}")
            return data
        if not isinstance(manifest, dict):
            self.add_error("manifest_text", "expected one object (a mapping), e.g. "
                           "apiVersion: kubeflow.org/v1, kind: PyTorchJob, ...")
            return data
        data["manifest"] = manifest
        flavor = data.get("flavor_1")
        errors: dict[str, list[str]] = {}
        known = {f.name: f for f in Flavor.objects.order_by("name")}
        out = validate_manifest({"manifest": manifest, **(
            {"flavors": [flavor.name]} if flavor is not None else {})}, known, errors, limits={
            "pod_sets": limits.MAX_POD_SETS, "pods": limits.MAX_PODS, "gpus": limits.MAX_GPUS,
            "cpu": limits.MAX_CPU, "memory_gib": limits.MAX_MEMORY_GIB})
        for key, messages in errors.items():
            field = "flavor_1" if key == "flavors" else "manifest_text"
            self.add_error(field, [m if key in ("manifest", "flavors") else f"{key}: {m}"
                                   for m in messages])
        if not errors:
            self.derived = derived_pods_data(out["derived"])
            self.kind = out["kind"]
            data["pods"] = out["pods"]
        return data

    def as_submission(self) -> dict[str, Any]:
        """The cleaned form as the submission dict `workload_submit` and the API take."""
        d = self.cleaned_data
        submission: dict[str, Any] = {"queue": d["queue"].path, "manifest": d["manifest"],
                                      **self.scheduling_submission()}
        if d.get("name"):
            submission["name"] = d["name"]
        if d.get("flavor_1") is not None:
            submission["flavors"] = [d["flavor_1"].name]
        return submission

    def preview_submission(self) -> dict[str, Any]:
        """What the live preview reads: the submission with its derived pod sets (one
        group's, for a kind whose groups are workloads of their own: a LeaderWorkerSet)."""
        d = self.cleaned_data
        meta = d["manifest"].get("metadata") or {}
        _, pods = gang_manifests(self.kind, d["manifest"], d["pods"])[0]
        return {**self.as_submission(), "name": d.get("name") or meta.get("name") or "draft",
                "topology": {}, "pods": pods}
