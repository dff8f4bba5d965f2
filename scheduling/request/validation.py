"""A submission's input checked field by field: names, numbers, pod sets, labels, with every
problem named (the API and the form show them per field).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError

from core.labels import labels_problems
from core.quantity import QuantityError, read_amount, resource_name_problem, to_base
from scheduling.kinds.sharing import GPU_STEP
from scheduling.kinds.sharing import gpus_shown as gpus_shown  # (importers' name)
from scheduling.request.lookups import SubmitLookups
from scheduling.request.manifests import manifest_name, validate_manifest

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


# A submission's limits, checked here and shown by the form and the API schema (which read
# these): Kubernetes' DNS label length, the largest node's GPUs, a gang's pods.
MAX_NAME = 63
MAX_POD_SETS = 8
MAX_PODS = 10000  # pods in one pod set
MAX_GPUS = 64  # GPUs per pod
MAX_GRACE_S = 3600
MAX_IMAGE = 500
MAX_DATASET = 200
MAX_LABEL_VALUE = 63
MAX_DURATION_S = 366 * 86400  # an expected duration hint: at most a year
MIN_IDLE_S, MAX_IDLE_S = 300, 7 * 86400  # an interactive session's own idle limit
MIN_TIME_LIMIT_S = 300  # an interactive session's time limit
MAX_GPU_MEMORY_GIB = 1024  # per card
MAX_CPU = Decimal(4096)  # cores per pod
MAX_MEMORY_GIB = Decimal(65536)  # per pod
DECIMAL_PLACES = 3  # cpu and memory are stored to the thousandth

STRATEGIES = ("", "binpack", "spread")
DEFAULT_PRIORITY_CLASS = "training"
DEFAULT_GRACE_S = 30


def _decimal(value: Any, field: str, errors: dict[str, list[str]], *,
             maximum: Decimal, resource: str = "") -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        errors.setdefault(field, []).append(f"{value!r} is not a number")
        return None
    if resource and isinstance(value, str) and value.strip() and value.strip()[-1].isalpha():
        try:  # a Kubernetes quantity: `500m` cores, `4G` of memory (in GiB)
            value = read_amount(resource, value)
        except QuantityError as exc:
            errors.setdefault(field, []).append(str(exc))
            return None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        errors.setdefault(field, []).append(f"{value!r} is not a number")
        return None
    if not number.is_finite():
        errors.setdefault(field, []).append(f"{value!r} is not a finite number")
        return None
    if number > maximum:
        errors.setdefault(field, []).append(f"{number} > {maximum}: must be at most {maximum}")
        return None
    if number != number.quantize(Decimal(1).scaleb(-DECIMAL_PLACES)):
        errors.setdefault(field, []).append(
            f"{number} has more than {DECIMAL_PLACES} decimal places")
        return None
    return number


def parse_gpus(value: Any, field: str, errors: dict[str, list[str]], *,
               maximum: int) -> Decimal | None:
    """GPUs per pod: a whole number of cards, or a fraction 0 < f < 1 of one card in steps of
    0.001 (QUOTA-SEMANTICS §10), kept exactly."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        errors.setdefault(field, []).append(
            f"{value!r} is not a number: a whole number of cards, or a fraction such as 0.25")
        return None
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        errors.setdefault(field, []).append(
            f"{value!r} is not a number: a whole number of cards, or a fraction such as 0.25")
        return None
    if not number.is_finite():
        errors.setdefault(field, []).append(f"{value!r} is not a finite number")
        return None
    if number < 0:
        errors.setdefault(field, []).append(f"{number} < 0: must not be negative")
        return None
    if number > maximum:
        errors.setdefault(field, []).append(f"{number} > {maximum}: must be at most {maximum}")
        return None
    if number >= 1 and number != number.to_integral_value():
        errors.setdefault(field, []).append(
            f"{number}: more than one card is a whole number of cards (a fraction is of one "
            "card, 0 < gpus < 1)")
        return None
    if number != number.quantize(GPU_STEP):
        errors.setdefault(field, []).append(
            f"{number}: a fraction of a card is in steps of 0.001 (0.001 to 0.999)")
        return None
    return number.quantize(GPU_STEP) if number < 1 else Decimal(int(number))


def _int(value: Any, field: str, errors: dict[str, list[str]], *, minimum: int = 0,
         maximum: int | None = None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        errors.setdefault(field, []).append(f"{value!r} is not a whole number")
        return None
    try:
        number = int(value)
    except ValueError:
        errors.setdefault(field, []).append(f"{value!r} is not a whole number")
        return None
    if number < minimum:
        errors.setdefault(field, []).append(f"{number} < {minimum}: must be at least {minimum}")
        return None
    if maximum is not None and number > maximum:
        errors.setdefault(field, []).append(f"{number} > {maximum}: must be at most {maximum}")
        return None
    return number


# Resources with fields of their own: a pod asks for them there, not in `resources`.
OWN_RESOURCES = frozenset({"gpu", "cpu", "memory", "nvidia.com/gpu"})
MAX_RESOURCES = 16  # extended resources per pod set


def parse_resources(raw: Any, field: str, errors: dict[str, list[str]]) -> dict[str, int]:
    """A pod's extended resources (`{"nvidia.com/mig-1g.10gb": 1}`; Kubernetes quantities
    such as `"500m"` or `"10Gi"` too), as exact integers of each one's base unit."""
    if raw is None or raw == {}:
        return {}
    if not isinstance(raw, Mapping):
        errors.setdefault(field, []).append(
            "must be an object of resource names and quantities, e.g. "
            '{"nvidia.com/mig-1g.10gb": 1}')
        return {}
    if len(raw) > MAX_RESOURCES:
        errors.setdefault(field, []).append(f"{len(raw)} resources > {MAX_RESOURCES}")
        return {}
    out: dict[str, int] = {}
    for name, value in raw.items():
        problem = resource_name_problem(name)
        if problem:
            errors.setdefault(field, []).append(problem)
            continue
        if name in OWN_RESOURCES:
            errors.setdefault(field, []).append(
                f"{name}: has a field of its own (gpus, cpu, memory_gib)")
            continue
        try:
            base = to_base(name, value)
        except QuantityError as exc:
            errors.setdefault(f"{field}[{name}]", []).append(str(exc))
            continue
        if base:
            out[name] = base
    return out


def _validate(user: Any, data: Mapping[str, Any], lk: SubmitLookups) -> dict[str, Any]:
    """Check a submission's fields; raise ValidationError naming every bad field at once."""
    errors: dict[str, list[str]] = {}
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["expected a JSON object"]})
    clean: dict[str, Any] = {}
    from_manifest = data.get("manifest") is not None

    name = data.get("name")
    if from_manifest and not name:
        name = manifest_name(data["manifest"])
    if not isinstance(name, str) or not name:
        errors["name"] = ["required: a DNS-safe name (lowercase letters, digits, '-')"]
    elif not DNS_LABEL.fullmatch(name):
        errors["name"] = [f"{name!r} is not DNS-safe: use at most {MAX_NAME} lowercase letters, "
                          "digits and '-', starting and ending with a letter or digit"]
    clean["name"] = name

    queue_path = data.get("queue")
    queue = None
    if not isinstance(queue_path, str) or not queue_path:
        errors["queue"] = ["required: the path of a leaf queue, e.g. rd/vision"]
    else:
        queue = lk.queue(queue_path)
        if queue is None:
            errors["queue"] = [f"unknown queue {queue_path!r}"]
        elif not lk.is_leaf(queue):
            errors["queue"] = [f"{queue_path} is not a leaf queue: submit to one of its leaves"]
        elif not lk.may_use(queue):
            errors["queue"] = [f"none of your teams may use queue {queue_path}"]
    clean["queue"] = queue

    pc_name = data.get("priority_class") or DEFAULT_PRIORITY_CLASS
    pc = lk.classes.get(pc_name) if isinstance(pc_name, str) else None
    if pc is None:
        known = ", ".join(sorted(lk.classes, key=lambda n: -lk.classes[n].value))
        errors["priority_class"] = [f"unknown priority class {pc_name!r} (one of {known})"]
    clean["priority_class"] = pc

    for flag, default in (("preemptible", True), ("checkpoint", True)):
        value = data.get(flag, default)
        if not isinstance(value, bool):
            errors[flag] = [f"{value!r} is not true or false"]
        clean[flag] = value

    strategy = data.get("strategy") or ""
    if strategy not in STRATEGIES:
        errors["strategy"] = [f"{strategy!r} is not a strategy (binpack or spread)"]
    clean["strategy"] = strategy

    for text_field, limit in (("image", MAX_IMAGE), ("dataset", MAX_DATASET)):
        value = data.get(text_field) or ""
        if not isinstance(value, str) or len(value) > limit or "\x00" in value:
            errors[text_field] = [f"must be text of at most {limit} characters (no NUL)"]
        clean[text_field] = value

    command = data.get("command") or []
    if not isinstance(command, list) or not all(
        isinstance(c, str) and "\x00" not in c for c in command
    ):
        errors["command"] = ["must be a list of strings (no NUL characters)"]
    clean["command"] = command

    clean["duration_hint_s"] = None
    if data.get("duration_hint_s") is not None:
        clean["duration_hint_s"] = _int(data["duration_hint_s"], "duration_hint_s", errors,
                                        minimum=1, maximum=MAX_DURATION_S)
    clean["termination_grace_s"] = DEFAULT_GRACE_S
    if data.get("termination_grace_s") is not None:
        clean["termination_grace_s"] = _int(data["termination_grace_s"], "termination_grace_s",
                                            errors, minimum=0, maximum=MAX_GRACE_S)

    interactive = data.get("interactive", False)
    if not isinstance(interactive, bool):
        errors["interactive"] = [f"{interactive!r} is not true or false"]
    clean["interactive"] = interactive is True
    clean["idle_timeout_s"] = None
    if data.get("idle_timeout_s") is not None:
        if interactive is not True:
            errors["idle_timeout_s"] = ["only an interactive session (interactive: true) has "
                                        "an idle limit"]
        else:
            clean["idle_timeout_s"] = _int(data["idle_timeout_s"], "idle_timeout_s", errors,
                                           minimum=MIN_IDLE_S, maximum=MAX_IDLE_S)
    clean["time_limit_s"] = None
    if data.get("time_limit_s") is not None:
        if interactive is not True:
            errors["time_limit_s"] = ["only an interactive session (interactive: true) has "
                                      "a time limit"]
        else:
            clean["time_limit_s"] = _int(data["time_limit_s"], "time_limit_s", errors,
                                         minimum=MIN_TIME_LIMIT_S, maximum=MAX_DURATION_S)

    topology = data.get("topology") or {}
    if not isinstance(topology, Mapping) or set(topology) - {"same"} or (
        topology and topology.get("same") != "rack"
    ):
        errors["topology"] = [f"{topology!r}: only {{\"same\": \"rack\"}} is supported"]
    clean["topology"] = dict(topology) if isinstance(topology, Mapping) else {}

    labels = data.get("labels") or {}
    problems = labels_problems(labels)
    if problems:
        errors["labels"] = problems
    clean["labels"] = dict(labels) if isinstance(labels, Mapping) else {}

    if from_manifest:
        clean.update(validate_manifest(data, lk.flavors, errors, limits={
            "pod_sets": MAX_POD_SETS, "pods": MAX_PODS, "gpus": MAX_GPUS, "cpu": MAX_CPU,
            "memory_gib": MAX_MEMORY_GIB}))
    else:
        clean["kind"], clean["manifest"] = "", {}
        clean["pods"] = _validate_pods(data.get("pods"), lk.flavors, errors)
    if errors:
        raise ValidationError(errors)
    return clean


def _validate_pods(pods: Any, known_flavors: Mapping[str, Any],
                   errors: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The pod sets, each checked field by field; every pod set lists the same flavors."""
    clean_pods: list[dict[str, Any]] = []
    if not isinstance(pods, list) or not pods:
        errors["pods"] = ["required: a list of pod sets, e.g. [{\"count\": 1, \"flavors\": "
                          "[\"a100-80g\"], \"gpus\": 8}]"]
    elif len(pods) > MAX_POD_SETS:
        errors["pods"] = [f"{len(pods)} pod sets > {MAX_POD_SETS}"]
    else:
        for i, pod in enumerate(pods):
            where = f"pods[{i}]"
            if not isinstance(pod, Mapping):
                errors.setdefault("pods", []).append(f"{where}: expected an object")
                continue
            count = _int(pod.get("count", 1), f"{where}.count", errors, minimum=1,
                         maximum=MAX_PODS)
            gpus = parse_gpus(pod.get("gpus", 0), f"{where}.gpus", errors, maximum=MAX_GPUS)
            cpu = _decimal(pod.get("cpu", 0), f"{where}.cpu", errors, maximum=MAX_CPU,
                           resource="cpu")
            mem = _decimal(pod.get("memory_gib", 0), f"{where}.memory_gib", errors,
                           maximum=MAX_MEMORY_GIB, resource="memory")
            for label, value in ((f"{where}.cpu", cpu), (f"{where}.memory_gib", mem)):
                if value is not None and value < 0:
                    errors.setdefault(label, []).append(f"{value} < 0: must not be negative")
            gmem = None
            if pod.get("gpu_memory_gib") is not None:
                gmem = _int(pod["gpu_memory_gib"], f"{where}.gpu_memory_gib", errors, minimum=1,
                            maximum=MAX_GPU_MEMORY_GIB)
            extended = parse_resources(pod.get("resources"), f"{where}.resources", errors)
            if (gpus == 0 and cpu is not None and mem is not None and cpu <= 0 and mem <= 0
                    and not extended and f"{where}.resources" not in errors):
                errors.setdefault(where, []).append(
                    "asks for nothing: set gpus, cpu, memory_gib or resources above 0")
            flavors = pod.get("flavors")
            if not isinstance(flavors, list) or not flavors or not all(
                isinstance(f, str) for f in flavors
            ):
                errors.setdefault(f"{where}.flavors", []).append(
                    "required: acceptable flavors in order of preference")
                flavors = []
            else:
                unknown = [f for f in flavors if f not in known_flavors]
                if unknown:
                    errors.setdefault(f"{where}.flavors", []).append(
                        f"unknown flavor(s) {', '.join(unknown)} (known: "
                        f"{', '.join(sorted(known_flavors))})")
                if len(set(flavors)) != len(flavors):
                    errors.setdefault(f"{where}.flavors", []).append("lists a flavor twice")
                if clean_pods and flavors != clean_pods[0]["flavors"]:
                    errors.setdefault(f"{where}.flavors", []).append(
                        f"{flavors} differs from pods[0].flavors {clean_pods[0]['flavors']}: "
                        "a workload runs on one flavor, so every pod set lists the same ones")
            clean_pods.append({"index": i, "count": count, "flavors": flavors, "gpus": gpus,
                               "cpu": cpu, "memory_gib": mem, "gpu_memory_gib": gmem,
                               "resources": extended})
    return clean_pods
