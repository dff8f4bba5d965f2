"""A real Chromium (the Debian package) driven by Playwright's Python API against a live server.

`scripts/ensure_system_packages.sh` installs Chromium when missing; the tests skip (saying
why) only if it still is not there. Screenshots of every page land in test-artifacts/.
"""

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "e2e"


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def browser():
    path = _chromium()
    if path is None:
        pytest.skip("Chromium is not installed: run scripts/ensure_system_packages.sh")
    # Playwright's sync API runs an event loop in this thread; Django's ORM (used by the test
    # itself to drive cycles) refuses to run beside one unless told it is safe, which it is
    # here: the loop only talks to the browser.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def shots():
    """Save a full-page screenshot: shots(page, "01-login")."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture
def eager_celery():
    """Run Celery tasks in the calling thread (dispatch to the simulated backend included)."""
    from portal.celery import app

    old = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield app
    app.conf.task_always_eager, app.conf.task_eager_propagates = old
