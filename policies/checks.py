"""Whether a policy definition may be saved (or tried): its fields and CEL checked
(`specs.check_fields`), then the cost of its expressions measured on the fleet as it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from .celexpr import trial_evaluate
from .specs import check_fields
from .variables import fleet_variables, sample_variables


def definition_errors(definition: Mapping[str, Any]) -> dict[str, list[str]]:
    """A (normalised) definition's field errors; when there are none, each expression is
    evaluated on a sample request with the current fleet, in a child process given
    ALLOT_POLICY_EVAL_BUDGET_MS: one that takes longer, or crashes the CEL library, is an
    error of its field."""
    errors = check_fields(definition)
    if errors:
        return errors
    variables = {**sample_variables(), "fleet": fleet_variables()}
    budget_s = settings.ALLOT_POLICY_EVAL_BUDGET_MS / 1000
    for name in ("match", "rule", "message"):
        problem = trial_evaluate([str(definition.get(name) or "")], variables, budget_s)
        if problem:
            errors[name] = [f"refused: {problem} on a sample request with the current fleet "
                            "(fewer or smaller comprehensions?)"]
    return errors
