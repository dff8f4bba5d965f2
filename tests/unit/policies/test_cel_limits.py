"""The limits checked before the CEL library sees an expression, and evaluation in a child
process with a time budget."""

import os
import signal
import time

import pytest

from policies.cel_limits import MAX_CHARS, run_with_budget, scan


def test_an_expression_within_the_limits_passes():
    assert scan('request.flavors.exists(f, f.startsWith("h100")) && [1, [2, [3]]].size() > 0') \
        is None


def test_a_long_expression_is_refused_with_its_length():
    assert scan("1 + " * 1100 + "1") == (
        MAX_CHARS, "the expression is 4401 characters long; the limit is 4096")


def test_brackets_nested_past_32_are_refused_where_the_33rd_opens():
    src = "(" * 33 + "1" + ")" * 33
    assert scan(src) == (32, "brackets nested 33 deep; the limit is 32")
    assert scan("[" * 20 + "{'a': (" + ")}" + "]" * 20) is None
    assert scan("(" * 32 + "1" + ")" * 32) is None


def test_brackets_in_strings_and_comments_do_not_count():
    assert scan('"' + "(" * 40 + '" + \'' + "[" * 40 + "' + r\"\\\" + '''((((\n" + "(" * 40
                + "'''") is None
    assert scan("1 // " + "(" * 40 + "\n+ 2") is None


def test_comprehensions_nested_past_2_are_refused():
    two = "[1, 2].map(a, [3].all(b, b > a))"
    assert scan(two) is None
    three = "[1].map(a, [2].map(b, [3].exists(c, c > a + b)))"
    index, message = scan(three)
    assert three[index - 7:index] == ".exists" and message == (
        "comprehensions (all, exists, exists_one, map, filter) nested 3 deep; the limit is 2")
    # chained, not nested: each runs on the other's result
    assert scan("[1].map(a, a).map(b, b).filter(c, c > 0).all(d, d > 0)") is None


def test_the_testers_inputs_are_refused_before_parsing():
    assert "200001 characters" in scan("(" * 100_000 + "1" + ")" * 100_000)[1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_run_within_its_budget_passes():
    assert run_with_budget(lambda: None, 1.0) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_run_past_its_budget_is_stopped():
    start = time.monotonic()
    assert run_with_budget(lambda: time.sleep(30), 0.2) == (
        "its evaluation took longer than 0.2 s (stopped)")
    assert time.monotonic() - start < 10


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_crashing_run_is_named():
    assert run_with_budget(lambda: os.kill(os.getpid(), signal.SIGKILL), 5.0) == (
        "the CEL library crashed evaluating it")
