"""A workload's name is unique among the open workloads of its queue (a partial unique index,
`OPEN_NAME_CONSTRAINT`): the submission services turn its violation into a 400."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import IntegrityError

from scheduling.models import OPEN_NAME_CONSTRAINT, OPEN_STATES, Workload

T = TypeVar("T")


def names_unique(service: Callable[..., T]) -> Callable[..., T]:
    """Turn the open-name constraint's IntegrityError into a 400 naming the name and the
    workload holding it (read after the failure, so a submission costs no extra query)."""

    @functools.wraps(service)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return service(*args, **kwargs)
        except IntegrityError as exc:
            if OPEN_NAME_CONSTRAINT not in str(exc):
                raise
            items = kwargs.get("items") or [kwargs.get("data")]
            raise ValidationError(_name_errors(items)) from exc

    return wrapper


def _name_errors(items: list[Any]) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for n, data in enumerate(items):
        if not isinstance(data, Mapping):
            continue
        holder = (Workload.objects.filter(queue__path=data.get("queue"), name=data.get("name"),
                                          state__in=OPEN_STATES)
                  .values_list("pk", "state").first())
        if holder is not None:
            errors["name" if len(items) == 1 else f"[{n}] name"] = [
                f"a workload named {data.get('name')!r} is already {holder[1]} in "
                f"{data.get('queue')} (#{holder[0]}): names are unique among a queue's open "
                "workloads; pick another name, or wait until it ends"]
    return errors or {"name": ["a workload of that name is already open in that queue"]}
