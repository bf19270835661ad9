"""Our distributions against the unrelated ``tgcore`` on PyPI, with no network.

Builds our wheels (pip and hatchling) and writes a stand-in for that package (``tgcore 1.0.98``, its
summary, a module of another name), puts the stand-in in a local file index, and asks pip (``--isolated``:
no config, no environment, so nothing but the locations given here) what it would install. Then runs
``tg plugins`` with the stand-in's metadata installed next to a plugin.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tgcore

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
PLUGIN_FOLDERS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))
FOREIGN_SUMMARY = "TGCoreSDK | A fluent DSL framework for Telegram, APIs, and AI workflows."


def pip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", *args],
                       capture_output=True, text=True, timeout=300)
    if check and r.returncode:
        raise AssertionError(f"pip {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return r


def build_wheels(out: Path, *folders: Path) -> None:
    pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), *map(str, folders))


def stand_in_wheel(folder: Path, name: str, version: str, summary: str) -> Path:
    """A wheel holding only metadata and one empty module (``<name>_stand_in``): enough for pip to resolve
    and install it, and for importlib to find its metadata."""
    stem = f"{name.replace('-', '_')}-{version}"
    files = {f"{stem}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                           f"Summary: {summary}\n",
             f"{stem}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test_packaging\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n",
             f"{name.replace('-', '_')}_stand_in.py": '"""A stand-in: nothing to run."""\n'}
    record = [f"{path},sha256={_digest(text.encode())},{len(text.encode())}" for path, text in files.items()]
    files[f"{stem}.dist-info/RECORD"] = "\n".join([*record, f"{stem}.dist-info/RECORD,,"]) + "\n"
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
    return path


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """Our wheels (the core and every plugin) and stand-ins for the core's own dependencies (numpy,
    pluggy, ...: at the versions installed here, which satisfy the core's requirements), so pip can
    resolve a plugin with no network."""
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("needs the source tree (tests run from a clone)")
    out = tmp_path_factory.mktemp("wheelhouse")
    build_wheels(out, ROOT, *PLUGIN_FOLDERS)
    with zipfile.ZipFile(wheel(out, "tgcore")) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist: ") and "extra ==" not in line:
            name = re.match(r"[A-Za-z0-9_.-]+", line.removeprefix("Requires-Dist: ")).group(0)  # type: ignore[union-attr]
            stand_in_wheel(out, name, importlib.metadata.version(name), "a stand-in for a dependency of tgcore")
    return out


@pytest.fixture(scope="module")
def foreign_index(tmp_path_factory) -> Path:
    """A local file index (PEP 503 layout: a folder per name) holding only a stand-in ``tgcore 1.0.98``."""
    index = tmp_path_factory.mktemp("index") / "simple"
    (index / "tgcore").mkdir(parents=True)
    path = stand_in_wheel(index / "tgcore", "tgcore", "1.0.98", FOREIGN_SUMMARY)
    (index / "tgcore" / "index.html").write_text(f'<a href="{path.name}">{path.name}</a>\n')
    return index


def wheel(folder: Path, distribution: str) -> Path:
    found = sorted(folder.glob(distribution.replace("-", "_") + "-*.whl"))
    assert len(found) == 1, found
    return found[0]


def would_install(*args: str) -> dict[str, str]:
    """Name -> version of what ``pip install`` would install (a dry run, ignoring what is installed)."""
    r = pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-", *args)
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(r.stdout)["install"]}


def test_every_distribution_has_the_one_version_and_pins_ours(wheelhouse):
    ours = {"tgcore"} | {p.name for p in PLUGIN_FOLDERS}
    for folder in [ROOT, *PLUGIN_FOLDERS]:
        name = "tgcore" if folder == ROOT else folder.name
        path = wheel(wheelhouse, name)
        with zipfile.ZipFile(path) as z:
            metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        fields = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line]
        assert ["Version", tgcore.__version__] in fields, path.name
        requires = [value.split(";")[0].strip() for key, value in fields if key == "Requires-Dist"]
        for requirement in requires:
            base = requirement.split("==")[0].split(">")[0].split("<")[0].split("[")[0].strip()
            if base in ours:
                assert requirement.endswith(f"=={tgcore.__version__}"), (path.name, requirement)
        if name != "tgcore":
            assert f"tgcore=={tgcore.__version__}" in requires, (path.name, requires)


def test_a_plugin_resolves_to_our_core_next_to_the_foreign_index(wheelhouse, foreign_index):
    index = ["--index-url", foreign_index.as_uri()]
    plan = would_install(*index, "--find-links", str(wheelhouse), str(wheel(wheelhouse, "tg-x86")))
    assert plan["tgcore"] == tgcore.__version__ and plan["tg-x86"] == tgcore.__version__
    # the foreign index alone: pip refuses rather than install the stand-in under our plugin
    r = pip("install", "--dry-run", "--ignore-installed", *index, str(wheel(wheelhouse, "tg-x86")), check=False)
    assert r.returncode != 0
    assert f"tgcore=={tgcore.__version__}" in r.stderr and "1.0.98" in r.stderr, r.stderr


def test_a_bare_requirement_would_pick_the_foreign_package(wheelhouse, foreign_index, tmp_path):
    """Why the pins exist: a plugin requiring a bare ``tgcore`` (the README's example) gets 1.0.98 from this
    index even when our wheelhouse offers our core."""
    build_wheels(tmp_path, FIXTURES / "tg-hello")
    plan = would_install("--no-deps", "--index-url", foreign_index.as_uri(), "--find-links", str(wheelhouse),
                         str(wheel(tmp_path, "tg-hello")), "tgcore")
    assert plan["tgcore"] == "1.0.98"


def test_tg_plugins_names_the_foreign_core(foreign_index, tmp_path):
    """The stand-in's metadata first on the path, our tgcore module importable: plugins are refused."""
    site = tmp_path / "site"
    build_wheels(tmp_path, FIXTURES / "tg-hello")
    pip("install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
        str(wheel(foreign_index / "tgcore", "tgcore")), str(wheel(tmp_path, "tg-hello")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(Path(tgcore.__file__).parent.parent),
                                         env.get("PYTHONPATH", "")])
    env["TG_PLUGINS"] = "hello"
    r = subprocess.run([sys.executable, "-m", "tgcore.cli", "plugins"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("hello "))
    assert "failed: PluginError: the installed 'tgcore' is not this project's" in row
    assert f"tgcore 1.0.98 ({FOREIGN_SUMMARY!r})" in row and str(site) in row
    assert "pip uninstall tgcore" in r.stderr
    r = subprocess.run([sys.executable, "-m", "tgcore.cli", "plugins"], capture_output=True, text=True,
                       env=env | {"TG_STRICT_PLUGINS": "1"}, timeout=120)
    assert r.returncode == 1 and "tgcore 1.0.98" in r.stderr
    r = subprocess.run([sys.executable, "-m", "tgcore.cli", "hello"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 2 and "invalid choice: 'hello'" in r.stderr  # the refused plugin adds no command
