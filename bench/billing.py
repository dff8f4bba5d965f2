"""Billing figures: `python -m bench.billing`.

1. A real Prometheus holding 1,000 GPUs x 24 h of DCGM_FI_PROF_GR_ENGINE_ACTIVE at a 60 s step
   (1.44 M samples, backfilled with `promtool tsdb create-blocks-from openmetrics`): the 24
   hourly usage records of 125 workloads x 8 GPUs built from `query_range` (target < 60 s),
   then priced into the ledger.
2. A month's invoice for a cost center with 20,000 workloads (target < 10 s).
3. `billing_verify` over 1,000,000 ledger entries (target < 30 s).

Runs on a throwaway PostgreSQL test database (DATABASE_URL's server; TEST_DATABASE_NAME names
it, default `test_allot_bench_billing`) and a Prometheus on a loopback port in 9091-9099.
`python -m bench.billing verify` runs only part 3. BENCH_EXPLAIN=1 prints the verify query's
plan with its timings and buffers; BENCH_KEEP=1 keeps the database, so two trees' databases can
be queried again side by side.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("TEST_DATABASE_NAME", "test_allot_bench_billing")

import django  # noqa: E402

django.setup()

import requests  # noqa: E402
from django.db import connection  # noqa: E402

GPUS, GPUS_PER_POD, HOURS = 1000, 8, 24
INVOICE_WORKLOADS = 20_000
VERIFY_ENTRIES = 1_000_000


def free_port() -> int:
    for port in range(9091, 9100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 9091-9099")


def world():
    from billing.services import cost_center_create, rate_card_create, team_cost_center_set
    from quotas.models import Flavor, Queue, Team
    from scheduling.models import Cluster, PriorityClass
    from tests.factories import UserFactory

    a100 = Flavor.objects.create(name="a100", gpu_memory_gib=80)
    root = Queue.objects.create(name="rd")
    leaf = Queue.objects.create(name="bench", parent=root, namespace="rd-bench")
    team = Team.objects.create(name="bench")
    cc = cost_center_create(code="rd", name="R&D")
    team_cost_center_set(team=team, cost_center=cc)
    rate_card_create(flavor=a100, resource="gpu", rate=Decimal("2.50"),
                     effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    pc, _ = PriorityClass.objects.get_or_create(name="training", defaults={"value": 1000})
    return {"flavor": a100, "leaf": leaf, "team": team, "cc": cc, "user": UserFactory(),
            "cluster": Cluster.objects.create(name="bj"), "pc": pc}


def workloads(w, n: int, start: datetime, end: datetime, gpus: int) -> list[int]:
    from scheduling.models import Admission, Workload

    objs = Workload.objects.bulk_create([
        Workload(name=f"w{i}", queue=w["leaf"], team=w["team"], owner=w["user"],
                 priority_class=w["pc"], submitted_at=start, state_changed_at=start,
                 state="finished")
        for i in range(n)
    ], batch_size=5000)
    Admission.objects.bulk_create([
        Admission(workload=o, cluster=w["cluster"], flavor=w["flavor"], nodes=["n"],
                  gpus=gpus, reserved_at=start, running_at=start + timedelta(minutes=2),
                  ended_at=end)
        for o in objs
    ], batch_size=5000)
    return [o.pk for o in objs]


def bench_telemetry(w) -> None:
    from billing.prometheus import PrometheusClient
    from billing.services import charges_post_hour, usage_rollup_hour

    prometheus = shutil.which("prometheus")
    promtool = shutil.which("promtool")
    if not prometheus or not promtool:
        print("1. telemetry: SKIPPED (prometheus/promtool not installed; "
              "run scripts/ensure_system_packages.sh)")
        return
    now = datetime.now(UTC)
    first = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS + 1)
    ids = workloads(w, GPUS // GPUS_PER_POD, first, first + timedelta(hours=HOURS),
                    GPUS_PER_POD)
    tmp = Path(tempfile.mkdtemp(prefix="allot-bench-prom-"))
    try:
        t0 = time.perf_counter()
        rnd = random.Random(7)
        metric = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
        with open(tmp / "data.om", "w") as out:
            out.write(f"# HELP {metric} Ratio of time the graphics engine is active.\n")
            out.write(f"# TYPE {metric} gauge\n")
            base = int(first.timestamp()) + 30
            for wid in ids:
                pod = f"allot-w{wid}-0-0"
                for g in range(GPUS_PER_POD):
                    head = (f'{metric}{{gpu="{g}",UUID="GPU-{wid}-{g}",namespace="rd-bench",'
                            f'pod="{pod}",Hostname="n{wid}"}} ')
                    level = rnd.uniform(0.2, 0.95)
                    out.write("".join(
                        f"{head}{level:.3f} {base + 60 * m}\n" for m in range(HOURS * 60)
                    ))
            out.write("# EOF\n")
        t1 = time.perf_counter()
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                        str(tmp / "data.om"), str(tmp / "tsdb")], check=True,
                       stdout=subprocess.DEVNULL)
        t2 = time.perf_counter()
        samples = GPUS * HOURS * 60
        print(f"1. telemetry: {samples:,} samples ({GPUS} GPUs x {HOURS} h at 60 s) written "
              f"in {t1 - t0:.1f} s, backfilled by promtool in {t2 - t1:.1f} s")
        (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 60s\n"
                                            "scrape_configs: []\n")
        port = free_port()
        proc = subprocess.Popen(
            [prometheus, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'tsdb'}", "--storage.tsdb.retention.time=30d",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.2)
            client = PrometheusClient(url, timeout_s=120)
            t3 = time.perf_counter()
            records = 0
            for h in range(HOURS):
                result = usage_rollup_hour(hour=first + timedelta(hours=h), now=now,
                                           client=client)
                records += result.created
            t4 = time.perf_counter()
            appended = sum(charges_post_hour(hour=first + timedelta(hours=h), now=now).appended
                           for h in range(HOURS))
            t5 = time.perf_counter()
        finally:
            proc.terminate()
            proc.wait(30)
        from billing.models import UsageRecord

        covered = UsageRecord.objects.filter(phase="running", gap_minutes=0).count()
        print(f"   hourly records built from query_range: {records} records for {HOURS} h in "
              f"{t4 - t3:.1f} s (target < 60 s); {covered} running records fully covered; "
              f"priced {appended} ledger entries in {t5 - t4:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_invoice(w) -> None:
    from billing.models import CostCenter, LedgerEntry
    from billing.services import charges_post_hour, invoice_issue, usage_rollup_hour
    from billing.services.invoices import invoice_ledger_total

    cc = CostCenter.objects.create(code="inv", name="Invoice bench")
    from billing.models import TeamCostCenter
    from quotas.models import Team

    team = Team.objects.create(name="invoice-bench")
    TeamCostCenter.objects.create(team=team, cost_center=cc)
    w2 = {**w, "team": team}
    month_start = datetime(2026, 2, 1, tzinfo=UTC)
    # 20,000 workloads over February, 500 per hour, 20 min each with 2 min frozen.
    per_hour = 500
    t0 = time.perf_counter()
    for h in range(INVOICE_WORKLOADS // per_hour):
        hour = month_start + timedelta(hours=h * 16)
        workloads(w2, per_hour, hour, hour + timedelta(minutes=20), 4)
        usage_rollup_hour(hour=hour, now=datetime(2026, 3, 2, tzinfo=UTC), telemetry={})
        charges_post_hour(hour=hour, now=datetime(2026, 3, 2, tzinfo=UTC))
    t1 = time.perf_counter()
    entries = LedgerEntry.objects.filter(cost_center=cc).count()
    t2 = time.perf_counter()
    invoice = invoice_issue(cost_center=cc, month=date(2026, 2, 1),
                            now=datetime(2026, 3, 2, tzinfo=UTC))
    t3 = time.perf_counter()
    assert invoice.total == invoice_ledger_total(invoice)
    print(f"2. invoice: {INVOICE_WORKLOADS:,} workloads, {entries:,} ledger entries "
          f"(metered and priced in {t1 - t0:.1f} s); invoice {invoice.number} with "
          f"{invoice.workload_lines.count():,} appendix lines, total {invoice.total} "
          f"{invoice.currency} = ledger sum, issued in {t3 - t2:.2f} s (target < 10 s)")


def bench_verify(w) -> None:
    from billing.models import LedgerEntry, LedgerHead, RateCard
    from billing.services.ledger import HASH_FIELDS, entry_hash, ledger_verify

    existing = LedgerEntry.objects.count()
    head, _ = LedgerHead.objects.get_or_create(pk=1)
    seq, prev = head.last_seq, head.last_hash
    card = RateCard.objects.first()
    cc_id, team_id = w["cc"].pk, w["team"].pk
    created = datetime.now(UTC).replace(microsecond=0)
    todo = VERIFY_ENTRIES - existing
    columns = [f for f in HASH_FIELDS] + ["hash"]
    t0 = time.perf_counter()
    with connection.cursor() as cur, cur.cursor.copy(
        f"COPY billing_ledgerentry ({', '.join(columns)}) FROM STDIN"
    ) as copy:
        hour = datetime(2025, 1, 1, tzinfo=UTC)
        for i in range(todo):
            seq += 1
            q = Decimal(8 + i % 5).quantize(Decimal("0.0001"))
            amount = (q * card.rate).quantize(Decimal("0.01"))
            values = [seq, created, hour + timedelta(hours=i // 100), cc_id, team_id, "bench",
                      "rd/bench", 1 + i // 4, "w", "a100", "gpu_reserved", "allocation", q,
                      card.unit, card.pk, card.version, card.rate, amount, card.currency, None,
                      None, "", prev]
            prev = entry_hash(values)
            copy.write_row([*values, prev])
    LedgerHead.objects.filter(pk=1).update(last_seq=seq, last_hash=prev)
    t1 = time.perf_counter()
    total = LedgerEntry.objects.count()
    with connection.cursor() as cur:
        cur.execute("ANALYZE billing_ledgerentry")
    t2 = time.perf_counter()
    result = ledger_verify()
    t3 = time.perf_counter()
    assert result.ok, result.problem
    if os.environ.get("BENCH_EXPLAIN"):
        from billing.services.ledger import VERIFY_SQL
        with connection.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, SETTINGS) " + VERIFY_SQL)
            print("\n".join(r[0] for r in cur.fetchall()))
    with connection.cursor() as cur:
        cur.execute("UPDATE billing_ledgerentry SET amount = amount + 0.01 WHERE seq = %s",
                    [seq - 10])
    t4 = time.perf_counter()
    bad = ledger_verify()
    t5 = time.perf_counter()
    print(f"3. billing_verify: {total:,} entries (written in {t1 - t0:.1f} s) verified in "
          f"{t3 - t2:.1f} s (target < 30 s); after altering entry #{seq - 10}: "
          f"'{bad.problem[:60]}…' found in {t5 - t4:.1f} s")


def main() -> None:
    if connection.vendor != "postgresql":
        print("bench.billing needs PostgreSQL: set DATABASE_URL=postgres://...")
        sys.exit(2)
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        w = world()
        only = set(sys.argv[1:]) or {"telemetry", "invoice", "verify"}
        if "telemetry" in only:
            bench_telemetry(w)
        if "invoice" in only:
            bench_invoice(w)
        if "verify" in only:
            bench_verify(w)
    finally:
        if os.environ.get("BENCH_KEEP"):
            print(f"kept database {connection.settings_dict['NAME']}")
        else:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
