"""Writes for policies: create, update (a new version with its diff), delete, sync from YAML,
record findings, team approvals."""

from __future__ import annotations

import atexit
import difflib
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from core import db
from quotas.models import Queue, Team

from .checks import definition_errors
from .models import Policy, PolicyVersion, PolicyViolation, TeamApproval
from .rules import Finding, PolicySpec
from .specs import FIELDS, dump_yaml, normalise

logger = logging.getLogger(__name__)


def policy_content(policy: Policy) -> dict[str, Any]:
    """The stored definition of a policy, in file field order."""
    return {name: getattr(policy, name) for name in FIELDS}


def policy_to_spec(policy: Policy) -> PolicySpec:
    """The evaluator's view of a stored policy."""
    return PolicySpec(
        name=policy.name, kind=policy.kind, rule=policy.rule, match=policy.match or "true",
        message=policy.message, key=policy.key, mode=policy.mode, scope=tuple(policy.scope or ()),
        order=policy.order, version=policy.version, id=policy.pk, description=policy.description,
    )


def _diff(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str:
    before = dump_yaml(dict(old)).splitlines() if old else []
    after = dump_yaml(dict(new)).splitlines()
    return "\n".join(difflib.unified_diff(before, after, "before", "after", lineterm="", n=1))


def _clean(data: Mapping[str, Any]) -> dict[str, Any]:
    definition = normalise(data)
    errors = definition_errors(definition)
    unknown = [p for p in definition["scope"] if not Queue.objects.filter(path=p).exists()]
    if unknown and "scope" not in errors:
        errors["scope"] = [f"unknown queue {p!r}" for p in unknown]
    if errors:
        raise ValidationError(errors)
    return definition


@transaction.atomic
def policy_create(*, user: Any, data: Mapping[str, Any], comment: str = "") -> Policy:
    """Create a policy (version 1); invalid fields or CEL are refused, nothing saved."""
    definition = _clean(data)
    if Policy.objects.filter(name=definition["name"]).exists():
        raise ValidationError({"name": [f"a policy named {definition['name']!r} exists"]})
    policy = Policy.objects.create(**definition, updated_by=_user(user))
    PolicyVersion.objects.create(
        policy=policy, version=1, author=_user(user), at=timezone.now(), content=definition,
        diff=_diff(None, definition), comment=comment or "created",
    )
    return policy


@transaction.atomic
def policy_update(
    *, user: Any, policy: Policy, data: Mapping[str, Any], comment: str = ""
) -> Policy:
    """Change a policy; a real change becomes a new version with author, time and diff.

    `data` may be partial (missing fields keep their values). The name cannot change: it is
    how files, reasons and violations refer to the policy.
    """
    policy = Policy.objects.select_for_update().get(pk=policy.pk)
    old = policy_content(policy)
    merged = {**old, **{k: v for k, v in data.items() if k in FIELDS}}
    if merged["name"] != policy.name:
        raise ValidationError({"name": ["a policy cannot be renamed; create a new one"]})
    definition = _clean(merged)
    if definition == old:
        return policy
    for name, value in definition.items():
        setattr(policy, name, value)
    policy.version += 1
    policy.updated_by = _user(user)
    policy.save()
    PolicyVersion.objects.create(
        policy=policy, version=policy.version, author=_user(user), at=timezone.now(),
        content=definition, diff=_diff(old, definition), comment=comment,
    )
    return policy


@transaction.atomic
def policy_delete(*, user: Any, policy: Policy) -> None:
    """Delete a policy with its versions and violations (set mode off to keep its history)."""
    Policy.objects.filter(pk=policy.pk).delete()


@dataclass
class SyncReport:
    """What a sync did, by policy name."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    turned_off: list[str] = field(default_factory=list)


@transaction.atomic
def policies_sync(
    *, user: Any, definitions: Iterable[Mapping[str, Any]], prune: bool = False,
    comment: str = "",
) -> SyncReport:
    """Make the stored policies match `definitions` (all or nothing).

    With `prune`, stored policies absent from the definitions are turned off (not deleted:
    their versions and violations stay).
    """
    report = SyncReport()
    seen: set[str] = set()
    errors: dict[str, list[str]] = {}
    for data in definitions:
        name = str(data.get("name"))
        if name in seen:
            errors.setdefault(name, []).append("defined twice")
            continue
        seen.add(name)
        try:
            existing = Policy.objects.filter(name=name).first()
            if existing is None:
                policy_create(user=user, data=data, comment=comment or "policies_sync")
                report.created.append(name)
            else:
                before = existing.version
                after = policy_update(user=user, policy=existing, data=normalise(data),
                                      comment=comment or "policies_sync")
                (report.updated if after.version != before else report.unchanged).append(name)
        except ValidationError as exc:
            for fname, messages in exc.message_dict.items():
                errors.setdefault(name, []).extend(f"{fname}: {m}" for m in messages)
    if errors:
        raise ValidationError(errors)
    if prune:
        for policy in Policy.objects.exclude(name__in=seen).exclude(mode="off"):
            policy_update(user=user, policy=policy, data={"mode": "off"},
                          comment=comment or "policies_sync --prune: not in the files")
            report.turned_off.append(policy.name)
    return report


def _user(user: Any) -> Any:
    return user if user is not None and getattr(user, "is_authenticated", False) else None


def _json_safe(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_json_safe(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)


def violations_record(
    *, findings: Iterable[Finding], variables: Mapping[str, Any] | None = None,
    subject: str = "", queue_path: str = "", user: Any = None, workload_id: int | None = None,
    at: datetime | None = None,
) -> list[PolicyViolation]:
    """Store findings as violation rows (one bulk insert), with the input they were given."""
    at = at or timezone.now()
    rows = []
    for finding in findings:
        if finding.policy.id is None:
            continue
        rows.append(PolicyViolation(
            policy_id=finding.policy.id, policy_version=finding.policy.version,
            mode=finding.policy.mode, outcome=finding.outcome, code=finding.code, at=at,
            subject=subject[:300], queue_path=queue_path, user=_user(user),
            workload_id=workload_id, expression=finding.expression, message=finding.message,
            input=_json_safe(variables or {}),
        ))
    if not rows:
        return []
    return PolicyViolation.objects.bulk_create(rows)


def violations_record_many(
    *, items: Iterable[tuple[Finding, str, str, Mapping[str, Any]]], at: datetime | None = None,
) -> int:
    """Store (finding, subject, queue path, input) rows in one bulk insert; return the count."""
    at = at or timezone.now()
    rows = [
        PolicyViolation(
            policy_id=f.policy.id, policy_version=f.policy.version, mode=f.policy.mode,
            outcome=f.outcome, code=f.code, at=at, subject=subject[:300], queue_path=path,
            expression=f.expression, message=f.message, input=_json_safe(variables),
        )
        for f, subject, path, variables in items if f.policy.id is not None
    ]
    PolicyViolation.objects.bulk_create(rows, batch_size=500)
    return len(rows)


def policy_counters_bump(*, hit_ids: Iterable[int], denied_ids: Iterable[int]) -> None:
    """Count hits (the policy matched) and denials: one UPDATE, whatever the number."""
    hits = [i for i in hit_ids if i is not None]
    denied = [i for i in denied_ids if i is not None]
    if not hits and not denied:
        return
    if db.postgres() and not connection.in_atomic_block:
        table = connection.ops.quote_name(Policy._meta.db_table)
        # Counters only, in a statement of their own (autocommit): not waiting for the WAL
        # flush saves a disk sync per submission; a database crash may lose the last fraction
        # of a second of counts, nothing else. set_config(..., true) lasts this transaction.
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET hits = hits + (id = ANY(%s))::int, "
                f"denials = denials + (id = ANY(%s))::int "
                f"FROM (SELECT set_config('synchronous_commit', 'off', true)) AS cfg "
                f"WHERE id = ANY(%s)",
                [hits, denied, sorted(set(hits) | set(denied))])
        return
    if hits:
        Policy.objects.filter(pk__in=hits).update(hits=F("hits") + 1)
    if denied:
        Policy.objects.filter(pk__in=denied).update(denials=F("denials") + 1)


# Hits and denials are display counters: a submission adds to a per-process buffer after its
# commit and a background timer writes the buffer in one UPDATE every
# ALLOT_POLICY_COUNTS_FLUSH_S seconds (0: at once, after each commit), instead of one UPDATE of
# every matched policy row per submission. Pages and the API flush this process's buffer
# before reading; a crashed process loses at most its last interval of counts.
_counts_lock = threading.Lock()
_counts: dict[int, list[int]] = {}
_counts_timer: threading.Timer | None = None


def policy_counts_add(*, hit_ids: Iterable[int], denied_ids: Iterable[int]) -> None:
    """Count a committed submission's hits and denials (buffered; see above)."""
    hits = [i for i in hit_ids if i is not None]
    denied = [i for i in denied_ids if i is not None]
    if not hits and not denied:
        return
    delay = settings.ALLOT_POLICY_COUNTS_FLUSH_S
    if delay <= 0:
        policy_counters_bump(hit_ids=hits, denied_ids=denied)
        return
    global _counts_timer
    with _counts_lock:
        for i in hits:
            _counts.setdefault(i, [0, 0])[0] += 1
        for i in denied:
            _counts.setdefault(i, [0, 0])[1] += 1
        if _counts_timer is None:
            _counts_timer = threading.Timer(delay, _flush_in_background)
            _counts_timer.daemon = True
            _counts_timer.start()


def _flush_in_background() -> None:
    from django.db import connections  # noqa: PLC0415

    try:
        policy_counts_flush()
    except Exception:
        logger.exception("could not write policy hit counters")
    finally:
        connections.close_all()  # this thread's connections only


def policy_counts_flush() -> int:
    """Write this process's buffered counts (one UPDATE); return how many policies changed."""
    global _counts_timer
    with _counts_lock:
        pending = dict(_counts)
        _counts.clear()
        timer, _counts_timer = _counts_timer, None
    if timer is not None and timer is not threading.current_thread():
        timer.cancel()
    if not pending:
        return 0
    ids = sorted(pending)
    db.bulk_add(Policy, ids, {"hits": [pending[i][0] for i in ids],
                              "denials": [pending[i][1] for i in ids]})
    return len(ids)


def _flush_at_exit() -> None:
    if not _counts:
        return
    try:
        policy_counts_flush()
    except Exception:  # the database may be gone already
        logger.warning("policy hit counters of this process lost at exit", exc_info=True)


atexit.register(_flush_at_exit)


@transaction.atomic
def team_approval_grant(
    *, user: Any, team: Team, name: str, note: str = "", expires_at: datetime | None = None
) -> TeamApproval:
    """Grant a team an approval (`h100`), which rules read as `team.approvals`."""
    approval, _ = TeamApproval.objects.update_or_create(
        team=team, name=name,
        defaults={"note": note, "expires_at": expires_at, "granted_by": _user(user)},
    )
    return approval


@transaction.atomic
def team_approval_revoke(*, user: Any, team: Team, name: str) -> None:
    """Withdraw an approval from a team."""
    TeamApproval.objects.filter(team=team, name=name).delete()
