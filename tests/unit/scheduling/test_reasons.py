"""Reasons in plain words: every engine wording gets its template, with the numbers, times as
dates and workloads by name; no raw epoch seconds, ids or engine vocabulary."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling.engine.types import ReasonCode
from scheduling.reasons import CODE_WORDS, duration_words, ids_in, reason_plain

NOW = datetime(2026, 12, 2, 14, 30, tzinfo=UTC)
T = NOW.timestamp()
NAMES = {23: ("train-bert", True), 24: ("other-job", False)}

ENGINE_VOCABULARY = ("exclusive", "siblings", "reclaim_cooldown_s", "fleet ", "flavor ",
                     "non-preemptible,")

CASES = [
    ("QUOTA_MAX", "queue rd/vision a100/gpu: used 8 + requested 4 > max 10",
     ["Queue rd/vision may use at most 10 a100 GPUs", "uses 8", "asks for 4 more"]),
    ("QUOTA_MAX", "queue rd/vision a100/gpu: used 8 + requested 4 > max 10 (lowered by policy "
     "night-cap)", ["lowered by policy night-cap"]),
    ("QUOTA_MAX", "queue rd/vision a100/gpu: requested 40 > max 16",
     ["asks for 40 a100 GPUs", "16 at most", "never run"]),
    ("NO_CAPACITY", "fleet a100/gpu: requested 24 > free 8 (capacity 64, used 56)",
     ["Only 8 of the fleet's 64 a100 GPUs are free (56 in use)", "asks for 24"]),
    ("NO_CAPACITY", "flavor a100: no healthy cluster can place 3 pods of 8 GPU (24 GPUs); most "
     "free: east 24 GPUs, largest node 4 free", ["3 pods of 8 GPU", "east with 24 free GPUs",
                                                 "largest free node has 4",
                                                 "spread over several nodes"]),
    ("NO_CAPACITY", "flavor a100: capacity held for starving workload 23",
     ["kept for train-bert", 'href="/workloads/23/"']),
    ("NO_CAPACITY", "queue rd/nlp: preempted by 23 (inference-high 10000 > training 1000)",
     ["make room for train-bert", "higher priority"]),
    ("QUOTA_BORROW_UNAVAILABLE", "queue rd/vision a100/gpu: used 8, min 8, requested 16 > 8 "
     "available from rd (16 held unused by siblings' exclusive min)",
     ["guaranteed 8 a100 GPUs", "needs 16 more", "only 8 can be borrowed from rd",
      "16 idle there are kept for other queues' guarantees"]),
    ("QUOTA_BORROW_UNAVAILABLE", "queue rd/nlp a100/gpu: borrowed capacity reclaimed by 23 of "
     "queue rd/vision (used 12 > min 8)", ["rd/nlp was borrowing", "queue rd/vision took it back",
                                            "train-bert"]),
    ("NON_PREEMPTIBLE_BEYOND_MIN", "queue rd/vision a100/gpu: non-preemptible, used 4 + "
     "requested 8 > min 8", ["may not be preempted", "guarantee of 8 a100 GPUs",
                             "4 are in use", "asks for 8"]),
    ("COOLDOWN", f"queue rd/vision: a workload was reclaimed; no borrowing admissions until "
     f"{T + 120:.3f} (reclaim_cooldown_s 120)", ["until 14:32 UTC, in 2 min",
                                                 "pause of 2 min"]),
    ("WAITING_FOR_PREEMPTION", f"waiting for 23, 24 to stop (grace until {T + 30})",
     ["train-bert</a> and a workload of another team were asked to stop",
      "until 14:30 UTC, in 30 s"]),
    ("WAITING_FOR_PREEMPTION", f"flavor a100: capacity is being freed by preempted 23 (grace "
     f"until {T + 60})", ["train-bert</a> was asked to stop and has until 14:31 UTC"]),
    ("TOPOLOGY_UNSATISFIABLE", "flavor a100: 2 pods of 8 GPU fit in a cluster but not within one "
     "rack", ["2 pods of 8 GPU fit", "one rack"]),
    ("FLAVOR_UNAVAILABLE", "flavor h100: no cluster has ready h100 nodes",
     ["No cluster has h100 nodes ready"]),
    ("POLICY_DENIED", "flavor a100: allowed clusters [east, west] hold no ready a100 nodes",
     ["only the clusters east, west"]),
    ("CLUSTER_UNHEALTHY", "flavor a100: every cluster is at or below health 0.5 (east 0.2)",
     ["unhealthy now (health 0.5 or below)", "east 0.2"]),
    ("PODS_READY_TIMEOUT", "pods not all running 300 s after admission to east; retry #2 after "
     "120 s backoff", ["not all running 5 min", "placed on east", "attempt 2", "pause of 2 min"]),
    ("INVALID_REQUEST", "workload big: asks 16 GPUs per pod, no a100 node has more than 8",
     ["can never run as written: asks 16 GPUs per pod"]),
    ("NEEDS_APPROVAL", "needs approval: 40 GPUs > 32, expected 100 h > 72 h",
     ["asks for 40 GPUs, more than the 32", "run 100 h, longer than the 72 h"]),
    ("APPROVAL_DENIED", "denied by bob: too big", ["bob denied it: too big"]),
    ("NO_CAPACITY", "flavor a100: no healthy cluster can place 1 pod of 8 GPU (8 GPUs); most "
     "free: east 4 GPUs, largest node 4 free; capacity also held for starving workload 23",
     ["largest free node has 4", "also kept for train-bert"]),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("code", "message", "expected"), CASES)
def test_each_wording_reads_plainly(code, message, expected):
    plain = reason_plain(code, message, now=NOW, names=NAMES)
    html = str(plain.html)
    text = plain.text
    for part in expected:
        assert part in (html if "<" in part or "href" in part else text), (part, html)
    assert plain.details == message
    assert str(int(T)) not in text  # no epoch seconds
    for word in ENGINE_VOCABULARY:
        assert word not in text, (word, text)
    assert "other-job" not in html  # another team's workload is not named


@pytest.mark.django_db
def test_unknown_wording_falls_back_to_the_codes_words_with_readable_times_and_ids():
    plain = reason_plain("WAITING_FOR_PREEMPTION", f"new words: 23 stops at {T + 120:.3f}",
                         now=NOW, names=NAMES)
    assert plain.text.startswith(CODE_WORDS["WAITING_FOR_PREEMPTION"])
    assert "14:32 UTC, in 2 min" in plain.text
    assert str(int(T)) not in plain.text


def test_every_engine_code_has_words():
    assert set(ReasonCode) <= set(CODE_WORDS)


def test_ids_in_and_durations():
    assert ids_in(["waiting for 3, 4 to stop (grace until 1)", "preempted by 7 (x 1 > y 0)",
                   "flavor a: capacity held for starving workload 9"]) == {3, 4, 7, 9}
    assert [duration_words(s) for s in (30, 90, 7200, 5400, 100000)] == [
        "30 s", "2 min", "2 h", "1 h 30 min", "1 d 4 h"]
