"""The API's docs draw in a real browser under the portal's CSP, from the installed
drf-spectacular-sidecar files: nothing is loaded from another site."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration("chromium"), pytest.mark.django_db(transaction=True)]
# ReDoc always draws a "powered by" logo from its CDN; the CSP (img-src 'self' data:) blocks
# it before any request leaves, and ReDoc hides the image when it fails.
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@pytest.mark.parametrize(("path", "drawn"), [
    ("/api/docs/", ".swagger-ui .info .title"),
    ("/api/redoc/", "redoc h1"),
])
def test_the_docs_draw_the_schema_from_local_files(live_server, page, console_errors, shot,
                                                   path, drawn):
    loaded: list[str] = []
    page.on("requestfinished", lambda r: loaded.append(r.url))
    page.goto(f"{live_server.url}{path}")
    page.wait_for_selector(drawn, timeout=60_000)
    assert "Beacon API" in page.locator(drawn).first.inner_text()
    shot(page, f"api-{path.strip('/').replace('/', '-')}", height=900)
    assert [u for u in loaded if not u.startswith((live_server.url, "data:", "blob:"))] == []
    assert any("/static/drf_spectacular_sidecar/" in u for u in loaded)
    assert [e for e in console_errors if REDOC_LOGO not in e] == []
