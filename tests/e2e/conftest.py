"""Browser tests: Playwright driving Debian's Chromium (never a downloaded browser)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.services import require

# live_server runs in a thread while the test body uses the ORM synchronously.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-results" / "screenshots"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    require(Path(CHROMIUM).exists(), "chromium", "apt-get install -y chromium")
    return {**browser_type_launch_args, "executable_path": CHROMIUM}


@pytest.fixture
def console_errors(page: Any) -> list[str]:
    """Every console error and uncaught page error, to assert there are none."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


@pytest.fixture
def shot() -> Any:
    """``shot(page, "name")`` saves a full-page screenshot for CI artifacts;
    ``height=N`` keeps only the top N pixels of the page."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def _shot(page: Any, name: str, height: int | None = None) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        clip = None
        if height:
            clip = {"x": 0, "y": 0, "width": page.viewport_size["width"], "height": height}
        page.screenshot(path=str(path), full_page=True, clip=clip)
        return path

    return _shot


@pytest.fixture
def sign_in(live_server: Any) -> Any:
    """Sign in through the real login form."""

    def _sign_in(page: Any, username: str, password: str = "pw") -> None:
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")

    return _sign_in
