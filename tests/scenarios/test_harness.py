"""The scenario harness's own comparison rules, checked without the runner."""

from tests.scenarios.test_scenarios import _contains_all, compare, match_errors

RESULT = {
    "scenario": "x",
    "workloads": {
        "w1": {
            "state": "finished",
            "admissions": [{"at": 0, "cluster": "c", "flavor": "a100-80g", "borrowed": False,
                            "nodes": ["c-a100-80g-0"]}],
            "preemptions": [{"at": 100, "by": "w3", "kind": "reclaim"}],
            "finished_at": 3730.0,
            "reasons": [
                {"at": 100, "code": "WAITING_FOR_PREEMPTION", "message": "waiting for w2"},
                {"at": 130, "code": "QUOTA_MAX",
                 "message": "QUOTA_MAX: queue rd/vision a100-80g/gpu: used 20 + requested 8 > "
                            "max 24"},
            ],
        }
    },
    "metrics": {"gpu_allocation_rate": 0.93, "preemptions": 3},
}


def test_matching_expectation_has_no_differences():
    expect = {
        "workloads": {"w1": {
            "state": "finished", "finished_at": 3730,
            "admissions": [{"at": {"min": 0, "max": 5}, "cluster": "c", "borrowed": False}],
            "preemptions": [{"at": 100, "by": "w3", "kind": "reclaim"}],
            "reasons": [{"code": "WAITING_FOR_PREEMPTION"},
                        {"at": 130, "code": "QUOTA_MAX", "contains": ["rd/vision", "20", "24"]}],
            "reason_codes_absent": ["COOLDOWN"],
        }},
        "metrics": {"gpu_allocation_rate": {"approx": 0.9, "tol": 0.05}, "preemptions": 3},
    }
    assert compare(RESULT, expect) == []


def test_each_difference_is_named_with_both_values():
    expect = {
        "workloads": {
            "w1": {"state": "running", "finished_at": 100,
                   "admissions": [{"at": 0}, {"at": 50}],
                   "preemptions": [{"at": 100, "kind": "priority"}],
                   "reasons": [{"code": "QUOTA_MAX", "contains": ["25"]}],
                   "reason_codes_absent": ["QUOTA_MAX"]},
            "ghost": {"state": "pending"},
        },
        "metrics": {"preemptions": 2, "jain_fairness": 1.0},
    }
    problems = compare(RESULT, expect)
    text = "\n".join(problems)
    assert "workloads.w1.state: expected 'running', got 'finished'" in text
    assert "workloads.w1.finished_at: expected 100, got 3730.0" in text
    assert "workloads.w1.admissions: expected 2 item(s), got 1" in text
    assert "workloads.w1.preemptions[0].kind: expected 'priority', got 'reclaim'" in text
    assert "no reason matching" in text
    assert "QUOTA_MAX must not appear" in text
    assert "workloads.ghost: missing from the result" in text
    assert "metrics.preemptions: expected 2, got 3" in text
    assert "metrics.jain_fairness: missing" in text
    assert len(problems) == 9


def test_reasons_are_an_ordered_subsequence():
    expect = {"workloads": {"w1": {"reasons": [{"code": "QUOTA_MAX"},
                                                {"code": "WAITING_FOR_PREEMPTION"}]}}}
    assert len(compare(RESULT, expect)) == 1


def test_numbers_match_whole():
    text = "used 20 + requested 8 > max 24.0; 3.5 s"
    assert _contains_all(text, ["8", "20", 24, "3.5"])
    assert not _contains_all(text, ["2"])
    assert not _contains_all(text, ["4"])
    assert not _contains_all(text, ["3"])


def test_error_groups_need_distinct_lines():
    lines = ["A: a100-80g/gpu: children's min 10 > min 8", "B: a100-80g/gpu: min 8 > max 4"]
    assert match_errors(lines, [["a100-80g/gpu", "8"], ["A", "10"]]) == []
    assert match_errors(lines, [["A"], ["A", "10"]]) == ["no line matches ['A', '10']"]
