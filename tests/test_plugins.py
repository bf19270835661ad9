"""Plugin host: registration, failure isolation, strict mode, allow/block lists, device strings."""
from __future__ import annotations

import types

import pytest

import tgcore
from tgcore.plugins import PluginError, PluginHost, module_plugin
from tgcore.runtime.registry import DeviceError, DeviceSpec, parse_device, resolve


class FakeDist:
    def __init__(self, name: str, version: str = "1.0") -> None:
        self.name, self.version = name, version


class FakeEntryPoint:
    """Stands in for an importlib.metadata EntryPoint: ``load()`` runs ``loader``."""

    def __init__(self, name: str, loader, dist: str = "tg-fake") -> None:
        self.name, self._loader, self.dist = name, loader, FakeDist(dist)
        self.loaded = False

    def load(self):
        self.loaded = True
        return self._loader()


def plugin_ep(name: str, **hooks) -> FakeEntryPoint:
    mod = module_plugin(f"tg_{name}", **hooks)
    return FakeEntryPoint(name, lambda: mod, dist=f"tg-{name}")


def raise_(exc: BaseException):
    def f(*a, **k):
        raise exc
    return f


def make_host(eps=(), env=None, builtins=()) -> PluginHost:
    return PluginHost(entry_points=list(eps), env=env or {}, builtins=list(builtins)).load()


def register_toy(register):
    register("TOY", lambda name, variant: types.SimpleNamespace(name=name, variant=variant, renderer=None),
             "a toy device", variants={"FAST": "a runtime variant"})


def register_toy_renderers(register):
    register("TOY", "ASM", lambda: "asm-renderer", "toy assembly")
    register("TOY", "SLOW", lambda: "slow-renderer", "unavailable", probe=lambda: "needs a unicorn")


def test_builtins_register_core_devices():
    host = PluginHost(entry_points=[], env={}).load()
    assert {"CPU", "PYTHON", "NULL", "DISK"} <= set(host.registry.devices)
    assert host.plugins["core"].builtin and host.plugins["core"].ok
    assert "C" in host.registry.renderers["CPU"]


def test_hooks_are_called_and_recorded():
    calls = []

    def apps(register):
        calls.append("apps")
        register("echo", lambda argv: len(argv), "echo app")

    host = make_host([plugin_ep("echo", tg_register_apps=apps)])
    assert calls == ["apps"]
    info = host.plugins["echo"]
    assert info.ok and info.hooks == ("tg_register_apps",) and info.distribution == "tg-echo"
    assert host.registry.apps["echo"].run(["a", "b"]) == 2
    assert host.registry.apps["echo"].plugin == "echo"


def test_import_error_is_recorded_and_others_still_load():
    bad = FakeEntryPoint("bad", raise_(ImportError("No module named 'missing_dep'")))
    good = plugin_ep("good", tg_register_apps=lambda register: register("good", lambda a: 0, "ok"))
    host = make_host([bad, good])
    assert host.plugins["bad"].status == "failed: ImportError: No module named 'missing_dep'"
    assert isinstance(host.plugins["bad"].error, ImportError)
    assert host.plugins["good"].ok and "good" in host.registry.apps


def test_exception_inside_hook_rolls_back_that_plugin():
    def half_then_fail(register):
        register("HALF", lambda n, v: None, "registered before the error")
        raise RuntimeError("boom\nsecond line")

    host = make_host([plugin_ep("flaky", tg_register_devices=half_then_fail)])
    assert host.plugins["flaky"].status == "failed: RuntimeError: boom"
    assert "HALF" not in host.registry.devices  # nothing half-registered
    assert host.pm.get_plugin("flaky") is None


def test_strict_mode_raises_on_first_failure():
    bad = FakeEntryPoint("bad", raise_(ModuleNotFoundError("No module named 'tg_bad'")))
    with pytest.raises(PluginError, match="bad.*ModuleNotFoundError"):
        make_host([bad], env={"TG_STRICT_PLUGINS": "1"})


def test_allow_list_and_block_list():
    eps = [plugin_ep(n, tg_register_apps=lambda register, n=n: register(n, lambda a: 0, n)) for n in "abc"]
    host = make_host(eps, env={"TG_PLUGINS": "a,c", "TG_DISABLE_PLUGINS": "c"})
    assert set(host.registry.apps) == {"a"}
    assert host.plugins["b"].status == "disabled: not in TG_PLUGINS"
    assert host.plugins["c"].status == "disabled: in TG_DISABLE_PLUGINS"
    assert not eps[1].loaded and not eps[2].loaded  # disabled plugins are never imported


def test_empty_allow_list_loads_no_external_plugin_but_keeps_builtins():
    ep = plugin_ep("a", tg_register_apps=lambda register: register("a", lambda a: 0, "a"))
    host = PluginHost(entry_points=[ep], env={"TG_PLUGINS": ""}).load()
    assert not ep.loaded and "CPU" in host.registry.devices


def test_unsupported_hookspec_version_is_flagged():
    mod = module_plugin("tg_future", tg_register_apps=lambda register: register("f", lambda a: 0, "f"))
    mod.TG_HOOKSPEC_VERSION = tgcore.HOOKSPEC_VERSION + 100
    host = make_host([FakeEntryPoint("future", lambda: mod)])
    assert host.plugins["future"].failed and "hookspec version" in host.plugins["future"].status
    assert "f" not in host.registry.apps


def test_misspelled_hook_is_an_error():
    mod = types.ModuleType("tg_typo")
    mod.tg_register_device = tgcore.hookimpl(lambda register: None)  # missing the final "s"
    host = make_host([FakeEntryPoint("typo", lambda: mod)])
    assert host.plugins["typo"].failed and "unknown hook 'tg_register_device'" in host.plugins["typo"].status


def test_name_clash_fails_the_later_plugin():
    first = plugin_ep("one", tg_register_devices=register_toy)
    second = plugin_ep("two", tg_register_devices=register_toy)
    host = make_host([first, second])
    assert host.plugins["one"].ok
    assert host.plugins["two"].failed and "device TOY (from one)" in host.plugins["two"].status


def test_malformed_registration_is_a_failure():
    host = make_host([plugin_ep("bad", tg_register_devices=lambda register: register("A B", None, "x"))])
    assert host.plugins["bad"].failed and "without spaces" in host.plugins["bad"].status


def test_add_commands_failure_is_isolated():
    import argparse

    good = plugin_ep("good", tg_add_commands=lambda subparsers: subparsers.add_parser("good"))
    bad = plugin_ep("bad", tg_add_commands=raise_(ValueError("no commands today")))
    host = make_host([good, bad])
    parser = argparse.ArgumentParser()
    host.add_commands(parser.add_subparsers())
    assert host.plugins["good"].ok and host.plugins["bad"].status == "failed: ValueError: no commands today"


def test_each_host_is_independent():
    a = make_host([plugin_ep("x", tg_register_apps=lambda register: register("x", lambda a: 0, "x"))])
    b = make_host([])
    assert "x" in a.registry.apps and "x" not in b.registry.apps


# ---- device strings ----

@pytest.mark.parametrize("text, expected", [
    ("CPU", DeviceSpec("CPU", None)),
    ("cpu:x86", DeviceSpec("CPU", "X86")),
    (" amd:emu ", DeviceSpec("AMD", "EMU")),
    ("DISK:/tmp/Model.GGUF", DeviceSpec("DISK", "/tmp/Model.GGUF")),
])
def test_parse_device(text, expected):
    assert parse_device(text) == expected
    assert str(parse_device(str(expected))) == str(expected)


@pytest.mark.parametrize("bad", ["", ":X86", "CPU:", 3])
def test_parse_device_rejects_malformed(bad):
    with pytest.raises(DeviceError):
        parse_device(bad)


def test_resolve_picks_renderer_and_variants():
    host = make_host([plugin_ep("toy", tg_register_devices=register_toy,
                                tg_register_renderers=register_toy_renderers)])
    entry, renderer, spec = resolve("toy", host)
    assert entry.name == "TOY" and renderer.name == "ASM"  # SLOW is unavailable, ASM is the default
    assert resolve("TOY:FAST", host)[1].name == "ASM"  # runtime variant keeps the default renderer
    with pytest.raises(DeviceError, match="needs a unicorn"):
        resolve("TOY:SLOW", host)
    with pytest.raises(DeviceError, match=r"unknown variant 'NOPE'.*ASM, SLOW, FAST"):
        resolve("TOY:NOPE", host)


def test_unknown_device_lists_devices_and_the_pip_package():
    host = make_host([plugin_ep("toy", tg_register_devices=register_toy)])
    with pytest.raises(DeviceError,
                       match=r"unknown device 'AMD'; available devices: TOY.*pip install -e plugins/tg-amd"):
        resolve("AMD:EMU", host)
    with pytest.raises(DeviceError, match=r"unknown variant 'X86'.*pip install -e plugins/tg-x86"):
        resolve("CPU:X86", PluginHost(entry_points=[], env={}).load())


def test_renderer_from_another_plugin_stands_in_when_own_is_unavailable():
    def dev(register):
        register("BOX", lambda n, v: None, "box")

    def own(register):
        register("BOX", "NATIVE", lambda: None, probe=lambda: "no compiler")

    def other(register):
        register("BOX", "JIT", lambda: None)

    host = make_host([plugin_ep("box", tg_register_devices=dev, tg_register_renderers=own),
                      plugin_ep("jit", tg_register_renderers=other)])
    assert resolve("BOX", host)[1].name == "JIT"


def test_broken_probe_means_unavailable_not_crash():
    def dev(register):
        register("GPU", lambda n, v: None, "gpu", probe=raise_(OSError("driver exploded")))

    host = make_host([plugin_ep("gpu", tg_register_devices=dev)])
    with pytest.raises(DeviceError, match="unavailable here: probe failed: OSError: driver exploded"):
        resolve("GPU", host)


# ---- loaders ----

def test_load_picks_loader_by_magic_then_suffix(tmp_path, monkeypatch):
    from tgcore import loading
    from tgcore.plugins import manager

    def loaders(register):
        register("magic", lambda path, **kw: ("magic", kw), magic=(b"MAGC",))
        register("suffix", lambda path, **kw: ("suffix", kw), suffixes=(".thing",))

    host = make_host([plugin_ep("files", tg_register_loaders=loaders)])
    monkeypatch.setattr(manager, "_host", host)
    (tmp_path / "a.thing").write_bytes(b"MAGC....")
    (tmp_path / "b.THING").write_bytes(b"other")
    (tmp_path / "c.gguf").write_bytes(b"GGUF")
    assert loading.load(tmp_path / "a.thing", x=1) == ("magic", {"x": 1})
    assert loading.load(tmp_path / "b.THING") == ("suffix", {})
    with pytest.raises(loading.NoLoaderError, match="pip install -e plugins/tg-gguf"):
        loading.load(tmp_path / "c.gguf")
    with pytest.raises(FileNotFoundError):
        loading.load(tmp_path / "missing.thing")


def test_transports_register_and_resolve(monkeypatch):
    from tgcore import transports
    from tgcore.plugins import manager

    def reg(register):
        register("loop", lambda **kw: ("connected", kw), "an in-process loop")
        register("gone", lambda **kw: None, "needs hardware", probe=lambda: "no NIC")

    host = make_host([plugin_ep("t", tg_register_transports=reg)])
    monkeypatch.setattr(manager, "_host", host)
    assert transports.transport("loop", timeout=3) == ("connected", {"timeout": 3})
    with pytest.raises(transports.TransportError, match="unavailable here: no NIC"):
        transports.transport("gone")
    with pytest.raises(transports.TransportError, match="pip install -e plugins/tg-mlx-rdma"):
        transports.transport("mpi")


def _dist_info(folder, version: str, summary: str, classifiers=()):
    """A real (importlib_metadata) distribution named tgcore, from a dist-info folder written here."""
    import importlib_metadata
    info = folder / f"tgcore-{version}.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", "Name: tgcore", f"Version: {version}", f"Summary: {summary}",
             *(f"Classifier: {c}" for c in classifiers)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    return importlib_metadata.PathDistribution(info)


def test_foreign_core_distribution_is_named(tmp_path):
    from tgcore.plugins.distribution import MARKER, foreign_core
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    theirs = _dist_info(tmp_path / "a", "1.0.98", "TGCoreSDK | A fluent DSL framework for Telegram")
    ours = _dist_info(tmp_path / "b", tgcore.__version__, "A small tensor compiler", [MARKER])
    message = foreign_core(lambda name: theirs)
    assert message is not None
    assert "tgcore 1.0.98 ('TGCoreSDK | A fluent DSL framework for Telegram')" in message
    assert "pip uninstall tgcore" in message and "pip install -e ." in message
    assert foreign_core(lambda name: ours) is None
    assert foreign_core(lambda name: None) is None  # run from a source tree: nothing installed to check


def test_plugins_fail_on_a_foreign_core_distribution(tmp_path, monkeypatch):
    from tgcore.plugins import distribution
    theirs = _dist_info(tmp_path, "1.0.98", "TGCoreSDK | A fluent DSL framework for Telegram")
    monkeypatch.setattr(distribution, "_installed", lambda name: theirs if name == "tgcore" else None)
    called = []
    ep = plugin_ep("x", tg_register_devices=lambda register: called.append(1))
    host = make_host([ep], builtins=[("core", module_plugin("core"))])
    assert host.plugins["core"].ok and not ep.loaded and not called  # the plugin is not even imported
    assert host.plugins["x"].failed and "tgcore 1.0.98 ('TGCoreSDK" in host.plugins["x"].status
    assert host.core_problem is not None and "1.0.98" in host.core_problem
    with pytest.raises(PluginError, match=r"plugin 'x' \(tg-x 1.0\) failed to load: .*tgcore 1.0.98"):
        make_host([plugin_ep("x")], env={"TG_STRICT_PLUGINS": "1"})
