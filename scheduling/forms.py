"""The request-GPUs form: the workload's fields, then its pod sets (a formset, like the API's
`pods` list), labelled for people."""

from __future__ import annotations

import re
import shlex
from decimal import Decimal
from typing import Any

from django import forms
from django.core.validators import RegexValidator
from django.forms import formset_factory

from quotas.models import Flavor, Queue
from scheduling.models import PriorityClass
from scheduling.request import validation as limits

# The GPU models a request may name: CPU-only flavors (no GPU memory) are not GPU models; a
# CPU-only job goes through the API.
GPU_FLAVORS = Flavor.objects.filter(gpu_memory_gib__isnull=False)
# What a duration hint does for the start forecasts (docs/engine.md §13: the Philly replays,
# median error / wait with every run time given against without)
DURATION_HELP = ("Optional, and it makes start estimates right: yours and those of the work "
                 "queued behind you. On a replayed public cluster trace, the median error was "
                 "1-9% of the wait with every duration given, 12-48% without.")


class SchedulingFields(forms.Form):
    """How a request runs, the same on both tabs of the request page (fields, manifest):
    priority, preemption, checkpointing, placement, expected duration, dataset."""

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
    duration_h = forms.DecimalField(min_value=0, max_value=limits.MAX_DURATION_S // 3600,
                                    required=False, decimal_places=2,
                                    label="Expected duration (hours)",
                                    help_text=DURATION_HELP)
    dataset = forms.CharField(max_length=limits.MAX_DATASET, required=False)
    interactive = forms.BooleanField(
        required=False, label="Interactive session (notebook)",
        help_text="A JupyterLab or VS Code server: stopped when its GPUs stay idle for the "
                  "queue's idle limit, after a warning.")
    idle_timeout_min = forms.IntegerField(
        required=False, min_value=limits.MIN_IDLE_S // 60, max_value=limits.MAX_IDLE_S // 60,
        label="Idle limit (minutes)", help_text="A session's own, if shorter than the queue's.")
    time_limit_h = forms.DecimalField(
        required=False, min_value=Decimal("0.1"),  # 6 minutes: above the API's 300 s
        max_value=limits.MAX_DURATION_S // 3600, decimal_places=2,
        label="Time limit (hours)", help_text="A session stops after running this long; "
        "extend it from its page while the quota allows.")

    def scheduling_submission(self) -> dict[str, Any]:
        """These fields as the submission's keys (the API's JSON shape)."""
        d = self.cleaned_data
        hours = d.get("duration_h")
        return {
            "priority_class": d["priority_class"].name,
            "preemptible": bool(d.get("preemptible")), "checkpoint": bool(d.get("checkpoint")),
            "strategy": d.get("strategy") or "", "dataset": d.get("dataset") or "",
            "duration_hint_s": int(hours * 3600) if hours else None,
            "interactive": bool(d.get("interactive")),
            **({"idle_timeout_s": d["idle_timeout_min"] * 60}
               if d.get("idle_timeout_min") else {}),
            **({"time_limit_s": int(d["time_limit_h"] * 3600)}
               if d.get("time_limit_h") else {}),
        }


class WorkloadRequestForm(SchedulingFields):
    """What a researcher fills in to run a job; `as_submission()` is the API's JSON shape."""

    # The request's own fields first (errors are listed in this order), then the scheduling ones.
    field_order = ["queue", "name", "flavor_1", "flavor_2", "flavor_3"]

    queue = forms.ModelChoiceField(queryset=Queue.objects.none(), to_field_name="path",
                                   empty_label=None, help_text="A leaf queue of your team.")
    name = forms.CharField(
        max_length=limits.MAX_NAME, help_text="Lowercase letters, digits and '-'.",
        validators=[RegexValidator(
            f"^{limits.DNS_LABEL.pattern}$",
            "'%(value)s' is not DNS-safe: use at most "
            f"{limits.MAX_NAME} lowercase letters, digits and '-', starting and ending with a "
            "letter or digit")])
    flavor_1 = forms.ModelChoiceField(queryset=GPU_FLAVORS, to_field_name="name",
                                      label="GPU model (first choice)", empty_label=None)
    flavor_2 = forms.ModelChoiceField(queryset=GPU_FLAVORS, to_field_name="name",
                                      label="Second choice", required=False,
                                      empty_label="(none)")
    flavor_3 = forms.ModelChoiceField(queryset=GPU_FLAVORS, to_field_name="name",
                                      label="Third choice", required=False, empty_label="(none)")
    same_rack = forms.BooleanField(required=False, label="All pods in one rack")
    image = forms.CharField(max_length=limits.MAX_IMAGE, required=False)
    command = forms.CharField(max_length=2000, required=False,
                              help_text="As in a shell: python train.py --epochs 10")

    def __init__(self, *args: Any, queues: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if queues is not None:
            self.fields["queue"].queryset = queues  # type: ignore[attr-defined]

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

    def as_submission(self, pod_sets: list[dict[str, Any]]) -> dict[str, Any]:
        """The cleaned form and pod sets as the submission dict `workload_submit` and the API
        take (every pod set lists the same GPU models: a workload runs on one flavor)."""
        d = self.cleaned_data
        return {
            "name": d["name"], "queue": d["queue"].path, **self.scheduling_submission(),
            "image": d.get("image") or "", "command": d.get("command") or [],
            "topology": {"same": "rack"} if d.get("same_rack") else {},
            "pods": [{
                "count": p["count"], "flavors": self.flavors(), "gpus": p["gpus"],
                "cpu": p["cpu"], "memory_gib": p["memory_gib"],
                "gpu_memory_gib": p.get("gpu_memory_gib"), "resources": p.get("resources") or {},
            } for p in pod_sets],
        }


class PodSetForm(forms.Form):
    """One pod set: how many identical pods, and what each one needs."""

    count = forms.IntegerField(min_value=1, max_value=limits.MAX_PODS, initial=1, label="Pods")
    gpus = forms.DecimalField(min_value=0, max_value=limits.MAX_GPUS, initial=1,
                              decimal_places=limits.DECIMAL_PLACES, label="GPUs per pod",
                              help_text="Whole cards, or a share of one card such as 0.25.",
                              widget=forms.NumberInput(attrs={"step": "0.001"}))
    cpu = forms.DecimalField(min_value=0, max_value=limits.MAX_CPU, initial=8,
                             decimal_places=limits.DECIMAL_PLACES, label="CPU cores per pod")
    memory_gib = forms.DecimalField(min_value=0, max_value=limits.MAX_MEMORY_GIB, initial=64,
                                    decimal_places=limits.DECIMAL_PLACES,
                                    label="Memory per pod (GiB)")
    gpu_memory_gib = forms.IntegerField(min_value=1, max_value=limits.MAX_GPU_MEMORY_GIB,
                                        required=False,
                                        label="GPU memory per card (GiB, at least)",
                                        help_text="Empty: any. For a share of a card: the "
                                                  "memory it needs on that card.")

    resources = forms.CharField(
        max_length=2000, required=False, label="Other resources per pod",
        help_text="Any resource the GPU model's nodes advertise, as name=quantity, separated by "
                  "commas: nvidia.com/mig-1g.10gb=1, ephemeral-storage=100Gi",
        widget=forms.TextInput(attrs={"list": "advertised-resources", "autocomplete": "off",
                                      "spellcheck": "false"}))

    def clean_resources(self) -> dict[str, str]:
        """`name=quantity, ...` as the API's `resources` object, checked by the API's code."""
        raw = resource_text_parse(self.cleaned_data.get("resources") or "")
        errors: dict[str, list[str]] = {}
        limits.parse_resources(raw, "resources", errors)
        if errors:
            # Keys such as resources[nvidia.com/mig-1g.10gb] name the resource in the message.
            raise forms.ValidationError([
                (f"{key[len('resources['):-1]}: {m}" if key.startswith("resources[") else m)
                for key, messages in errors.items() for m in messages])
        return raw

    def clean_gpus(self) -> Decimal:
        errors: dict[str, list[str]] = {}
        value = limits.parse_gpus(self.cleaned_data["gpus"], "gpus", errors,
                                  maximum=limits.MAX_GPUS)
        if value is None:
            raise forms.ValidationError(errors["gpus"])
        return value


_RESOURCE_ITEM = re.compile(r"^\s*([^=:\s]+)\s*[=:]\s*(\S+)\s*$")


def resource_text_parse(text: str) -> dict[str, str]:
    """`nvidia.com/mig-1g.10gb=1, ephemeral-storage=100Gi` (commas or new lines; `:` for `=`
    too) as {name: quantity as typed}; raises ValidationError naming each bad item."""
    raw: dict[str, str] = {}
    problems: list[str] = []
    for item in re.split(r"[,;\n]", text):
        if not item.strip():
            continue
        match = _RESOURCE_ITEM.match(item)
        if match is None:
            problems.append(f"{item.strip()!r} is not name=quantity "
                            "(like nvidia.com/mig-1g.10gb=1)")
            continue
        name, quantity = match.groups()
        if name in raw:
            problems.append(f"{name}: listed twice")
            continue
        raw[name] = quantity
    if problems:
        raise forms.ValidationError(problems)
    return raw


POD_SETS_PREFIX = "pods"
# As many pod sets as the service takes.
MAX_FORM_POD_SETS = 8
_PodSetFormSetBase = formset_factory(
    PodSetForm, extra=0, min_num=1, validate_min=True, max_num=MAX_FORM_POD_SETS,
    validate_max=True, can_delete=True,
)


class PodSetFormSet(_PodSetFormSetBase):  # type: ignore[valid-type,misc]
    """The pod sets of a request (e.g. a launcher and its workers); rows marked for removal
    are left out."""

    def pod_sets(self) -> list[dict[str, Any]]:
        """The cleaned pod sets, in order, without those marked for removal."""
        return [f.cleaned_data for f in self.forms
                if f.cleaned_data and not f.cleaned_data.get("DELETE")]


def pod_set_formset(data: Any = None, *, add: bool = False) -> PodSetFormSet:
    """The formset for a page: bound to `data`; or, with `add`, unbound again with one more
    row (the rows as typed, so nothing shows errors before the user submits)."""
    if data is None:
        return PodSetFormSet(prefix=POD_SETS_PREFIX, initial=[{}])
    if not add:
        return PodSetFormSet(data, prefix=POD_SETS_PREFIX)
    try:
        total = int(data.get(f"{POD_SETS_PREFIX}-TOTAL_FORMS", 1))
    except (TypeError, ValueError):
        total = 1
    total = max(1, min(total, MAX_FORM_POD_SETS))
    rows: list[dict[str, Any]] = []
    for i in range(total):
        if data.get(f"{POD_SETS_PREFIX}-{i}-DELETE"):
            continue
        rows.append({name: data.get(f"{POD_SETS_PREFIX}-{i}-{name}")
                     for name in PodSetForm.base_fields
                     if data.get(f"{POD_SETS_PREFIX}-{i}-{name}") not in (None, "")})
    if len(rows) < MAX_FORM_POD_SETS:
        rows.append({})
    return PodSetFormSet(prefix=POD_SETS_PREFIX, initial=rows)


def form_initial_from(data: Any, form_class: type[forms.Form]) -> dict[str, Any]:
    """A form's values as typed, to show it again unbound (checkboxes absent = unticked)."""
    out: dict[str, Any] = {}
    for name, field in form_class.base_fields.items():
        if isinstance(field, forms.BooleanField):
            out[name] = bool(data.get(name))
        elif data.get(name) not in (None, ""):
            out[name] = data.get(name)
    return out


def submission_errors_to_form(form: forms.Form, errors: dict[str, list[str]],
                              pod_sets: Any = None) -> None:
    """Put the service's field errors on the form's fields; those of a pod set (API names such
    as pods[1].gpus) on that row of `pod_sets`."""
    # The rows `PodSetFormSet.pod_sets()` submitted, in the same order as the API's indexes.
    kept = ([f for f in pod_sets.forms if f.cleaned_data and not f.cleaned_data.get("DELETE")]
            if pod_sets is not None else [])
    for key, messages in errors.items():
        if key.startswith("pods[") and "]" in key:
            index, _, rest = key[5:].partition("]")
            name = rest.lstrip(".") or None
            row = kept[int(index)] if index.isdigit() and int(index) < len(kept) else None
            if name and name.startswith("resources["):
                name = "resources"
            if row is not None and name != "flavors":
                row.add_error(name if name in row.fields else None, messages)
                continue
            field = "flavor_1" if name == "flavors" else None
            form.add_error(field, [f"pod set {index}: {m}" for m in messages]
                           if field is None else messages)
            continue
        field = key
        if field == "flavors":
            field = "flavor_1"
        if field == "duration_hint_s":
            field = "duration_h"
        if field == "idle_timeout_s":
            field = "idle_timeout_min"
        if field == "time_limit_s":
            field = "time_limit_h"
        form.add_error(field if field in form.fields else None, messages)
