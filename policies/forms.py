"""Forms of the policy pages: the policy itself, and the "try it" sample."""

from __future__ import annotations

from typing import Any

import yaml
from django import forms

from .models import PolicyKind, PolicyMode
from .rules import ORDER_MAX, ORDER_MIN

SAMPLE = """request:
  queue: research/vision/detection
  team: vision
  flavors: [h100-80g]
  gpus: 8
  pods: 1
  priority_class: training
  labels: {}
queue: {path: research/vision/detection}
team: {name: vision, approvals: []}
cost_center: {name: cc-research, currency: EUR, budget: 10000.0, spent: 2500.0}
fleet:
  utilisation: {a100-80g: 0.3, h100-80g: 0.5}
  clusters: [{name: sh-onprem, region: cn-east}, {name: bj-onprem, region: cn-north}]
"""

CEL = {"rows": 3, "spellcheck": "false", "autocapitalize": "off", "class": "code"}


class PolicyForm(forms.Form):
    """A policy's fields; the service checks the CEL (errors come back with positions)."""

    name = forms.SlugField(max_length=100)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    kind = forms.ChoiceField(choices=PolicyKind.choices)
    mode = forms.ChoiceField(choices=PolicyMode.choices, initial=PolicyMode.AUDIT)
    scope = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Queue subtrees, one path per line; empty = everywhere (a canary: one subtree).",
    )
    order = forms.IntegerField(
        initial=100, min_value=ORDER_MIN, max_value=ORDER_MAX,
        help_text=f"Lower runs first ({ORDER_MIN} to {ORDER_MAX}); first priority wins.")
    key = forms.CharField(required=False, help_text="limit only: the key it caps, a100-80g/gpu.")
    match = forms.CharField(initial="true", widget=forms.Textarea(attrs=CEL),
                            help_text="CEL bool: which requests (or queues) it applies to.")
    rule = forms.CharField(widget=forms.Textarea(attrs=CEL), help_text=(
        "CEL: bool (validate), number (limit), list of cluster or region names (placement), "
        "priority class name (priority)."))
    message = forms.CharField(required=False, widget=forms.Textarea(attrs=CEL), help_text=(
        'CEL string shown on a denial; name the numbers: "asked " + string(request.gpus)'))
    comment = forms.CharField(required=False, max_length=300,
                              help_text="Why this change (kept with the version).")

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            self.fields["name"].disabled = True

    def clean_scope(self) -> list[str]:
        text = self.cleaned_data.get("scope") or ""
        return [line.strip().strip("/") for line in text.replace(",", "\n").splitlines()
                if line.strip()]

    def definition(self) -> dict[str, Any]:
        """The policy fields (without the comment) from cleaned data."""
        return {k: v for k, v in self.cleaned_data.items() if k != "comment"}


class TryForm(forms.Form):
    """A sample context in YAML (or JSON); fields left out are neutral."""

    sample = forms.CharField(initial=SAMPLE, widget=forms.Textarea(attrs={**CEL, "rows": 14}))

    def clean_sample(self) -> dict[str, Any]:
        try:
            value = yaml.safe_load(self.cleaned_data["sample"] or "{}") or {}
        except yaml.YAMLError as exc:
            raise forms.ValidationError(f"not YAML: {exc}") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("the sample must be a mapping (request:, team:, ...)")
        return value
