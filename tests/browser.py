"""Headless Chromium (Debian's ``chromium`` package) for the tests that look at pages as a browser does."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-quic", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--no-first-run", "--hide-scrollbars", "--virtual-time-budget=10000"]


def chromium() -> str:
    """The Chromium binary; the test is skipped where there is none, and fails in CI (which installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        if os.environ.get("ACTSWEEP_REQUIRE_CHROMIUM"):
            pytest.fail("chromium is not installed (apt-get install chromium); .ci/run installs it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def keep_screenshot(screenshot: Path, name: str) -> None:
    """docs/images/NAME, where ACTSWEEP_UPDATE_SCREENSHOTS asks for it (the docs show what a test saw)."""
    if os.environ.get("ACTSWEEP_UPDATE_SCREENSHOTS"):
        shutil.copy(screenshot, Path(__file__).resolve().parent.parent / "docs" / "images" / name)


def load_in_chromium(url: str, out: Path, size: str = "1280,2400") -> tuple[str, Path]:
    """The DOM after the page loaded (its scripts and image handlers run), and a PNG screenshot."""
    browser, profile = chromium(), out / "chromium-profile"
    common = [browser, *FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    screenshot = out / "report.png"
    subprocess.run([*common, f"--window-size={size}", f"--screenshot={screenshot}", url], capture_output=True,
                   timeout=120, check=True)
    keep = os.environ.get("ACTSWEEP_TEST_SCREENSHOTS")  # a folder to keep screenshots in (CI artifacts)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(keep) / f"{out.name}.png")
    return dom, screenshot


class HeaderProxy:
    """A loopback HTTP proxy that adds ``headers`` to every request it forwards to ``target``: a
    browser started from the command line cannot send the bearer token a Ray dashboard with token
    authentication asks for, which a user types into the dashboard once."""

    def __init__(self, target: str, headers: dict[str, str]):
        import http.server
        import threading

        import httpx

        class Forward(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                answer = httpx.get(f"{target}{self.path}", headers=headers, timeout=30)
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in ("content-length", "content-encoding", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
