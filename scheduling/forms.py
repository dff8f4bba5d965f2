"""The request-GPUs form: one pod set (the API takes several), its fields labelled for people."""

from __future__ import annotations

import shlex
from typing import Any

from django import forms

from quotas.models import Flavor, Queue
from scheduling.models import PriorityClass


class WorkloadRequestForm(forms.Form):
    """What a researcher fills in to run a job; `as_submission()` is the API's JSON shape."""

    queue = forms.ModelChoiceField(queryset=Queue.objects.none(), to_field_name="path",
                                   empty_label=None, help_text="A leaf queue of your team.")
    name = forms.CharField(max_length=63, help_text="Lowercase letters, digits and '-'.")
    flavor_1 = forms.ModelChoiceField(queryset=Flavor.objects.all(), to_field_name="name",
                                      label="GPU model (first choice)", empty_label=None)
    flavor_2 = forms.ModelChoiceField(queryset=Flavor.objects.all(), to_field_name="name",
                                      label="Second choice", required=False,
                                      empty_label="(none)")
    flavor_3 = forms.ModelChoiceField(queryset=Flavor.objects.all(), to_field_name="name",
                                      label="Third choice", required=False, empty_label="(none)")
    count = forms.IntegerField(min_value=1, max_value=10000, initial=1, label="Pods")
    gpus = forms.IntegerField(min_value=0, max_value=64, initial=1, label="GPUs per pod")
    cpu = forms.DecimalField(min_value=0, initial=8, decimal_places=3, label="CPU cores per pod")
    memory_gib = forms.DecimalField(min_value=0, initial=64, decimal_places=3,
                                    label="Memory per pod (GiB)")
    gpu_memory_gib = forms.IntegerField(min_value=1, required=False,
                                        label="GPU memory per card (GiB, at least)",
                                        help_text="Empty: any.")
    priority_class = forms.ModelChoiceField(queryset=PriorityClass.objects.all(),
                                            to_field_name="name", empty_label=None,
                                            initial="training")
    preemptible = forms.BooleanField(required=False, initial=True,
                                     help_text="May run on borrowed capacity and be preempted.")
    checkpoint = forms.BooleanField(required=False, initial=True,
                                    help_text="Saves progress when preempted.")
    strategy = forms.ChoiceField(choices=[("", "queue default"), ("binpack", "binpack"),
                                          ("spread", "spread")], required=False,
                                 label="Placement strategy")
    same_rack = forms.BooleanField(required=False, label="All pods in one rack")
    dataset = forms.CharField(max_length=200, required=False)
    duration_h = forms.DecimalField(min_value=0, required=False, decimal_places=2,
                                    label="Expected duration (hours)")
    image = forms.CharField(max_length=500, required=False)
    command = forms.CharField(max_length=2000, required=False,
                              help_text="As in a shell: python train.py --epochs 10")

    def __init__(self, *args: Any, queues: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if queues is not None:
            self.fields["queue"].queryset = queues

    def clean_command(self) -> list[str]:
        try:
            return shlex.split(self.cleaned_data.get("command") or "")
        except ValueError as exc:
            raise forms.ValidationError(f"cannot split the command: {exc}") from exc

    def flavors(self) -> list[str]:
        names: list[str] = []
        for field in ("flavor_1", "flavor_2", "flavor_3"):
            flavor = self.cleaned_data.get(field)
            if flavor is not None and flavor.name not in names:
                names.append(flavor.name)
        return names

    def as_submission(self) -> dict[str, Any]:
        """The cleaned form as the submission dict `workload_submit` and the API take."""
        d = self.cleaned_data
        hours = d.get("duration_h")
        return {
            "name": d["name"], "queue": d["queue"].path,
            "priority_class": d["priority_class"].name,
            "preemptible": bool(d.get("preemptible")), "checkpoint": bool(d.get("checkpoint")),
            "strategy": d.get("strategy") or "", "dataset": d.get("dataset") or "",
            "image": d.get("image") or "", "command": d.get("command") or [],
            "duration_hint_s": int(hours * 3600) if hours else None,
            "topology": {"same": "rack"} if d.get("same_rack") else {},
            "pods": [{
                "count": d["count"], "flavors": self.flavors(), "gpus": d["gpus"],
                "cpu": d["cpu"], "memory_gib": d["memory_gib"],
                "gpu_memory_gib": d.get("gpu_memory_gib"),
            }],
        }


def submission_errors_to_form(form: forms.Form, errors: dict[str, list[str]]) -> None:
    """Put the service's field errors (API names such as pods[0].gpus) on the form's fields."""
    for key, messages in errors.items():
        field = key.rsplit(".", 1)[-1] if key.startswith("pods[") else key
        if field == "flavors":
            field = "flavor_1"
        if field == "duration_hint_s":
            field = "duration_h"
        form.add_error(field if field in form.fields else None, messages)
