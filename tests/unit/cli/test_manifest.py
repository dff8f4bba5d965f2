"""allot_cli.manifest: the body of a submission from a manifest file or flags; what is caught
before sending (an unreadable file, YAML or JSON that does not parse, a misspelt field)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest

from allot_cli import manifest
from allot_cli.errors import CliError, Exit
from allot_cli.manifest import parse_duration, parse_label, read_manifest, submission

FLAGS = {"name": None, "queue": None, "priority": None, "image": None, "command": None,
         "duration": None, "labels": None, "gpus": None, "pods": None, "flavor": None,
         "cpu": None, "memory": None}


def flags(**given):
    return {**FLAGS, **given}


def test_fields_are_the_apis():
    from scheduling.api_workloads import PodSetInputSerializer, WorkloadInputSerializer

    assert set(manifest.WORKLOAD_FIELDS) == set(WorkloadInputSerializer().fields)
    assert set(manifest.POD_SET_FIELDS) == set(PodSetInputSerializer().fields)


@pytest.mark.parametrize(("text", "seconds"), [
    ("3600", 3600), ("90s", 90), ("45m", 2700), ("2h", 7200), ("1h30m", 5400), ("2d", 172800),
    ("1d2h3m4s", 93784), (" 2H ", 7200)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "2x", "-5", "1.5h", "0", "0m"])
def test_bad_durations_name_the_text(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_labels():
    assert parse_label("team=cv") == ("team", "cv")
    assert parse_label("empty=") == ("empty", "")
    for bad in ("novalue", "=x"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parse_label(bad)


def test_flags_make_one_pod_set():
    body = submission(None, flags(queue="rd/vision", gpus=8, pods=2, flavor=["a100-80g,h100",
                                                                             "v100"],
                                  command="python train.py --name 'a b'", duration=5400,
                                  priority="batch-low", cpu=4.0, memory=32.0,
                                  labels=[("team", "cv")]))
    assert body["pods"] == [{"count": 2, "gpus": 8, "flavors": ["a100-80g", "h100", "v100"],
                             "cpu": 4.0, "memory_gib": 32.0}]
    assert body["command"] == ["python", "train.py", "--name", "a b"]
    assert (body["duration_hint_s"], body["priority_class"], body["labels"]) == (
        5400, "batch-low", {"team": "cv"})
    assert body["name"].startswith("job-")


def test_default_name_is_a_dns_label():
    assert manifest.default_name(datetime(2026, 5, 1, 12, 3, 4, tzinfo=UTC)) == \
        "job-20260501-120304"


def test_flags_need_queue_flavor_and_gpus():
    with pytest.raises(CliError) as caught:
        submission(None, flags(gpus=8))
    assert caught.value.code == Exit.USAGE
    assert "(missing: --queue, --flavor)" in caught.value.message


def test_manifest_with_flags_overriding(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: a\nqueue: rd/vision\nlabels: {x: '1'}\n"
                    "pods: [{count: 1, flavors: [a100-80g], gpus: 4}]\n")
    body = submission(str(path), flags(name="b", labels=[("y", "2")], duration=60))
    assert body == {"name": "b", "queue": "rd/vision", "labels": {"x": "1", "y": "2"},
                    "duration_hint_s": 60,
                    "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 4}]}
    with pytest.raises(CliError) as caught:
        submission(str(path), flags(gpus=8, flavor=["a"]))
    assert caught.value.code == Exit.USAGE and "--gpus, --flavor describe a pod set" in \
        caught.value.message


def test_json_and_stdin(tmp_path, monkeypatch):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"name": "j", "queue": "q", "pods": []}))
    assert read_manifest(str(path))["name"] == "j"
    monkeypatch.setattr("sys.stdin", io.StringIO("name: s\nqueue: q\n"))
    assert read_manifest("-") == {"name": "s", "queue": "q"}


@pytest.mark.parametrize(("name", "text", "code", "message"), [
    ("bad.yaml", "name: [x\n", Exit.REFUSED, "bad.yaml: line 2, column 1: expected ',' or ']'"),
    ("bad.json", '{"name": "x",\n "queue": }', Exit.REFUSED,
     "bad.json: line 2, column 11: Expecting value"),
    ("list.yaml", "- a\n- b\n", Exit.REFUSED, "a manifest is a mapping of the workload's "
                                             "fields (name, queue, priority_class, pods, ...), "
                                             "not list"),
    ("empty.yaml", "", Exit.REFUSED, "not empty"),
    ("typo.yaml", "name: x\nqueu: a\npods: [{gpus: 1, flavours: [a]}]\n", Exit.REFUSED,
     "typo.yaml: unknown fields 'queu', 'pods[0].flavours' (a workload has name, queue,"),
])
def test_what_is_caught_before_sending(tmp_path, name, text, code, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CliError) as caught:
        read_manifest(str(path))
    assert caught.value.code == code
    assert message in caught.value.message


def test_a_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(CliError) as caught:
        read_manifest(str(tmp_path / "nope.yaml"))
    assert caught.value.code == Exit.USAGE
    assert caught.value.message.endswith("nope.yaml: No such file or directory")


def test_yaml_dates_become_text(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: x\nlabels: {day: 2026-05-01}\n")
    assert read_manifest(str(path))["labels"] == {"day": "2026-05-01"}
