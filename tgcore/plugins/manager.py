"""Finding, loading and reporting plugins.

``PluginHost`` owns one pluggy manager. ``load()`` registers core's builtin plugin, then
every entry point of the group ``tgcore`` (filtered by ``TG_PLUGINS`` and
``TG_DISABLE_PLUGINS``), and runs the registration hooks of each plugin into a ``Registry``.
Any failure of a plugin (import error, missing module, exception inside a hook, an
unsupported hookspec version, a name clash) is recorded on its ``PluginInfo`` and that plugin
is skipped; with ``TG_STRICT_PLUGINS=1`` the first failure raises ``PluginError`` instead.
When the installed ``tgcore`` distribution is not ours (an unrelated one is on PyPI), every entry
point fails with a message naming it (``tgcore.plugins.distribution``).

The rest of tgcore reaches plugins only through ``get_host()``; tests build their own
``PluginHost`` so no state leaks between them.
"""
from __future__ import annotations

import os
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pluggy

from tgcore.plugins import hookspecs
from tgcore.plugins.distribution import foreign_core
from tgcore.plugins.registry import Registry

REGISTRATION_HOOKS = {
    "tg_register_devices": Registry.device_callback,
    "tg_register_renderers": Registry.renderer_callback,
    "tg_register_loaders": Registry.loader_callback,
    "tg_register_apps": Registry.app_callback,
    "tg_register_transports": Registry.transport_callback,
}
ALL_HOOKS = frozenset(REGISTRATION_HOOKS) | {"tg_add_commands"}


class PluginError(RuntimeError):
    """A plugin failed to load and strict mode (TG_STRICT_PLUGINS=1) is on."""


@dataclass
class PluginInfo:
    name: str
    distribution: str
    version: str
    hooks: tuple[str, ...] = ()
    status: str = "ok"  # "ok", "failed: <first line>", "disabled: <why>"
    error: BaseException | None = None
    builtin: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def failed(self) -> bool:
        return self.status.startswith("failed")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _name_list(value: str | None) -> set[str] | None:
    """``None`` for an unset variable, else the set of names in a comma-separated list."""
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


def _default_entry_points() -> list[Any]:
    import importlib_metadata
    return list(importlib_metadata.entry_points(group=hookspecs.PROJECT))


class PluginHost:
    """One plugin manager and what its plugins registered.

    ``entry_points``: entry-point objects to load (default: installed ones of group
    ``tgcore``); ``env``: the environment to read TG_PLUGINS / TG_DISABLE_PLUGINS /
    TG_STRICT_PLUGINS from (default ``os.environ``); ``builtins``: modules registered as core
    builtins (default: ``tgcore.plugins.builtin``).
    """

    def __init__(self, entry_points: Iterable[Any] | None = None, env: Mapping[str, str] | None = None,
                 builtins: Iterable[tuple[str, object]] | None = None) -> None:
        self._entry_points = entry_points
        self._env = os.environ if env is None else env
        self._builtins = builtins
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.registry = Registry()
        self.plugins: dict[str, PluginInfo] = {}
        self.loaded = False
        self.core_problem: str | None = None  # why the installed tgcore is not ours, when it is not

    @property
    def strict(self) -> bool:
        return self._env.get("TG_STRICT_PLUGINS", "0") not in ("", "0", "false", "no")

    # ---- loading ----
    def load(self) -> PluginHost:
        """Load builtins and entry points once; later calls do nothing."""
        if self.loaded:
            return self
        self.loaded = True
        builtins = self._builtins
        if builtins is None:
            from tgcore.plugins import builtin
            builtins = [("core", builtin)]
        import tgcore
        for name, module in builtins:
            self.add_plugin(module, name, "tgcore", tgcore.__version__, builtin=True)
        eps = _default_entry_points() if self._entry_points is None else self._entry_points
        self.core_problem = foreign_core()
        for ep in eps:
            self._load_entry_point(ep)
        return self

    def _load_entry_point(self, ep: Any) -> None:
        dist = getattr(ep, "dist", None)
        info = PluginInfo(ep.name, getattr(dist, "name", "?") or "?", getattr(dist, "version", "?") or "?")
        allow, block = _name_list(self._env.get("TG_PLUGINS")), _name_list(self._env.get("TG_DISABLE_PLUGINS"))
        if allow is not None and ep.name not in allow:
            info.status = "disabled: not in TG_PLUGINS"
        elif block is not None and ep.name in block:
            info.status = "disabled: in TG_DISABLE_PLUGINS"
        if not info.status == "ok":
            self.plugins[ep.name] = info
            return
        if self.core_problem is not None:
            self._fail(info, PluginError(self.core_problem))
            return
        try:
            module = ep.load()
        except BaseException as e:  # ImportError, SyntaxError, a missing attribute, SystemExit in a module...
            if isinstance(e, KeyboardInterrupt):
                raise
            self._fail(info, e)
            return
        self.add_plugin(module, ep.name, info.distribution, info.version)

    def add_plugin(self, plugin: object, name: str, distribution: str = "?", version: str = "?",
                   builtin: bool = False) -> PluginInfo:
        """Register a plugin object (a module or any object with hookimpls) and run its hooks."""
        info = PluginInfo(name, distribution, version, builtin=builtin)
        if name in self.plugins and not self.plugins[name].status.startswith("disabled"):
            self._fail(info, PluginError(f"a plugin named {name!r} is already loaded"))
            return info
        self.plugins[name] = info
        try:
            self._check_version(plugin)
            self._check_hook_names(plugin)
            self.pm.register(plugin, name=name)
        except Exception as e:
            self._fail(info, e)
            return info
        info.hooks = tuple(sorted(c.name for c in self.pm.get_hookcallers(plugin) or ()))
        staged = Registry()
        try:
            for hook_name in info.hooks:
                if hook_name in REGISTRATION_HOOKS:
                    callback = REGISTRATION_HOOKS[hook_name](staged, name)
                    self._call_own_impl(plugin, hook_name, register=callback)
            clashes = self.registry.conflicts_with(staged)
            if clashes:
                raise PluginError("already registered by another plugin: " + ", ".join(clashes))
        except Exception as e:
            self.pm.unregister(plugin)
            self._fail(info, e)
            return info
        self.registry.merge(staged)
        return info

    def _call_own_impl(self, plugin: object, hook_name: str, **kwargs: Any) -> None:
        """Call one plugin's implementation of a hook, so its errors are its own."""
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            if impl.plugin is plugin:
                impl.function(**{k: kwargs[k] for k in impl.argnames})

    @staticmethod
    def _check_version(plugin: object) -> None:
        declared = getattr(plugin, "TG_HOOKSPEC_VERSION", None)
        if declared is not None and declared not in hookspecs.SUPPORTED_HOOKSPEC_VERSIONS:
            supported = ", ".join(map(str, sorted(hookspecs.SUPPORTED_HOOKSPEC_VERSIONS)))
            raise PluginError(f"built for hookspec version {declared}; this tgcore supports {supported}")

    def _check_hook_names(self, plugin: object) -> None:
        """Catch typos: a ``tg_*`` hookimpl that is no hook of ours would silently never run."""
        for attr in dir(plugin):
            if attr.startswith("tg_") and attr not in ALL_HOOKS:
                fn = getattr(plugin, attr, None)
                if callable(fn) and hasattr(fn, hookspecs.PROJECT + "_impl"):
                    raise PluginError(f"unknown hook {attr!r}; hooks are {', '.join(sorted(ALL_HOOKS))}")

    def _fail(self, info: PluginInfo, error: BaseException) -> None:
        info.status, info.error = f"failed: {_first_line(error)}", error
        self.plugins[info.name] = info
        if self.strict:
            raise PluginError(f"plugin {info.name!r} ({info.distribution} {info.version}) failed to load: "
                              f"{_first_line(error)}") from error

    # ---- use ----
    def add_commands(self, subparsers: Any) -> None:
        """Let each loaded plugin add ``tg`` subcommands; a failing one is recorded and skipped."""
        self.load()
        for name, info in list(self.plugins.items()):
            if info.ok and "tg_add_commands" in info.hooks:
                plugin = self.pm.get_plugin(name)
                try:
                    self._call_own_impl(plugin, "tg_add_commands", subparsers=subparsers)
                except Exception as e:
                    self._fail(info, e)

    def failures(self) -> list[PluginInfo]:
        return [p for p in self.plugins.values() if p.failed]


_host: PluginHost | None = None


def get_host() -> PluginHost:
    """The process-wide plugin host, loaded on first use."""
    global _host
    if _host is None:
        _host = PluginHost()
        try:
            _host.load()
        except BaseException:
            _host = None
            raise
    return _host


def set_host(host: PluginHost | None) -> PluginHost | None:
    """Replace the process-wide host (tests); returns the previous one."""
    global _host
    previous, _host = _host, host
    if host is not None:
        host.load()
    return previous


def module_plugin(name: str, **hooks: Any) -> types.ModuleType:
    """Build a plugin module from hook functions (handy in tests and for inline plugins)."""
    mod = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(mod, hook_name, hookspecs.hookimpl(fn))
    return mod
