"""Rewrite traces (VIZ=1) and the `tg viz serve` page, in a real headless Chromium.

The page test needs Debian's ``chromium`` + ``chromium-driver`` and selenium: skipped locally when missing, a failure
with ``CI=true``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tgcore.testing import headless_chromium, wait_for
from tgcore.uop import trace
from tgcore.viz import load_profile
from tgcore.vizserver import PAGE, TraceError, load_trace, serve_in_thread

PROGRAM = textwrap.dedent("""
    import numpy as np
    from tgcore import Tensor
    a = Tensor(np.arange(256, dtype=np.float32).reshape(16, 16) / 256)
    print(float((a @ a).relu().sum().numpy()))
""")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """A rewrite trace and a profile of PROGRAM on the CPU device's C renderer, recorded in a child process."""
    folder = tmp_path_factory.mktemp("viz")
    env = {**os.environ, "VIZ": "1", "PROFILE": "1", "TG_VIZ_OUT": str(folder / "t.json"),
           "TG_PROFILE_OUT": str(folder / "p.json"), "TG_PROFILE_QUIET": "1", "DEV": "CPU:C",
           "TG_CACHE_DIR": str(folder / "cache")}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    a = np.arange(256, dtype=np.float32).reshape(16, 16) / 256
    assert float(done.stdout) == pytest.approx(float(np.maximum(a @ a, 0).sum()), rel=1e-5)
    return load_trace(folder / "t.json"), load_profile(folder / "p.json")


def test_trace_records_passes_rules_and_code(recorded: tuple[dict, dict]) -> None:
    data, _ = recorded
    matmul = next(k for k in data["kernels"] if k["name"].startswith("r_16_16_16"))
    names = [p["name"] for p in matmul["passes"]]
    assert names[0] == "simplify kernel" and any(n.startswith("apply opts [") for n in names)
    assert names[-1] == "add accumulators and ends"
    assert any(count > 0 for p in matmul["passes"] for count in p["rules"].values())
    nodes = matmul["nodes"]
    final = matmul["passes"][-1]["after"]
    assert nodes[final][0] == "SINK"
    reachable, todo = set(), [final]
    while todo:
        i = todo.pop()
        if i not in reachable:
            reachable.add(i)
            todo += nodes[i][3]
    assert {"RANGE", "LOAD", "STORE", "END"} <= {nodes[i][0] for i in reachable}
    assert matmul["language"] == "c" and "r_16_16_16" in matmul["code"]


def test_nothing_is_traced_outside_a_kernel_or_when_off() -> None:
    from tgcore.uop import UOp
    from tgcore.uop.rewrite import graph_rewrite
    from tgcore.uop.symbolic import symbolic
    assert trace.ACTIVE is None or os.environ.get("VIZ")
    x = UOp.variable("x", 0, 10) + 0
    tracer = trace.start()
    try:
        graph_rewrite(x, symbolic, name="outside")  # no kernel open: not recorded
        with trace.kernel_trace("k", "renderer"):
            graph_rewrite(x, symbolic, name="inside")
        assert [[p["name"] for p in k.passes] for k in tracer.kernels] == [["inside"]]
        assert tracer.kernels[0].passes[0]["rules"]  # x + 0 -> x fired a rule
    finally:
        trace.ACTIVE = None


def test_bad_trace_files(tmp_path: Any) -> None:
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(TraceError, match="not a readable rewrite trace"):
        load_trace(tmp_path / "bad.json")
    (tmp_path / "profile.json").write_text(json.dumps({"format": "tgcore-profile", "version": 1}))
    with pytest.raises(TraceError, match="not a tgcore rewrite trace"):
        load_trace(tmp_path / "profile.json")


def test_page_loads_nothing_from_elsewhere() -> None:
    assert "<script src" not in PAGE and "@import" not in PAGE
    assert "https://" not in PAGE and "http://" not in PAGE.replace('"http://www.w3.org/2000/svg"', "")


def test_server_answers_and_rejects(recorded: tuple[dict, dict]) -> None:
    data, profile = recorded
    server = serve_in_thread(data, None)
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        with urllib.request.urlopen(base + "/api/trace") as r:
            assert json.loads(r.read())["kernels"][0]["name"] == data["kernels"][0]["name"]
        for path in ("/api/profile", "/etc/passwd", "/../x"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(base + path)
            assert e.value.code == 404 and "error" in json.loads(e.value.read())
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver


def test_page_in_chromium(recorded: tuple[dict, dict], browser: Any) -> None:
    from selenium.webdriver.common.by import By
    data, profile = recorded
    data = json.loads(json.dumps(data))
    hostile = "<img src=x onerror=window.pwned=1>"  # names are shown as text, never parsed as HTML
    data["kernels"].append({"name": hostile, "renderer": "r", "nodes": [], "passes": [], "code": "", "language": "c"})
    server = serve_in_thread(data, profile)
    try:
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        wait_for(lambda: browser.execute_script("return document.body.dataset.ready"), "the page to load")
        items = browser.find_elements(By.CSS_SELECTOR, ".kernel")
        assert len(items) == len(data["kernels"])
        assert browser.find_elements(By.CSS_SELECTOR, "#kernel-list img") == []
        assert not browser.execute_script("return window.pwned")
        browser.find_element(By.ID, "filter").send_keys("r_16")
        matching = [k for k in data["kernels"] if "r_16" in k["name"].lower()]
        assert [e.text.splitlines()[0] for e in browser.find_elements(By.CSS_SELECTOR, ".kernel")] == \
            [k["name"] for k in matching]
        browser.find_elements(By.CSS_SELECTOR, ".kernel")[0].click()
        kernel = matching[0]
        passes = browser.find_elements(By.CSS_SELECTOR, ".pass")
        assert [p.text.splitlines()[0] for p in passes] == [p["name"] for p in kernel["passes"]]
        assert "r_16_16_16" in browser.find_element(By.ID, "code").text
        # the first pass: its rules table and the graph after it (as many boxes as the page says it shows)
        passes[0].click()
        rows = browser.find_elements(By.CSS_SELECTOR, "#rule-table tr")
        assert len(rows) == 1 + len(kernel["passes"][0]["rules"])
        boxes = browser.find_elements(By.CSS_SELECTOR, "#graph-svg g.node")
        caption = browser.find_element(By.CSS_SELECTOR, "#graph .small").text
        assert caption.startswith(f"{len(boxes)} of ") and len(boxes) > 3
        browser.find_element(By.ID, "side-before").click()
        assert browser.find_element(By.ID, "side-before").get_attribute("disabled")
        browser.find_element(By.ID, "show-timeline").click()
        bars = browser.find_elements(By.CSS_SELECTOR, "#timeline-svg rect.event")
        assert len(bars) == len(profile["events"])
    finally:
        server.shutdown()
