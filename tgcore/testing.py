"""Test support for tgcore and its plugins: the project's rule for optional references.

A test that needs a reference tool (gguf-py, capstone, llvm-mc, tokenizers...) skips when it is missing on
a developer's machine, and fails under CI (``CI=true``), which must never skip a reference silently.
pytest is imported only when a test calls these.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any, NoReturn


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(what: str) -> NoReturn:
    """Skip the calling test locally; fail it under CI. ``what`` names the reference and how to install it."""
    import pytest
    if in_ci():
        pytest.fail(f"{what} is required when CI=true")
    pytest.skip(f"{what} is not installed")
    raise AssertionError("unreachable: pytest.skip raises")  # for type checkers without pytest's stubs


def require(module: str, install: str) -> Any:
    """``import module``, or ``missing`` (``install``: the command that provides it)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"{module} ({install})")


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"  # Debian's chromium + chromium-driver
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage")


@contextlib.contextmanager
def headless_chromium(*flags: str, mobile: dict[str, Any] | None = None) -> Iterator[Any]:
    """A Selenium driver of a headless Chromium with a fresh profile (removed afterwards), for tests of pages;
    ``flags`` are extra command-line flags, ``mobile`` device metrics to emulate. Missing selenium, Chromium or
    ChromeDriver: ``missing`` (a skip locally, a failure under CI)."""
    webdriver = require("selenium.webdriver", "pip install selenium")
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if shutil.which(path) is None:
            missing(f"{path} (apt-get install -y {package})")
    from selenium.webdriver.chrome.service import Service
    profile = tempfile.mkdtemp(prefix="tg-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, *flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    if mobile is not None:
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": mobile})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(condition: Any, what: str, timeout: float = 20.0) -> Any:
    """Poll ``condition()`` until it returns something true (returned), or fail the test after ``timeout``
    seconds naming ``what`` it waited for."""
    import pytest
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
