"""The ledger check on two kept databases, side by side: `python -m bench.billing_ab OLD NEW`.

Two trees' `bench.billing` runs, each with BENCH_KEEP=1 and its own TEST_DATABASE_NAME, leave
two databases of 1,000,000 ledger entries. This runs `VERIFY_SQL` on each in turn, the order
flipped every round (BENCH_ROUNDS, default 6), on the server of DATABASE_URL (default
postgres://postgres@127.0.0.1:5432), and prints each time and the medians: the two trees
compared in one window, on the same machine state.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import psycopg

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from billing.services.ledger import VERIFY_SQL  # noqa: E402


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.billing_ab OLD_DATABASE NEW_DATABASE")
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432")
    server = server.rsplit("/", 1)[0] if server.count("/") > 2 else server
    names = {"old": sys.argv[1], "new": sys.argv[2]}
    times: dict[str, list[float]] = {"old": [], "new": []}
    for i in range(int(os.environ.get("BENCH_ROUNDS", "6"))):
        for key in ("old", "new") if i % 2 == 0 else ("new", "old"):
            with psycopg.connect(f"{server}/{names[key]}") as conn:
                t0 = time.perf_counter()
                conn.execute(VERIFY_SQL).fetchall()
                times[key].append(time.perf_counter() - t0)
        print(f"round {i + 1}: old {times['old'][-1]:.2f} s, new {times['new'][-1]:.2f} s",
              flush=True)
    print(f"billing_verify, median of {len(times['old'])}: old "
          f"{statistics.median(times['old']):.2f} s, new {statistics.median(times['new']):.2f} s")


if __name__ == "__main__":
    main()
