"""`allot` against a live portal: login, submit (manifest and flags), list, status, why,
cancel, queues, top, usage, capacity requests, policy tests; the output formats; the exit
codes of bad input (a bad manifest names the field, a wrong password, an unknown id, a
server that is down)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from scheduling.models import Workload
from scheduling.workers.cycle import cycle_run
from tests.factories import PASSWORD

from .conftest import org, priority_classes  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = """\
name: resnet-cli
queue: rd/vision
priority_class: training
image: registry.local/train:1.4
command: [python, train.py]
duration_hint_s: 3600
pods:
  - count: 1
    flavors: [a100-80g]
    gpus: 8
    cpu: 8
    memory_gib: 64
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_researcher_flow(cli, org, priority_classes, tokens, tmp_path, config_file):  # noqa: F811
    # Signing in: the token is saved for the server, readable by its owner only.
    ran = cli("login", "-u", "alice", "--password-stdin", stdin=PASSWORD + "\n")
    assert ran.code == 0, ran.err
    assert "Signed in to http://" in ran.out and " as alice" in ran.out
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(config_file.parent.stat().st_mode) == 0o700
    saved = tomllib.loads(config_file.read_text())
    assert saved["username"] == "alice" and saved["scope"] == "write"
    assert saved["server"].startswith("http://localhost") and len(saved["token"]) > 20

    # bob's 32-GPU job fills vision's max (and the fleet); alice's then wait behind it.
    blocker = cli("submit", "--queue", "rd/vision", "--gpus", "8", "--pods", "4", "--flavor",
                  "a100-80g", "--name", "blocker", "-o", "json", token=tokens["bob"])
    assert blocker.code == 0, blocker.err
    blocker_id = json.loads(blocker.out)["id"]
    cycle_run(wait=True)
    assert Workload.objects.get(pk=blocker_id).state in ("reserved", "running")

    ran = cli("submit", write(tmp_path, "job.yaml", MANIFEST))
    assert ran.code == 0, ran.err
    assert ran.out.startswith("Submitted resnet-cli (#") and "pending in rd/vision" in ran.out
    manifest_id = Workload.objects.get(name="resnet-cli").pk

    ran = cli("submit", "--queue", "rd/vision", "--gpus", "2", "--flavor", "a100-80g",
              "--name", "flags-job", "--duration", "2h", "--priority", "batch-low",
              "--command", "python train.py --lr '0.1 0.2'", "--label", "team=cv",
              "-o", "json")
    assert ran.code == 0, ran.err
    flags = json.loads(ran.out)
    assert (flags["name"], flags["state"], flags["gpus"], flags["priority_class"]) == (
        "flags-job", "pending", 2, "batch-low")
    assert flags["command"] == ["python", "train.py", "--lr", "0.1 0.2"]
    assert flags["duration_hint_s"] == 7200 and flags["labels"] == {"team": "cv"}
    assert flags["pod_sets"][0]["flavors"] == ["a100-80g"]

    cycle_run(wait=True)

    # list: a table, JSON, YAML; filters; --limit with the count of the rest.
    ran = cli("list")
    assert ran.code == 0
    header, *rows = ran.out.splitlines()
    assert header.split() == ["ID", "NAME", "QUEUE", "OWNER", "STATE", "GPUS", "PRIORITY",
                              "AGE", "REASON"]
    assert [r.split()[1] for r in rows] == ["flags-job", "resnet-cli", "blocker"]
    listed = json.loads(cli("list", "-o", "json").out)
    assert [w["name"] for w in listed] == ["flags-job", "resnet-cli", "blocker"]
    assert yaml.safe_load(cli("list", "-o", "yaml").out) == listed
    assert [w["name"] for w in json.loads(cli("list", "--mine", "-o", "json").out)] == [
        "flags-job", "resnet-cli"]
    pending = json.loads(cli("list", "--state", "pending", "-o", "json").out)
    assert {w["name"] for w in pending} == {"flags-job", "resnet-cli"}
    both = json.loads(cli("list", "--state", "reserved,running", "--state", "pending",
                          "-o", "json").out)
    assert len(both) == 3
    ran = cli("list", "--limit", "1")
    assert len(ran.out.splitlines()) == 3 and "(1 of 3 shown" in ran.out
    assert cli("list", "--queue", "rd/nlp").out.strip() == "No workloads."

    # status and why: the reason with its numbers, the place in the queue, the estimate.
    ran = cli("status", str(manifest_id))
    assert ran.code == 0
    assert ran.out.startswith(f"resnet-cli (#{manifest_id}): pending, 8 GPUs")
    assert "1 x 8 GPU on a100-80g (8 CPU, 64 GiB)" in ran.out
    assert "QUOTA_MAX" in ran.out
    assert yaml.safe_load(cli("status", str(manifest_id), "-o", "yaml").out)["id"] == \
        manifest_id
    ran = cli("why", str(manifest_id))
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0] == f"resnet-cli (#{manifest_id}) is pending in rd/vision."
    assert lines[1] == "First in its queue; it asks 8 GPUs."
    assert lines[2].startswith("Estimated start: ")  # no forecast has run since it was submitted
    assert "not forecast yet" in lines[2]
    assert "QUOTA_MAX" in lines[3] and "32" in lines[3] and "8" in lines[3], lines[3]
    why = json.loads(cli("why", str(flags["id"]), "-o", "json").out)
    assert why["queue_position"]["in_queue"] == 2 and why["queue_position"]["ahead_gpus"] == 8
    assert why["reason"]["code"] == "QUOTA_MAX" and why["reasons"][0]["code"] == "QUOTA_MAX"
    ran = cli("why", str(blocker_id))
    assert "is reserved on cluster bj" in ran.out or "is running on cluster bj" in ran.out

    # cancel, twice: the second is refused with the API's message.
    ran = cli("cancel", str(manifest_id))
    assert (ran.code, ran.out.strip()) == (0, f"resnet-cli (#{manifest_id}): cancelled.")
    ran = cli("cancel", str(manifest_id))
    assert ran.code == 1 and "already cancelled" in ran.err
    # Another team's workload is as unknown as one that does not exist.
    assert cli("status", str(blocker_id), token=tokens["carol"]).code == 3

    # logout revokes the saved token: the next call is not signed in.
    ran = cli("logout")
    assert ran.code == 0 and "token revoked" in ran.out
    ran = cli("list")
    assert ran.code == 4 and "not signed in" in ran.err


def test_bad_input_exit_codes(cli, org, priority_classes, tokens, tmp_path, config_file):  # noqa: F811
    alice = tokens["alice"]
    # A bad manifest: the API's message names the field and the bound; nothing is saved.
    bad = MANIFEST.replace("gpus: 8", "gpus: 65")
    ran = cli("submit", write(tmp_path, "bad.yaml", bad), token=alice)
    assert ran.code == 1
    assert "pods[0].gpus: 65 > 64: must be at most 64" in ran.err
    ran = cli("submit", write(tmp_path, "bad.json", json.dumps(
        {"name": "Bad Name", "queue": "rd/nope", "pods": [{"flavors": ["a100-80g"]}]})),
        token=alice)
    assert ran.code == 1 and "name: 'Bad Name' is not DNS-safe" in ran.err
    assert "queue: unknown queue 'rd/nope'" in ran.err
    # Caught before sending: a misspelt field, YAML that does not parse, no file.
    ran = cli("submit", write(tmp_path, "typo.yaml", MANIFEST.replace("priority_class",
                                                                      "priorty_class")),
              token=alice)
    assert ran.code == 1 and "unknown field 'priorty_class'" in ran.err
    ran = cli("submit", write(tmp_path, "broken.yaml", "name: [x\n"), token=alice)
    assert ran.code == 1 and "line 2, column 1" in ran.err
    assert cli("submit", str(tmp_path / "missing.yaml"), token=alice).code == 2
    assert Workload.objects.count() == 0
    # A request the engine can never run is recorded rejected: exit 1 with the reasons.
    ran = cli("submit", "--queue", "rd/vision", "--gpus", "8", "--pods", "8", "--flavor",
              "a100-80g", "--name", "too-big", token=alice)
    assert ran.code == 1 and "was rejected" in ran.err and "QUOTA_MAX" in ran.err
    # Usage errors: argparse's own, and the flags a submission needs.
    assert cli("submit", "--gpus", "8", token=alice).code == 2
    assert cli("status", "abc", token=alice).code == 2
    assert cli("list", "--state", "sleeping", token=alice).code == 2
    # Not found, and the auth errors.
    ran = cli("status", "999999", token=alice)
    assert ran.code == 3 and "no such workload" in ran.err
    ran = cli("login", "-u", "alice", "--password-stdin", stdin="wrong\n")
    assert ran.code == 4 and "Unable to sign in" in ran.err
    assert cli("list", token="not-a-token").code == 4
    assert cli("list").code == 4  # no token at all
    ran = cli("login", "-u", "alice", "--password-stdin", "--scope", "read", stdin=PASSWORD)
    assert ran.code == 0
    ran = cli("cancel", "1")  # a read token may not POST
    assert ran.code == 4 and "scope is read" in ran.err
    # A token made in the portal (single sign-on users have no password) is saved once the
    # server accepts it; a bad one is refused with the auth exit code and not saved.
    ran = cli("login", "--token-stdin", stdin="not-a-token\n")
    assert ran.code == 4
    ran = cli("login", "--token-stdin", stdin=alice + "\n")
    assert ran.code == 0, ran.err
    saved = tomllib.loads(config_file.read_text())
    assert saved["token"] == alice and saved["scope"] == "write"
    assert cli("list").code == 0
    # The server down: nothing listens on the port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ran = cli("list", token=alice, server=f"http://127.0.0.1:{port}")
    assert ran.code == 5 and "cannot reach" in ran.err and "refused" in ran.err


def test_queues_top_and_usage(cli, org, priority_classes, tokens):  # noqa: F811
    from billing.services import (
        charges_post_hour,
        cost_center_create,
        rate_card_create,
        team_cost_center_set,
        usage_rollup_hour,
    )
    from scheduling.models import Admission

    hour = datetime(2026, 3, 2, 10, tzinfo=UTC)
    cc = cost_center_create(code="rd", name="R&D", contact_email="finance@example.org")
    team_cost_center_set(team=org.vision_team, cost_center=cc)
    rate_card_create(flavor=org.a100, resource="gpu", rate=Decimal("2.50"),
                     frozen_rate=Decimal("1.00"), effective_from=hour - timedelta(days=1))
    from scheduling.models import PriorityClass

    done = Workload.objects.create(
        name="done", queue=org.vision, team=org.vision_team, owner=org.alice, state="finished",
        priority_class=PriorityClass.objects.get(name="training"), submitted_at=hour,
        state_changed_at=hour)
    Admission.objects.create(workload=done, cluster=org.cluster, flavor=org.a100, nodes=["n"],
                             gpus=8, reserved_at=hour, running_at=hour,
                             ended_at=hour + timedelta(minutes=30))
    usage_rollup_hour(hour=hour, now=hour + timedelta(hours=2), telemetry={})
    charges_post_hour(hour=hour, now=hour + timedelta(hours=2))

    ran = cli("usage", "--from", "2026-03-01", "--to", "2026-04-01", token=tokens["alice"])
    assert ran.code == 0, ran.err
    assert "vision" in ran.out and "Total: 4.0000 GPU-hours, 10.00 EUR" in ran.out, ran.out
    data = json.loads(cli("usage", "--from", "2026-03-01", "--to", "2026-04-01",
                          "--group-by", "queue", "-o", "json", token=tokens["alice"]).out)
    assert [(r["key"], r["cost"]) for r in data["rows"]] == [("rd/vision", "10.00")]
    ran = cli("usage", "--from", "2026-02-30", token=tokens["alice"])
    assert ran.code == 1 and "from: '2026-02-30' is not a date" in ran.err

    submitted = cli("submit", "--queue", "rd/vision", "--gpus", "8", "--pods", "2",
                    "--flavor", "a100-80g", "--name", "train", token=tokens["alice"])
    assert submitted.code == 0, submitted.err
    cycle_run(wait=True)

    ran = cli("queues", token=tokens["root"])
    assert ran.code == 0
    rows = [line.split() for line in ran.out.splitlines()]
    assert rows[0] == ["QUEUE", "FLAVOR", "USED", "MIN", "MAX", "BORROWED", "LENT", "PENDING"]
    assert rows[1] == ["rd/", "a100-80g", "16", "32", "64", "0", "0", "0"]
    # vision borrows the 8 GPUs of nlp's min that nlp does not use (nlp lends them).
    assert rows[2:] == [["nlp", "a100-80g", "0", "8", "32", "0", "8", "0"],
                        ["vision", "a100-80g", "16", "8", "32", "8", "0", "0"]], ran.out
    assert ran.out.splitlines()[2].startswith("  nlp ")  # indented under rd/
    tree = json.loads(cli("queues", "rd/vision", "-o", "json", token=tokens["alice"]).out)
    assert tree[0]["path"] == "rd/vision" and tree[0]["quota"]["a100-80g"]["gpu"]["used"] == 16
    assert cli("queues", "rd/nope", token=tokens["alice"]).code == 3

    ran = cli("top", "--once", token=tokens["root"])
    assert ran.code == 0, ran.err
    assert "Workloads: pending 0  reserved " in ran.out
    assert "GPUs: 16 used of 32 ready (50%)" in ran.out
    assert any(line.split()[:5] == ["bj", "bj", "1.00", "a100-80g", "16"]
               for line in ran.out.splitlines()), ran.out
    frame = json.loads(cli("top", "--once", "-o", "json", token=tokens["root"]).out)
    assert sum(frame["workloads"].values()) == 1 and frame["clusters"][0]["name"] == "bj"


def test_capacity_request_approve_deny(cli, org, tokens):  # noqa: F811
    ran = cli("capacity", "request", "--queue", "rd/vision", "--flavor", "a100-80g",
              "--max", "40", "--justification", "a deadline", "-o", "json",
              token=tokens["bob"])
    assert ran.code == 0, ran.err
    first = json.loads(ran.out)
    assert (first["state"], first["max"], first["requested_by"]) == ("submitted", 40, "bob")
    second = json.loads(cli("capacity", "request", "--queue", "rd/vision", "--flavor",
                            "a100-80g", "--min", "12", "--justification", "more",
                            "-o", "json", token=tokens["bob"]).out)
    ran = cli("capacity", "request", "--queue", "rd/nlp", "--flavor", "a100-80g", "--min",
              "1", "--justification", "x", token=tokens["bob"])
    assert ran.code == 1 and "queue: no queue 'rd/nlp' among your teams' queues" in ran.err

    ran = cli("capacity", "list", token=tokens["root"])
    assert [line.split()[:2] for line in ran.out.splitlines()[1:]] == [
        [str(second["id"]), "submitted"], [str(first["id"]), "submitted"]]
    # A researcher may not decide.
    ran = cli("capacity", "approve", str(first["id"]), token=tokens["alice"])
    assert ran.code == 4, (ran.code, ran.err)
    ran = cli("capacity", "approve", str(first["id"]), "--comment", "ok", token=tokens["root"])
    assert ran.code == 0, ran.err
    assert ran.out.startswith(f"Capacity request #{first['id']}: active.")
    assert "decided by root" in ran.out
    org.vision_q.refresh_from_db()
    assert org.vision_q.max == 40
    assert cli("capacity", "deny", str(second["id"]), token=tokens["root"]).code == 2
    ran = cli("capacity", "deny", str(second["id"]), "--comment", "not now",
              token=tokens["root"])
    assert ran.code == 0 and ": denied." in ran.out and "not now" in ran.out
    assert cli("capacity", "deny", "999999", "--comment", "x", token=tokens["root"]).code == 3
    active = json.loads(cli("capacity", "list", "--state", "active", "-o", "json",
                            token=tokens["bob"]).out)
    assert [r["id"] for r in active] == [first["id"]]


def test_policies_test(cli, org, tokens, tmp_path):  # noqa: F811
    examples = ROOT / "policies" / "examples"
    ran = cli("policies", "test", str(examples), token=tokens["root"])
    assert ran.code == 0, ran.err
    assert ran.out.splitlines()[-1] == "14 passed, 0 failed (5 policies in 5 files)"
    failing = tmp_path / "repo"
    failing.mkdir()
    (failing / "gpus.yaml").write_text(
        "name: at-most-8\nkind: validate\nrule: request.gpus <= 8\n"
        "message: '\"asked \" + string(request.gpus)'\ntests:\n"
        "  - {name: small, input: {request: {gpus: 4}}, expect: allow}\n"
        "  - {name: wrong on purpose, input: {request: {gpus: 16}}, expect: allow}\n")
    (failing / "broken.yml").write_text("name: broken\nkind: validate\nrule: 'request.gpus <'\n")
    ran = cli("policies", "test", str(failing), "-o", "json", token=tokens["root"])
    assert ran.code == 1
    report = json.loads(ran.out)
    assert (report["passed"], report["failed"], report["files"]) == (1, 2, 2)
    outcomes = {(r["policy"], r["case"]): (r["passed"], r["detail"]) for r in report["results"]}
    assert outcomes[("at-most-8", "wrong on purpose")] == (False,
                                                           "expected allow, got deny: asked 16")
    assert outcomes[("broken", "(definition)")][1].startswith("rule: line 1, column")
    # Admins only (as "try"), and an unreadable file is a usage error before any request.
    assert cli("policies", "test", str(examples), token=tokens["alice"]).code == 4
    (failing / "bad.yaml").write_text("name: [\n")
    assert cli("policies", "test", str(failing), token=tokens["root"]).code == 2


def test_the_installed_command(live_server, org, tokens, config_file):  # noqa: F811
    """`allot` as the shell runs it: the console script pyproject.toml declares, in a process
    of its own, with the token from the environment; its exit codes reach the shell."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"allot": "allot_cli.main:main"}
    env = {**os.environ, "ALLOT_SERVER": live_server.url, "ALLOT_TOKEN": tokens["alice"],
           "PYTHONPATH": str(ROOT)}
    # What the console script runs: `sys.exit(main())` with the process's arguments.
    launcher = "import sys; from allot_cli.main import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", launcher, "queues", "-o", "json"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert [q["path"] for q in json.loads(done.stdout)] == ["rd/vision"]
    done = subprocess.run([sys.executable, "-m", "allot_cli", "why", "424242"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 3 and done.stderr.startswith("allot: error:")
