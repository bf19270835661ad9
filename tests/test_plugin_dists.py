"""Real distributions with entry points, installed during the test, seen by the `tg` command.

Builds the fixtures in tests/fixtures (the README's example plugin and a package of broken
plugins) with pip into a private target directory, then runs `tg` in subprocesses with that
directory on PYTHONPATH.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_PLUGINS = "hello,broken_import,broken_hook,missing_module,future_version"
README = Path(__file__).parent.parent / "README.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    for dist in ("tg-hello", "tg-broken"):
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(target), str(FIXTURES / dist)],
                       check=True, capture_output=True)
    return target


def tg(site: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TG_")}
    full_env["PYTHONPATH"] = os.pathsep.join([str(site), full_env.get("PYTHONPATH", "")])
    full_env["TG_PLUGINS"] = FIXTURE_PLUGINS  # only the fixtures, whatever else this machine has installed
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "tgcore.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=120)


def plugin_rows(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}


def test_installed_plugin_adds_a_subcommand(site):
    r = tg(site, "hello", "tensor")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hello, tensor!\n"
    assert "hello" in tg(site, "--help").stdout


def test_tg_plugins_reports_every_failure_and_exits_zero(site):
    r = tg(site, "plugins")
    assert r.returncode == 0, r.stderr
    rows = plugin_rows(r.stdout)
    assert re.search(r"hello\s+tg-hello\s+0\.1\.0\s+add_commands\s+ok", rows["hello"])
    assert "failed: ModuleNotFoundError: No module named 'tg_this_dependency_is_not_installed'" in rows[
        "broken_import"]
    assert "failed: RuntimeError: the hook blew up" in rows["broken_hook"]
    assert "failed: ModuleNotFoundError: No module named 'tg_broken.no_such_module'" in rows["missing_module"]
    assert "failed: PluginError: built for hookspec version 999" in rows["future_version"]
    assert "tg-broken" in rows["broken_hook"] and "0.0.1" in rows["broken_hook"]
    assert "ok (builtin)" in rows["core"]


def test_strict_mode_exits_nonzero(site):
    r = tg(site, "plugins", env={"TG_STRICT_PLUGINS": "1"})
    assert r.returncode == 1
    assert "failed to load" in r.stderr and "tg-broken" in r.stderr


def test_lists_select_plugins(site):
    r = tg(site, "plugins", env={"TG_PLUGINS": "hello", "TG_STRICT_PLUGINS": "1"})
    assert r.returncode == 0, r.stderr
    rows = plugin_rows(r.stdout)
    assert "ok" in rows["hello"] and "disabled: not in TG_PLUGINS" in rows["broken_hook"]
    r = tg(site, "plugins", env={"TG_DISABLE_PLUGINS": "broken_import,broken_hook,missing_module,future_version",
                                 "TG_STRICT_PLUGINS": "1"})
    assert r.returncode == 0, r.stderr
    r = tg(site, "hello", env={"TG_DISABLE_PLUGINS": "hello"})
    assert r.returncode == 2 and "invalid choice: 'hello'" in r.stderr


def test_tg_devices(site):
    r = tg(site, "devices")
    assert r.returncode == 0, r.stderr
    rows = plugin_rows(r.stdout)
    assert {"CPU", "PYTHON", "NULL", "DISK"} <= set(rows)
    assert "C*" in rows["CPU"] and "available" in rows["CPU"]


def test_tg_serve_unknown_app(site):
    r = tg(site, "serve", "nope")
    assert r.returncode == 2
    assert "unknown app 'nope'" in r.stderr and "pip install -e plugins/tg-llm" in r.stderr
    r = tg(site, "serve", "llm")
    assert r.returncode == 2 and "llm is provided by the tg-llm plugin: pip install -e plugins/tg-llm" in r.stderr


def test_tg_alone_prints_help_and_version(site):
    r = tg(site)
    assert r.returncode == 0 and "usage: tg" in r.stdout and "plugins" in r.stdout
    import tgcore
    assert tg(site, "--version").stdout.strip() == f"tgcore {tgcore.__version__}"


def test_import_tgcore_imports_no_plugin_and_help_stays_light(site):
    code = ("import sys, tgcore; bad = [m for m in sys.modules if m.startswith(('tg_hello', 'tg_broken'))];"
            "assert not bad, bad;"
            "from tgcore.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('numpy', 'tgcore.tensor', 'tgcore.uop', 'fastapi', 'uvicorn') if m in sys.modules];"
            "assert not heavy, heavy")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr


def test_readme_plugin_example_is_the_fixture():
    """The README's 'writing a plugin' code is these files, character for character."""
    text = README.read_text()
    for rel in ("pyproject.toml", "tg_hello/__init__.py"):
        body = (FIXTURES / "tg-hello" / rel).read_text()
        assert body.strip() in text, f"README's example differs from tests/fixtures/tg-hello/{rel}"


def test_tg_demo_runs_on_cpu_and_python(site):
    r = tg(site, "demo", "CPU", "PYTHON")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("(ok)") == 2
    r = tg(site, "demo", "AMD")
    assert r.returncode == 1 and "pip install -e plugins/tg-amd" in r.stdout


def test_readme_usage_example_runs():
    """The README's "Using it" code runs as written."""
    text = README.read_text()
    section = text[text.index("## Using it"):]
    code = section[section.index("```python") + len("```python"):section.index("```", section.index("```python") + 9)]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["(128,", "10)", "(8,)", "(8,)", "(8,)"]


def test_tg_cache_info_and_clear(site, tmp_path):
    cache = tmp_path / "cache"
    (cache / "compile" / "ab").mkdir(parents=True)
    (cache / "compile" / "ab" / "kernel").write_bytes(b"x" * 3000)
    (cache / "isa").mkdir()
    (cache / "isa" / "verdict.json").write_text("{}")
    env = {"TG_CACHE_DIR": str(cache)}
    r = tg(site, "cache", "info", env=env)
    assert r.returncode == 0, r.stderr
    assert f"cache directory: {cache}" in r.stdout
    assert plugin_rows(r.stdout.split("\n", 1)[1])["compile"].split()[1:3] == ["1", "0.0"]
    (cache / "mine.txt").write_text("not the cache's")  # a folder that is not only ours: left alone
    r = tg(site, "cache", "clear", env=env)
    assert r.returncode == 1 and "mine.txt" in r.stderr and (cache / "compile" / "ab" / "kernel").exists()
    (cache / "mine.txt").unlink()
    r = tg(site, "cache", "clear", env=env)
    assert r.returncode == 0, r.stderr
    assert cache.is_dir() and not list(cache.iterdir())
