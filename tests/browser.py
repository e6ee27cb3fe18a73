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
