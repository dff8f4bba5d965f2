"""Pages in a real browser: `python -m bench.browser`.

Seeds the demo organisation (`seed_demo`) into a SQLite database of its own, serves the
checkout with gunicorn (DEBUG off, static files from WhiteNoise, gzip as in production) and
opens each page in Debian's Chromium through Playwright, signed in as the demo admin. For each
page it prints the median over BENCH_RUNS cold visits (a new browser context: no cache) of:

- `html`: the server's response (responseEnd, from navigation timing);
- `paint`: the first contentful paint (what "first render" means here: the page is readable);
- `load`: the load event (every script and style fetched and run);
- `charts`: the moment every chart of the page has drawn its SVG (pages with charts only),
  and the bytes the page fetched in all (transfer sizes, gzipped where served so).

Target (issue #15): every page's first render under 1 s on this machine.

Environment: BENCH_ROOT (the checkout to serve, default this one: point it at another
checkout to compare old and new with the same script), BENCH_RUNS (default 5), BENCH_PAGES
(comma-separated paths, default the portal's main pages), BENCH_PORT (default 8702).
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(os.environ.get("BENCH_ROOT") or Path(__file__).resolve().parent.parent).resolve()
HERE = Path(__file__).resolve().parent.parent
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
PORT = int(os.environ.get("BENCH_PORT", "8702"))
PAGES = [p for p in os.environ.get("BENCH_PAGES", "").split(",") if p] or [
    "/dashboard/", "/fleet/", "/queues/", "/tree/", "/workloads/", "/workloads/new/",
    "/billing/", "/approvals/",
]
USER, PASSWORD = "admin", "allot-admin-demo"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

# Navigation timing and paint entries, read in the page once it has loaded.
TIMING_JS = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const paint = performance.getEntriesByName('first-contentful-paint')[0];
  let bytes = nav.transferSize;
  for (const r of performance.getEntriesByType('resource')) { bytes += r.transferSize; }
  return {html: nav.responseEnd, load: nav.loadEventEnd,
          paint: paint ? paint.startTime : null, bytes: bytes,
          charts: document.querySelectorAll('div.chart').length};
}"""
CHARTS_DRAWN_JS = """() => Array.from(document.querySelectorAll('div.chart'))
  .every(d => d.querySelector('svg.main-svg'))"""


def _serve(tmp: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}",
           "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(40),
           "STATIC_ROOT": str(tmp / "static"), "ALLOT_WATCH": "false",
           "CELERY_BROKER_URL": f"filesystem://{tmp / 'broker'}", "LOG_LEVEL": "WARNING"}
    env.pop("REDIS_URL", None)
    py = str(HERE / ".venv/bin/python")
    for args in (["migrate", "--noinput", "-v0"], ["seed_demo"], ["collectstatic", "--noinput",
                                                                  "-v0"]):
        subprocess.run([py, "manage.py", *args], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)
    proc = subprocess.Popen(
        [str(HERE / ".venv/bin/gunicorn"), "portal.wsgi", "-b", f"127.0.0.1:{PORT}", "-w", "2",
         "--threads", "4", "--log-level", "warning"], cwd=ROOT, env=env)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=1)
            return proc, env
        except OSError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("gunicorn did not start")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("Chromium is not installed: run scripts/ensure_system_packages.sh")


def _cookies(browser) -> list:
    ctx = browser.new_context()
    page = ctx.new_page()
    page.goto(f"http://127.0.0.1:{PORT}/login/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_load_state("load")
    cookies = ctx.cookies()
    ctx.close()
    return cookies


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmpdir:
        proc, _ = _serve(Path(tmpdir))
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
                cookies = _cookies(browser)
                print(f"{ROOT.name}: median of {RUNS} cold visits (no cache), ms; KB fetched")
                print(f"{'page':<20}{'html':>8}{'paint':>8}{'load':>8}{'charts':>8}{'KB':>8}")
                for url in PAGES:
                    rows = []
                    for _ in range(RUNS):
                        ctx = browser.new_context()
                        ctx.add_cookies(cookies)
                        page = ctx.new_page()
                        start = time.perf_counter()
                        page.goto(f"http://127.0.0.1:{PORT}{url}", wait_until="load")
                        t = page.evaluate(TIMING_JS)
                        if t["charts"]:
                            page.wait_for_function(CHARTS_DRAWN_JS, timeout=30_000)
                            t["drawn"] = (time.perf_counter() - start) * 1000
                        rows.append(t)
                        ctx.close()

                    def med(key: str, rows: list = rows) -> str:
                        vals = [r[key] for r in rows if r.get(key) is not None]
                        return f"{statistics.median(vals):.0f}" if vals else "-"
                    kb = statistics.median(r["bytes"] for r in rows) / 1024
                    print(f"{url:<20}{med('html'):>8}{med('paint'):>8}{med('load'):>8}"
                          f"{med('drawn'):>8}{kb:>8.0f}")
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
