"""allot_cli.commands.workloads: `allot why` in words for each state of a workload."""

from __future__ import annotations

from datetime import UTC, datetime

from allot_cli.commands.workloads import _distinct_newest, gangs_lines, why_text

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
QUOTA = {"code": "QUOTA_MAX", "message": "used 32 + requested 8 > max 32"}


def workload(**over):
    w = {"id": 7, "name": "resnet", "state": "pending", "queue": "rd/vision", "gpus": 8,
         "queue_position": {"in_queue": 3, "ahead_gpus": 12,
                            "estimated_start": "2026-05-01T13:20:00Z",
                            "estimated_start_range": {"low": "2026-05-01T13:00:00Z",
                                                      "high": "2026-05-01T15:00:00Z"},
                            "estimate_assumes": "Run times: duration hints where given.",
                            "estimate_computed_at": "2026-05-01T11:59:30Z"},
         "reason": QUOTA, "admission": None, "finished_at": None, "not_before": None}
    return {**w, **over}


def test_pending_with_the_reason_said_once():
    reasons = _distinct_newest([
        {**QUOTA, "code": "NO_CAPACITY", "message": "8 GPUs free < 16", "at":
         "2026-05-01T11:00:00Z"},
        {**QUOTA, "at": "2026-05-01T11:50:00Z"}, {**QUOTA, "at": "2026-05-01T11:55:00Z"}])
    assert [r["at"] for r in reasons] == ["2026-05-01T11:50:00Z", "2026-05-01T11:00:00Z"]
    assert why_text(workload(not_before="2026-05-01T12:10:00Z", backoff_count=2), reasons,
                    NOW).splitlines() == [
        "resnet (#7) is pending in rd/vision.",
        "Position 3 in its queue: 2 workloads ahead of it asking 12 GPUs; it asks 8.",
        "Estimated start: 2026-05-01 13:20 UTC (in 1h 20m) (likely between 2026-05-01 13:00 "
        "UTC (in 1h) and 2026-05-01 15:00 UTC (in 3h)).",
        "Run times: duration hints where given.",
        "Held back until 2026-05-01 12:10 UTC (in 10m) after 2 failed start(s).",
        "It waits: QUOTA_MAX: used 32 + requested 8 > max 32",
        "Earlier reasons, newest first:",
        "  2026-05-01 11:00 UTC (1h ago)  NO_CAPACITY: 8 GPUs free < 16"]


def test_pending_without_a_reason_yet():
    text = why_text(workload(reason=None, queue_position={
        "in_queue": 1, "ahead_gpus": 0, "estimated_start": None}), [], NOW)
    assert text.splitlines()[1:] == [
        "First in its queue; it asks 8 GPUs.",
        "Estimated start: not forecast yet (the forecast runs every minute).",
        "No reason yet: the next scheduling cycle will decide."]


def test_running_rejected_and_ended():
    adm = {"cluster": "bj", "gpus": 8, "flavor": "a100-80g", "borrowed": True,
           "admitted_at": "2026-05-01T11:00:00Z", "end_reason": "finished"}
    assert why_text(workload(state="running", admission=adm, queue_position=None), [], NOW) == (
        "resnet (#7) is running on cluster bj (8 GPUs of a100-80g, borrowed), admitted "
        "2026-05-01 11:00 UTC (1h ago).")
    assert why_text(workload(state="rejected"), [{**QUOTA, "at": "x"}], NOW) == (
        "resnet (#7) was rejected at submission:\n  QUOTA_MAX: used 32 + requested 8 > max 32")
    assert why_text(workload(state="finished", admission=adm, queue_position=None,
                             finished_at="2026-05-01T11:30:00Z"), [], NOW) == (
        "resnet (#7) finished 2026-05-01 11:30 UTC (30m ago).\n"
        "Its last admission ended: finished.")


def test_why_prints_the_servers_plain_words_with_readable_times():
    """The API's `reason_text` (and each reason's `text`) is what `allot why` prints, its ISO
    8601 times as dates; the engine's code follows in brackets. Without them (an older
    server), the code and the engine's text."""
    cooldown = {"code": "COOLDOWN", "message": "queue rd: a workload was reclaimed; no borrowing "
                "admissions until 1777637400.5 (reclaim_cooldown_s 600)"}
    plain = ("Another queue just took back GPUs that queue rd had borrowed, so rd may not "
             "borrow again until 2026-05-01T12:10:00Z (a pause of 10 min after every reclaim, "
             "so the capacity goes to its owner).")
    reasons = [{**cooldown, "text": plain, "at": "2026-05-01T11:58:00Z"},
               {**QUOTA, "text": "The queue rd/vision is at its limit.",
                "at": "2026-05-01T11:00:00Z"}]
    lines = why_text(workload(reason=cooldown, reason_text=plain), reasons, NOW).splitlines()
    waits = next(line for line in lines if line.startswith("It waits: "))
    assert waits == ("It waits: Another queue just took back GPUs that queue rd had borrowed, "
                     "so rd may not borrow again until 2026-05-01 12:10 UTC (in 10m) (a pause "
                     "of 10 min after every reclaim, so the capacity goes to its owner). "
                     "[COOLDOWN]")
    assert "1777637400" not in "\n".join(lines)
    assert lines[-1] == ("  2026-05-01 11:00 UTC (1h ago)  The queue rd/vision is at its "
                         "limit. [QUOTA_MAX]")
    rejected = why_text(workload(state="rejected"), [{**QUOTA, "text": "Too big.", "at": "x"}],
                        NOW)
    assert rejected.splitlines()[1] == "  Too big. [QUOTA_MAX]"


def test_a_submission_split_into_groups_says_so():
    gangs = [{"id": 40 + i, "name": f"vllm-{i}", "state": "pending"} for i in range(3)]
    assert gangs_lines(workload(gangs=gangs)) == [
        "3 groups, each a workload admitted on its own: vllm-0 (#40) .. vllm-2 (#42); the "
        "figures above are one group's."]
    assert gangs_lines(workload()) == []
