"""Test sessions: one per package, plus lint, typecheck and wheels (the wheelhouse in dist/).

`nox` runs the default sessions (what CI runs); `nox -s full` runs the long fuzzing and
exhaustive matrices. Plugin sessions are found from the folders under plugins/.
"""
from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PLUGINS = sorted(p.name for p in (ROOT / "plugins").glob("*") if (p / "pyproject.toml").exists())

nox.options.sessions = ["lint", "typecheck", "core", "plugin", "wheels", "readme"]
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True

TORCH = "torch==2.13.0"  # the reference for gradients; this pin is the CPU build the machines carry

# Tests run with plugin failures as errors; tests that exercise failures set their own env.
os.environ["TG_STRICT_PLUGINS"] = "1"


def _pyproject(plugin: str) -> dict:
    with open(ROOT / "plugins" / plugin / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _test_config(plugin: str, key: str) -> list[str]:
    """``[tool.tgcore.test]`` settings of a plugin: ``no-deps`` (packages installed without their
    dependencies, e.g. one that only ships a model file), ``install`` (extra test requirements that
    are no package extra, e.g. the local torch build the core suites compare against), ``plugins``
    (plugins of this repository the tests also use, installed editable) and ``core-devices`` (devices the
    plugin provides that the whole core suite also runs on, as ``DEV``, in the plugin's session)."""
    return list(_pyproject(plugin).get("tool", {}).get("tgcore", {}).get("test", {}).get(key, []))


def _local_dependencies(plugin: str) -> list[str]:
    """Editable installs of the plugins from this repository that ``plugin`` depends on (they are not on PyPI)."""
    lockstep = _pyproject(plugin)["tool"]["hatch"]["metadata"]["hooks"]["custom"]  # see hatch_lockstep.py
    names = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].strip().lower() for d in
             lockstep.get("dependencies", [])} | set(_test_config(plugin, "plugins"))
    return [arg for p in PLUGINS if p.lower() in names and p != plugin for arg in ("-e", f"plugins/{p}")]


def _pytest_args(session: nox.Session) -> list[str]:
    return list(session.posargs) or ["-q", "-p", "no:cacheprovider"]


@nox.session
def core(session: nox.Session) -> None:
    """The core test suite."""
    session.install("-e", ".[test]", TORCH)
    session.run("pytest", "tests", *_pytest_args(session), env={"TG_SPEC": "1"})  # every rewrite checks its spec


if PLUGINS:
    @nox.session
    @nox.parametrize("name", PLUGINS, ids=PLUGINS)
    def plugin(session: nox.Session, name: str) -> None:
        """One plugin: install tgcore + the plugin with its test extras, run its tests."""
        session.install("-e", ".[test]", *_local_dependencies(name), "-e", f"plugins/{name}[test]",
                        *_test_config(name, "install"))
        extra = _test_config(name, "no-deps")
        if extra:
            session.install("--no-deps", *extra)
        session.run("pytest", f"plugins/{name}/tests", *_pytest_args(session))
        for device in _test_config(name, "core-devices"):
            session.run("pytest", "tests", "-m", "not device_independent", *_pytest_args(session),  # (a -m given wins)
                        env={"DEV": device, "TG_TEST_DEVICES": device, "TG_SPEC": "1"})
else:
    @nox.session
    def plugin(session: nox.Session) -> None:
        """No plugin folders yet."""
        session.skip("no plugins under plugins/")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "tgcore", "tests", "bench", "plugins", "noxfile.py", "hatch_lockstep.py")


TYPED_PLUGINS = PLUGINS  # every plugin is mypy-clean; a new plugin joins by being clean


@nox.session
def typecheck(session: nox.Session) -> None:
    session.install("mypy", "-e", ".", *(arg for p in TYPED_PLUGINS for arg in ("-e", f"plugins/{p}")))
    session.run("mypy", "tgcore", *(f"plugins/{p}/{p.replace('-', '_')}" for p in TYPED_PLUGINS))


@nox.session
def wheels(session: nox.Session) -> None:
    """The wheelhouse: every distribution of ours and the wheels of all their dependencies in dist/, so
    ``pip install --no-index --find-links dist tgcore tg-x86`` installs with no index at all (the one form
    that can never pick the unrelated ``tgcore`` on PyPI). Then installs them from there alone and checks
    that all plugins load. The wheels fit the Python and platform this runs on."""
    dist = ROOT / "dist"
    ours = ["tgcore", *PLUGINS]
    for stale in dist.glob("*.whl"):  # our wheels of another version would shadow or confuse the new ones
        if stale.name.split("-")[0].replace("_", "-").lower() in ours:
            stale.unlink()
    folders = [str(ROOT), *(str(ROOT / "plugins" / p) for p in PLUGINS)]
    session.run("pip", "wheel", "--quiet", "-w", str(dist), *folders)
    session.install("--no-index", "--find-links", str(dist), *ours)
    with session.chdir(session.create_tmp()):  # import the installed wheels, not the work tree
        out = session.run("tg", "plugins", env={"TG_STRICT_PLUGINS": "1"}, silent=True)
    assert isinstance(out, str)
    print(out)
    rows = [line for line in out.splitlines()[1:] if line.strip()]
    names = {row.split()[0] for row in rows}
    expected = {"core"} | {re.sub(r"^tg-", "", p).replace("-", "_") for p in PLUGINS}
    missing = expected - names
    bad = [row for row in rows if " ok" not in row]
    if missing or bad:
        session.error(f"plugins missing: {sorted(missing)}; not ok: {bad}")
    session.log(f"wheelhouse: {dist} ({len(list(dist.glob('*.whl')))} wheels)")


@nox.session
def readme(session: nox.Session) -> None:
    """The README's first screen followed in a fresh venv from a clone of this repository (its committed
    HEAD): the install command, tg plugins / devices / llm models, and a served answer to its curl and
    openai examples (tests/readme)."""
    session.install("pytest")
    session.run("pytest", "tests/readme", *_pytest_args(session), env={"TG_README_TEST": "1"})


@nox.session
def full(session: nox.Session) -> None:
    """Long runs: more fuzz examples and exhaustive matrices. Not part of the default set."""
    editable = [arg for p in PLUGINS for arg in ("-e", f"plugins/{p}[test]")]
    session.install("-e", ".[test]", *editable, TORCH)
    no_deps = [pkg for p in PLUGINS for pkg in _test_config(p, "no-deps")]
    if no_deps:
        session.install("--no-deps", *no_deps)
    env = {"TG_FUZZ_EXAMPLES": os.environ.get("TG_FUZZ_EXAMPLES", "200000"), "TG_FULL": "1",
           "TG_FUZZ_PROGRAMS": os.environ.get("TG_FUZZ_PROGRAMS", "20000")}  # tests/test_program_fuzz.py, per device
    session.run("pytest", "tests", *[f"plugins/{p}/tests" for p in PLUGINS], *_pytest_args(session), env=env)
    for p in PLUGINS:  # the random programs also on the devices plugins add
        for device in _test_config(p, "core-devices"):
            session.run("pytest", "tests/test_program_fuzz.py", *_pytest_args(session),
                        env={**env, "DEV": device, "TG_TEST_DEVICES": device})
