"""Reasons for people: the engine's reason messages rewritten in plain words.

The engine (and the workers) give every waiting, rejected or preempted workload a code and an
exact message naming the levels and numbers ("queue rd/vision a100/gpu: used 8, min 8,
requested 4 > 0 available from rd ..."). That text is right but written for the engine's
authors: epoch seconds, workload ids, "siblings' exclusive min". `reason_plain` turns one
(code, message) into a sentence a researcher reads, with the same numbers, times as dates
("until 14:32 UTC, in 2 min") and workloads by name (with a link when the reader may see
them); the exact message stays available as the details.

Each code has one template, chosen by matching the engine's message; a message no template
matches still gets its code's plain sentence, followed by the message with its times and ids
made readable, so a new engine wording never shows raw epoch seconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

# A time on the workers' clock: POSIX seconds (the simulator's small numbers never reach pages).
_EPOCH = re.compile(r"\b(1[5-9]\d{8}|2\d{9})(\.\d+)?\b")
_NUMBER = r"(-?\d+(?:\.\d+)?|unlimited)"
_KEY = r"(?P<flavor>[^\s/:]+)/(?P<resource>[a-z]+)"
_QUEUE = r"(?P<queue>[^\s:]+)"
_IDS = r"(?P<ids>\d+(?:, \d+)*)"


@dataclass(frozen=True)
class PlainReason:
    """A reason as people read it: `html` (plain words, safe, workloads linked) and `details`
    (the engine's exact message, times and ids as they were)."""

    code: str
    html: SafeString
    details: str

    @property
    def text(self) -> str:
        """The plain sentence without its links (tests, emails, the API's `reason_text`)."""
        return re.sub(r"<[^>]+>", "", str(self.html)).replace("&#x27;", "'").replace(
            "&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')


# ---- words ---------------------------------------------------------------------------------

def _num(text: str) -> float:
    return float("inf") if text == "unlimited" else float(text)


def _amount(value: str, flavor: str, resource: str) -> str:
    """`8` of a100/gpu -> "8 a100 GPUs"; cpu -> "8 CPUs"; memory -> "8 GiB of memory"."""
    if value == "unlimited":
        return f"unlimited {flavor} {resource}"
    one = _num(value) == 1
    if resource == "gpu":
        return f"{value} {flavor} GPU{'' if one else 's'}"
    if resource == "cpu":
        return f"{value} CPU{'' if one else 's'} on {flavor} nodes"
    if resource == "memory":
        return f"{value} GiB of memory on {flavor} nodes"
    return f"{value} {flavor} {resource}"


def duration_words(seconds: float) -> str:
    """90 -> "2 min"; 30 -> "30 s"; 7200 -> "2 h"; 100000 -> "1 d 4 h"."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{round(seconds)} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    if seconds < 86400:
        h, m = divmod(round(seconds / 60), 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(round(seconds / 3600), 24)
    return f"{d} d {h} h" if h else f"{d} d"


def time_words(epoch: float, now: datetime) -> str:
    """A POSIX time as people read it: "14:32 UTC, in 2 min" (a date when not today)."""
    at = timezone.localtime(datetime.fromtimestamp(epoch, tz=UTC))
    here = timezone.localtime(now)
    label = at.strftime("%H:%M") if at.date() == here.date() else at.strftime("%Y-%m-%d %H:%M")
    label += f" {at.tzname()}"
    delta = epoch - now.timestamp()
    if delta >= 0:
        return f"{label}, in {duration_words(delta)}"
    return f"{label}, {duration_words(-delta)} ago"


# ---- workloads named in messages ----------------------------------------------------------

class _Names:
    """Workload ids in messages -> a link to the workload by name (when the reader may see it),
    else words that leak nothing of another team."""

    def __init__(self, names: Mapping[int, tuple[str, bool]]):
        self.names = names

    def one(self, ident: str) -> SafeString:
        got = self.names.get(int(ident)) if ident.isdigit() else None
        if got is None:
            return format_html("{}", "a workload of another team" if ident.isdigit() else ident)
        name, visible = got
        if not visible:
            return format_html("{}", "a workload of another team")
        return format_html('<a href="{}">{}</a>', reverse("workload-detail", args=[int(ident)]),
                           name)

    def many(self, ids: str) -> SafeString:
        parts = [self.one(i.strip()) for i in ids.split(",") if i.strip()]
        if len(parts) <= 1:
            return parts[0] if parts else mark_safe("")
        return format_html("{} and {}", mark_safe(", ".join(parts[:-1])), parts[-1])


def ids_in(messages: Iterable[str]) -> set[int]:
    """Workload ids a batch of messages names (to resolve them in one query)."""
    out: set[int] = set()
    for message in messages:
        for pattern in _ID_PATTERNS:
            for match in pattern.finditer(message or ""):
                out.update(int(i) for i in re.findall(r"\d+", match.group("ids")))
    return out


_ID_PATTERNS = (
    re.compile(r"waiting for " + _IDS + r" to stop"),
    re.compile(r"preempted " + _IDS + r" \(grace"),
    re.compile(r"(?:reclaimed|preempted) by (?P<ids>\d+)\b"),
    re.compile(r"starving workload " + _IDS),
)


def workload_names(user: Any, ids: Iterable[int]) -> dict[int, tuple[str, bool]]:
    """id -> (name, whether `user` may see it) for the workloads messages name: one query."""
    from scheduling.models import Workload
    from scheduling.selectors import workloads_visible

    ids = set(ids)
    if not ids:
        return {}
    visible = set(workloads_visible(user).filter(pk__in=ids).values_list("pk", flat=True)) \
        if user is not None else set()
    return {pk: (name, pk in visible)
            for pk, name in Workload.objects.filter(pk__in=ids).values_list("pk", "name")}


# ---- the templates -------------------------------------------------------------------------

Render = Callable[[re.Match[str], "_Ctx"], SafeString]


@dataclass
class _Ctx:
    now: datetime
    names: _Names
    iso: bool = False

    def time(self, text: str) -> str:
        if self.iso:
            return iso_time(float(text))
        return time_words(float(text), self.now)


def iso_time(epoch: float) -> str:
    """A POSIX time as the API writes times: ISO 8601 in UTC, to the second (`...Z`)."""
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def _quota_max(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    limit = _amount(d["max"], d["flavor"], d["resource"])
    policy = f" (lowered by policy {d['policy']})" if d.get("policy") else ""
    return format_html(
        "Queue {} may use at most {}{}. It uses {} now and this workload asks for {} more, "
        "so it waits until enough of the queue's work ends.",
        d["queue"], limit, policy, d["used"], d["amount"])


def _quota_max_never(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html(
        "This workload asks for {}, more than queue {} may ever use ({} at most): it can "
        "never run there. Ask for less, or ask for more capacity.",
        _amount(d["amount"], d["flavor"], d["resource"]), d["queue"], d["max"])


def _fleet_short(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html(
        "Only {} of the fleet's {} are free ({} in use); this workload asks for {}.",
        d["free"], _amount(d["capacity"], d["flavor"], d["resource"]), d["used"], d["amount"])


def _borrow(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    kept = ""
    if _num(d["siblings"]) > 0:
        kept = format_html(" {} idle there are kept for other queues' guarantees (their "
                           "owners may claim them at any time, so they are not lent).",
                           d["siblings"])
    return format_html(
        "Queue {} is guaranteed {} and uses {}. This workload needs {} more, beyond the "
        "guarantee, so it must borrow; only {} can be borrowed from {} now.{}",
        d["queue"], _amount(d["min"], d["flavor"], d["resource"]), d["used"], d["amount"],
        d["room"], d["where"], kept)


def _reclaimed(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html(
        "Stopped: queue {} was borrowing {} capacity ({} in use, {} guaranteed) and queue {} "
        "took it back for {}.", d["queue"], d["flavor"], d["used"], d["min"], d["by_queue"],
        c.names.one(d["by"]))


def _beyond_min(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    used = f"{d['used']} are in use and " if d.get("used") else ""
    return format_html(
        "This workload may not be preempted, so it must fit inside queue {}'s guarantee of "
        "{}: {}it asks for {}. Mark it preemptible to let it borrow beyond the guarantee.",
        d["queue"], _amount(d["min"], d["flavor"], d["resource"]), used, d["amount"])


def _cooldown(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html(
        "Another queue just took back GPUs that queue {} had borrowed, so {} may not borrow "
        "again until {} (a pause of {} after every reclaim, so the capacity goes to its owner).",
        d["queue"], d["queue"], c.time(d["until"]), duration_words(_num(d["pause"])))


def _placement(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    held = ""
    if d.get("held"):
        held = format_html(" {} GPUs are still held by workloads that ended, until their "
                           "cluster confirms they are gone.", d["held"])
    spread = ""
    if int(d["free"]) >= int(d["gpus"]):
        spread = mark_safe(" The free GPUs are spread over several nodes: no node has "
                           "room for one of its pods.")
    return format_html(
        "No healthy cluster has room for {} on {} nodes ({} GPUs in all). The most free is {} "
        "with {} free GPUs; its largest free node has {}.{}{}",
        d["shape"], d["flavor"], d["gpus"], d["cluster"], d["free"], d["largest"], spread, held)


def _held_for(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html("The free {} capacity is kept for {}, which has waited the longest "
                       "and goes first.", d["flavor"], c.names.many(d["ids"]))


def _no_victims(m: re.Match[str], c: _Ctx) -> SafeString:
    return mark_safe("The GPUs are in use and no running workload may be preempted for "
                     "this one; it waits until work ends.")


def _no_fit_even(m: re.Match[str], c: _Ctx) -> SafeString:
    return mark_safe("The GPUs are in use; even stopping every workload it may preempt "
                     "would not make room, so it waits until work ends.")


def _rack(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html("The {} fit in a cluster's {} nodes, but not all in one rack as the "
                       "request asks.", d["shape"], d["flavor"])


def _no_flavor(m: re.Match[str], c: _Ctx) -> SafeString:
    return format_html("No cluster has {} nodes ready now.", m.group("flavor"))


def _policy_clusters(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html("A placement policy allows only the clusters {}, and none of them has "
                       "{} nodes ready.", d["names"] or "(none)", d["flavor"])


def _unhealthy(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html("Every cluster with {} nodes is unhealthy now (health {} or below), "
                       "so nothing new is placed there: {}.", d["flavor"], d["health"],
                       d["detail"])


def _waiting(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html("Room is being made for it: {} {} asked to stop and {} until {} to "
                       "save their work.", c.names.many(d["ids"]),
                       "was" if "," not in d["ids"] else "were",
                       "has" if "," not in d["ids"] else "have", c.time(d["until"]))


def _preempted_by(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html("Stopped to make room for {}, which has a higher priority ({} {} "
                       "over {} {}).", c.names.one(d["by"]), d["pc"], d["pv"], d["mc"], d["mv"])


def _ready_timeout(m: re.Match[str], c: _Ctx) -> SafeString:
    d = m.groupdict()
    return format_html("Its pods were not all running {} after it was placed on {}; it went "
                       "back to the queue and is tried again (attempt {}) after a pause of {}.",
                       duration_words(_num(d["limit"])), d["cluster"], d["n"],
                       duration_words(_num(d["pause"])))


def _invalid(m: re.Match[str], c: _Ctx) -> SafeString:
    return format_html("The request can never run as written: {}.", m.group("what"))


def _needs_approval(m: re.Match[str], c: _Ctx) -> SafeString:
    parts = []
    for part in m.group("what").split(", "):
        g = re.fullmatch(r"(\d+) GPUs > (\d+)", part)
        h = re.fullmatch(r"expected ([\d.]+) h > ([\d.]+) h", part)
        if g:
            parts.append(f"it asks for {g.group(1)} GPUs, more than the {g.group(2)} anyone "
                         "may take without approval")
        elif h:
            parts.append(f"it is expected to run {h.group(1)} h, longer than the "
                         f"{h.group(2)} h allowed without approval")
        else:
            parts.append(part)
    return format_html("It waits for a lead or a platform admin to approve it: {}.",
                       "; ".join(parts))


def _denied(m: re.Match[str], c: _Ctx) -> SafeString:
    return format_html("{} denied it: {}", m.group("who"), m.group("why"))


_TEMPLATES: dict[str, list[tuple[re.Pattern[str], Render]]] = {
    "QUOTA_MAX": [
        (re.compile(rf"queue {_QUEUE} {_KEY}: used (?P<used>{_NUMBER}) \+ requested "
                    rf"(?P<amount>{_NUMBER}) > max (?P<max>{_NUMBER})"
                    r"(?: \(lowered by policy (?P<policy>[^)]+)\))?"), _quota_max),
        (re.compile(rf"queue {_QUEUE} {_KEY}: requested (?P<amount>{_NUMBER}) > max "
                    rf"(?P<max>{_NUMBER})"), _quota_max_never),
    ],
    "NO_CAPACITY": [
        (re.compile(rf"fleet {_KEY}: requested (?P<amount>{_NUMBER}) > free "
                    rf"(?P<free>{_NUMBER}) \(capacity (?P<capacity>{_NUMBER}), used "
                    rf"(?P<used>{_NUMBER})\)"), _fleet_short),
        (re.compile(r"flavor (?P<flavor>\S+): no healthy cluster can place (?P<shape>.+?) "
                    r"\((?P<gpus>\d+) GPUs\); most free: (?P<cluster>\S+) (?P<free>\d+) GPUs, "
                    r"largest node (?P<largest>\d+) free"
                    r"(?:; (?P<held>\d+) GPUs still held)?"), _placement),
        (re.compile(r"flavor (?P<flavor>\S+): capacity held for starving workload "
                    + _IDS), _held_for),
        (re.compile(r"queue " + _QUEUE + r": preempted by (?P<by>\d+) \((?P<pc>\S+) "
                    r"(?P<pv>-?\d+) > (?P<mc>\S+) (?P<mv>-?\d+)\)"), _preempted_by),
        (re.compile(r"^no preemptible victims$"), _no_victims),
        (re.compile(r"^preempting every valid victim"), _no_fit_even),
    ],
    "QUOTA_BORROW_UNAVAILABLE": [
        (re.compile(rf"queue {_QUEUE} {_KEY}: used (?P<used>{_NUMBER}), min (?P<min>{_NUMBER}),"
                    rf" requested (?P<amount>{_NUMBER}) > (?P<room>{_NUMBER}) available from "
                    rf"(?P<where>.+?) \((?P<siblings>{_NUMBER}) held unused"), _borrow),
        (re.compile(rf"queue {_QUEUE} {_KEY}: borrowed capacity reclaimed by (?P<by>\d+) of "
                    rf"queue (?P<by_queue>\S+) \(used (?P<used>{_NUMBER}) > min "
                    rf"(?P<min>{_NUMBER})\)"), _reclaimed),
    ],
    "NON_PREEMPTIBLE_BEYOND_MIN": [
        (re.compile(rf"queue {_QUEUE} {_KEY}: non-preemptible, (?:used (?P<used>{_NUMBER}) "
                    rf"\+ )?requested (?P<amount>{_NUMBER}) > min (?P<min>{_NUMBER})"),
         _beyond_min),
    ],
    "COOLDOWN": [
        (re.compile(rf"queue {_QUEUE}: a workload was reclaimed; no borrowing admissions until "
                    rf"(?P<until>{_NUMBER}) \(reclaim_cooldown_s (?P<pause>{_NUMBER})\)"),
         _cooldown),
    ],
    "TOPOLOGY_UNSATISFIABLE": [
        (re.compile(r"flavor (?P<flavor>\S+): (?P<shape>.+?) fit in a cluster but not within "
                    r"one rack"), _rack),
    ],
    "FLAVOR_UNAVAILABLE": [
        (re.compile(r"flavor (?P<flavor>\S+): no cluster has ready"), _no_flavor),
    ],
    "POLICY_DENIED": [
        (re.compile(r"flavor (?P<flavor>\S+): allowed clusters \[(?P<names>[^\]]*)\] hold no "
                    r"ready"), _policy_clusters),
    ],
    "CLUSTER_UNHEALTHY": [
        (re.compile(r"flavor (?P<flavor>\S+): every cluster is at or below health "
                    rf"(?P<health>{_NUMBER}) \((?P<detail>.*)\)"), _unhealthy),
    ],
    "WAITING_FOR_PREEMPTION": [
        (re.compile(rf"waiting for {_IDS} to stop \(grace until (?P<until>{_NUMBER})\)"),
         _waiting),
        (re.compile(rf"flavor \S+: capacity is being freed by preempted {_IDS} \(grace until "
                    rf"(?P<until>{_NUMBER})\)"), _waiting),
    ],
    "PODS_READY_TIMEOUT": [
        (re.compile(rf"pods not all running (?P<limit>{_NUMBER}) s after admission to "
                    rf"(?P<cluster>\S+); retry #(?P<n>\d+) after (?P<pause>{_NUMBER}) s"),
         _ready_timeout),
    ],
    "INVALID_REQUEST": [
        (re.compile(r"workload [^:]+: (?P<what>.+)$"), _invalid),
    ],
    "NEEDS_APPROVAL": [
        (re.compile(r"needs approval: (?P<what>.+)$"), _needs_approval),
    ],
    "APPROVAL_DENIED": [
        (re.compile(r"denied by (?P<who>[^:]+): (?P<why>.*)$", re.S), _denied),
    ],
}

# What each code means, for a message no template matches (and for the code's legend).
CODE_WORDS: dict[str, str] = {
    "QUOTA_MAX": "The queue is at its limit for this GPU model.",
    "QUOTA_BORROW_UNAVAILABLE": "The queue is past its guarantee and there is nothing free "
                                "to borrow from other queues now.",
    "NON_PREEMPTIBLE_BEYOND_MIN": "A workload that may not be preempted must fit inside its "
                                  "queue's guarantee.",
    "COOLDOWN": "The queue may not borrow for a short while after a reclaim.",
    "NO_CAPACITY": "There is no room for it on the clusters now.",
    "GPU_MEMORY_INSUFFICIENT": "No GPU model it accepts has as much GPU memory as it asks.",
    "TOPOLOGY_UNSATISFIABLE": "Its pods do not fit together in one rack.",
    "FLAVOR_UNAVAILABLE": "No cluster has the GPU models it accepts ready.",
    "CLUSTER_UNHEALTHY": "The clusters with its GPU models are unhealthy now.",
    "POLICY_DENIED": "A policy does not allow it (there, or at all).",
    "BUDGET_EXCEEDED": "A budget or disruption limit stops it now.",
    "WAITING_FOR_PREEMPTION": "Room is being made for it: other work is stopping.",
    "PODS_READY_TIMEOUT": "Its pods did not start in time; it is retried after a pause.",
    "INVALID_REQUEST": "The request can never run as written.",
    "NEEDS_APPROVAL": "It waits for a lead or a platform admin to approve it.",
    "APPROVAL_DENIED": "Its approval was denied.",
    "DISPATCH_REFUSED": "The cluster refused to start it; it was sent back to the queue.",
    "STUCK_PENDING": "It has waited unusually long.",
}


def _readable(message: str, ctx: _Ctx) -> SafeString:
    """The exact message with its epoch times as dates and its workload ids as names."""
    text = _EPOCH.sub(lambda m: ctx.time(m.group(0)), str(conditional_escape(message)))
    for pattern in _ID_PATTERNS:
        text = pattern.sub(lambda m: m.group(0).replace(m.group("ids"),
                                                        str(ctx.names.many(m.group("ids")))),
                           text)
    return mark_safe(text)  # escaped above; the names are format_html's


def reason_plain(code: str, message: str, *, now: datetime | None = None,
                 names: Mapping[int, tuple[str, bool]] | None = None,
                 iso_times: bool = False) -> PlainReason:
    """One reason in plain words (see the module's docstring). `names`: `workload_names` of
    the ids the message names (unresolved ids read "a workload of another team");
    `iso_times`: times as ISO 8601 (the API) rather than local words (the pages)."""
    ctx = _Ctx(now=now or timezone.now(), names=_Names(names or {}), iso=iso_times)
    message = message or ""
    head, _, also = message.partition("; capacity also held for starving workload ")
    parts: list[SafeString] = []
    for pattern, render in _TEMPLATES.get(code, []):
        match = pattern.search(head)
        if match:
            parts.append(render(match, ctx))
            break
    else:
        words = CODE_WORDS.get(code, "")
        if head and words:
            parts.append(format_html("{} {}", words, _readable(head, ctx)))
        elif head:
            parts.append(_readable(head, ctx))
        elif words:
            parts.append(format_html("{}", words))
    if also:
        parts.append(format_html("Capacity is also kept for {}, which has waited the longest.",
                                 ctx.names.many(also.strip())))
    return PlainReason(code=code, html=mark_safe(" ".join(parts)), details=message)



def reason_text(code: str | None, message: str | None, *,
                names: Mapping[int, tuple[str, bool]] | None = None) -> str | None:
    """The API's `reason_text`: the same plain sentence as the pages' `{% reason %}` tag,
    without links, times in ISO 8601 (UTC) so a client shows them in its own zone; None
    without a reason."""
    if not code:
        return None
    return reason_plain(str(code), message or "", names=names, iso_times=True).text


def reason_names(user: Any, messages: Iterable[str | None]) -> dict[int, tuple[str, bool]]:
    """`workload_names` for every id a batch of messages names: one query (none without)."""
    return workload_names(user, ids_in(m or "" for m in messages))
