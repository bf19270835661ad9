"""A complete backend from a separate distribution, built only on the public plugin API.

tests/fixtures/tg-toyc registers renderer TOYC for the CPU device through
``tg_register_renderers``; its renderer subclasses ``tgcore.renderer.Renderer`` and emits C
itself, its compiler subclasses ``tgcore.runtime.compiler.Compiler``. It is installed with pip
into a private directory; then, in subprocesses with that directory on PYTHONPATH, `tg` must
list it and the core op suite (tests/test_tensor_ops.py, checked against numpy) must pass on
``CPU:TOYC``. Compiles go to a fresh cache directory, so every kernel is really built.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "tg-toyc"
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(FIXTURE)], check=True, capture_output=True)
    return target


def run(site: Path, cache: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python argv...` from the repository root with the fixture installed and only it as external plugin."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TG_", "DEV", "DEBUG"))}
    full_env["PYTHONPATH"] = os.pathsep.join([str(site), full_env.get("PYTHONPATH", "")])
    full_env.update(TG_CACHE_DIR=str(cache), TG_PLUGINS="toyc", TG_STRICT_PLUGINS="1", **env)
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, env=full_env,
                          timeout=300)


def test_tg_lists_the_plugin_and_its_renderer(site, tmp_path):
    r = run(site, tmp_path, "-m", "tgcore.cli", "devices")
    assert r.returncode == 0, r.stderr
    cpu = next(line for line in r.stdout.splitlines() if line.startswith("CPU "))
    assert re.search(r"\bC\*, TOYC\b", cpu), cpu  # core's C stays the default; TOYC is a variant
    assert "toyc" in cpu and "available" in cpu
    r = run(site, tmp_path, "-m", "tgcore.cli", "plugins")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^toyc\s+tg-toyc\s+0\.1\.0\s+register_renderers\s+ok$", r.stdout, re.M), r.stdout


def test_kernels_run_through_the_plugins_own_renderer(site, tmp_path):
    code = """
import sys
import numpy as np
import tg_toyc
assert not [m for m in sys.modules if m.startswith("tgcore.uop")], "importing the plugin must stay cheap"
from tgcore.renderer import Renderer
from tgcore.renderer.cstyle import CRenderer
from tgcore.runtime.compiler import ClangCompiler, Compiler
from tgcore.tensor import Tensor
from tg_toyc.renderer import ToyCRenderer
assert issubclass(ToyCRenderer, Renderer) and not issubclass(ToyCRenderer, CRenderer)
assert isinstance(ToyCRenderer().compiler, Compiler) and not isinstance(ToyCRenderer().compiler, ClangCompiler)
x = Tensor([[1.0, -2.0], [3.0, 4.0]])  # DEV=CPU:TOYC
assert x.device == "CPU:TOYC", x.device
print(x.sum(1).numpy().tolist())
"""
    r = run(site, tmp_path, "-c", code, DEV="CPU:TOYC", DEBUG="4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "toyc_bf16_to_f32" in r.stdout  # the kernel printed at DEBUG=4 is TOYC's C
    assert r.stdout.strip().endswith("[-1.0, 7.0]")


def test_core_op_suite_passes_on_toyc(site, tmp_path):
    r = run(site, tmp_path, "-m", "pytest", "tests/test_tensor_ops.py", "-q", "-x", "-p", "no:cacheprovider",
            TG_TEST_DEVICES="CPU:TOYC")
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-2000:]
    assert re.search(r"\d{3} passed", r.stdout), r.stdout[-2000:]


def test_readme_backend_example_is_the_fixture():
    """Each code block of README's 'A complete backend' is fixture text; a `...` line marks omitted code."""
    section = README.read_text().split("### A complete backend", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\w*\n(.*?)```", section, re.S)
    assert blocks, "README has no code in 'A complete backend'"
    sources = "\n".join(p.read_text() for p in sorted(FIXTURE.rglob("*")) if p.suffix in (".py", ".toml"))
    for block in blocks:
        for piece in re.split(r"^[ \t]*\.\.\.[ \t]*$", block, flags=re.M):
            assert piece.strip() in sources, f"README quotes text that is not in tests/fixtures/tg-toyc:\n{piece}"
