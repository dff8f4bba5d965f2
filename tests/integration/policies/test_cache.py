"""The submission check's caches (core.changes): a committed change to a policy,
quota, cluster, node, approval, usage or budget is seen by the next submission, in this
process and when another process made it; a rolled-back write is never cached; a warm check
costs one query."""

import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from core import changes
from policies.models import Policy, TeamApproval
from policies.services import policy_create, policy_update
from policies.submission import policy_submission_check
from quotas.models import QuotaEntry
from scheduling.extensions import SubmissionContext
from scheduling.models import Cluster, Node
from tests.factories import quota_update

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                 reason="the change log is PostgreSQL's")

SHOW = {
    "name": "show", "kind": "validate", "mode": "audit", "rule": "false",
    "message": 'string(queue.max["a100-80g/gpu"]) + " used " + string(queue.used["a100-80g/gpu"])'
               ' + " cap " + string(fleet.capacity["a100-80g"]) + " ok " '
               '+ join(team.approvals, ",") + " in " + join(fleet.regions, ",") + " cc "'
               ' + cost_center.name + " " + fmt(cost_center.budget)',
}


def seen(org):
    verdict = policy_submission_check(SubmissionContext(
        user=org.alice, queue=org.team_a, team=org.teams["team-a"],
        request={"name": "x", "queue": "rd/team-a",
                 "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 8}]}))
    return [] if verdict is None else [line.split(": ", 2)[2] for line in verdict.audit]


def test_a_warm_check_is_one_query(torg):
    policy_create(user=torg.admin, data=SHOW)
    seen(torg)
    with CaptureQueriesContext(connection) as queries:
        assert seen(torg) == ["40 used 0 cap 64 ok  in east,north cc  0"]
    reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT")]
    assert len(reads) == 1 and "policies_changes_since" in reads[0]


def test_every_committed_change_is_seen_by_the_next_submission(torg):
    org = torg
    policy_create(user=org.admin, data=SHOW)
    assert seen(org) == ["40 used 0 cap 64 ok  in east,north cc  0"]
    quota_update(QuotaEntry.objects.filter(queue=org.team_a), max=Decimal(24))
    assert seen(org) == ["24 used 0 cap 64 ok  in east,north cc  0"]
    org.admit(org.team_a, 16)
    assert seen(org) == ["24 used 16 cap 64 ok  in east,north cc  0"]
    Node.objects.filter(name="bj-1-a100-0").update(ready=False)
    assert seen(org) == ["24 used 16 cap 56 ok  in east,north cc  0"]
    TeamApproval.objects.create(team=org.teams["team-a"], name="h100")
    assert seen(org) == ["24 used 16 cap 56 ok h100 in east,north cc  0"]
    Cluster.objects.filter(name="sh-1").update(enabled=False)
    assert seen(org) == ["24 used 16 cap 24 ok h100 in north cc  0"]
    policy_update(user=org.admin, policy=Policy.objects.get(name="show"),
                  data={"message": '"v2 " + string(queue.max["a100-80g/gpu"])'})
    assert seen(org) == ["v2 24"]
    Policy.objects.filter(name="show").update(mode="off")  # even a raw UPDATE
    assert seen(org) == []


def test_a_budget_change_is_seen_by_the_next_submission(torg):
    billing = pytest.importorskip("billing.models")
    org = torg
    policy_create(user=org.admin, data=SHOW)
    assert seen(org)[0].endswith("cc  0")
    cc = billing.CostCenter.objects.create(code="cc-rd", name="R&D", currency="EUR")
    billing.TeamCostCenter.objects.create(team=org.teams["team-a"], cost_center=cc)
    assert seen(org)[0].endswith("cc cc-rd 0")
    budget = billing.Budget.objects.create(cost_center=cc, period="monthly",
                                           amount=Decimal("1000.00"))
    assert seen(org)[0].endswith("cc cc-rd 1000")
    billing.Budget.objects.filter(pk=budget.pk).update(amount=Decimal("2500.50"))
    assert seen(org)[0].endswith("cc cc-rd 2500.5")


def test_a_write_of_the_checking_transaction_is_seen_and_never_cached(torg):
    org = torg
    policy_create(user=org.admin, data=SHOW)
    assert seen(org)[0].startswith("40 ")

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        quota_update(QuotaEntry.objects.filter(queue=org.team_a), max=Decimal(8))
        assert seen(org)[0].startswith("8 ")
        assert seen(org)[0].startswith("8 ")
        raise Undo
    assert seen(org)[0].startswith("40 ")


def _other_process(code: str) -> None:
    """Run `code` in a new Python process on this test database."""
    s = connection.settings_dict
    url = (f"postgres://{s['USER']}:{s['PASSWORD'] or ''}@{s['HOST'] or '127.0.0.1'}:"
           f"{s['PORT'] or 5432}/{s['NAME']}")
    script = "import django\ndjango.setup()\n" + textwrap.dedent(code)
    root = Path(__file__).resolve().parents[3]
    env = {"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": os.environ["DJANGO_SETTINGS_MODULE"],
           "PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_changes_made_by_another_process_are_seen(torg):
    org = torg
    policy_create(user=org.admin, data=SHOW)
    assert seen(org) == ["40 used 0 cap 64 ok  in east,north cc  0"]
    _other_process("""
        from decimal import Decimal
        from quotas.models import QuotaEntry, Team
        from policies.models import TeamApproval
        from tests.factories import quota_update
        quota_update(QuotaEntry.objects.filter(queue__path="rd/team-a"), max=Decimal(32))
        TeamApproval.objects.create(team=Team.objects.get(name="team-a"), name="h100")
    """)
    assert seen(org) == ["32 used 0 cap 64 ok h100 in east,north cc  0"]
    _other_process("""
        from policies.models import Policy
        from policies.services import policy_update
        policy_update(user=None, policy=Policy.objects.get(name="show"),
                      data={"message": '"from elsewhere"'})
    """)
    assert seen(org) == ["from elsewhere"]
    _other_process("""
        from policies.models import Policy
        Policy.objects.all().delete()
    """)
    assert seen(org) == []


def test_an_idle_cache_starts_afresh(torg, monkeypatch):
    policy_create(user=torg.admin, data=SHOW)
    seen(torg)
    store = next(iter(changes._stores().values()))
    store.parts["config"]["stale"] = True
    monkeypatch.setattr(store, "checked_at", store.checked_at - changes.MAX_IDLE_S - 1)
    seen(torg)
    assert "stale" not in store.parts["config"]


def test_a_submission_does_not_invalidate_the_next_check(torg):
    """Inserting a workload changes no usage: the next check is still one query."""
    from scheduling.services import workload_submit

    org = torg
    policy_create(user=org.admin, data=SHOW)
    seen(org)
    workload_submit(user=org.alice, data={
        "name": "one", "queue": "rd/team-a",
        "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 8}]})
    with CaptureQueriesContext(connection) as queries:
        seen(org)
    assert [q["sql"] for q in queries if q["sql"].startswith("SELECT")] == [
        q["sql"] for q in queries if "policies_changes_since" in q["sql"]]


def test_change_rows_are_pruned_only_long_after_a_pruner_saw_them(torg):
    policy_create(user=torg.admin, data=SHOW)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM policies_change WHERE seen_at IS NULL")
        assert cursor.fetchone()[0] > 0
    changes.prune(every_s=0)  # stamps them
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM policies_change WHERE seen_at IS NULL")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM policies_change")
        rows = cursor.fetchone()[0]
    assert changes.prune(every_s=0) == 0 and rows > 0  # seen just now: kept
    with connection.cursor() as cursor:
        cursor.execute("UPDATE policies_change SET seen_at = seen_at - interval '11 minutes'")
    assert changes.prune(every_s=0) == rows
