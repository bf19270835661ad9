"""What plugins registered: devices, renderers, loaders and apps, as plain records.

A ``Registry`` is filled through the ``register`` callbacks of the hooks. Each plugin
registers into its own staging registry first; the host merges it into the shared one only
if every hook of that plugin succeeded, so a failing plugin leaves nothing half-registered.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Probe = Callable[[], "str | None"]


class RegistrationError(ValueError):
    """A plugin registered something malformed or already taken."""


@dataclass(frozen=True)
class DeviceEntry:
    name: str
    factory: Callable[[str, str | None], Any]
    description: str
    probe: Probe | None
    variants: dict[str, str] | str | None
    plugin: str

    def accepts_variant(self, variant: str) -> bool:
        if self.variants == "*":
            return True
        return isinstance(self.variants, dict) and variant in self.variants


@dataclass(frozen=True)
class RendererEntry:
    device: str
    name: str
    factory: Callable[[], Any]
    description: str
    probe: Probe | None
    plugin: str


@dataclass(frozen=True)
class LoaderEntry:
    name: str
    load: Callable[..., Any]
    suffixes: tuple[str, ...]
    magic: tuple[bytes, ...]
    plugin: str


@dataclass(frozen=True)
class TransportEntry:
    name: str
    factory: Callable[..., Any]
    description: str
    probe: Probe | None
    plugin: str


@dataclass(frozen=True)
class AppEntry:
    name: str
    run: Callable[[list[str]], int]
    help: str
    plugin: str


def unavailable_reason(probe: Probe | None) -> str | None:
    """Run an availability probe; a probe that raises counts as 'unavailable' with its error."""
    if probe is None:
        return None
    try:
        return probe()
    except Exception as e:  # a broken probe must not take the host down
        return f"probe failed: {type(e).__name__}: {e}"


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not name or any(c in name for c in " :,"):
        raise RegistrationError(f"{kind} name must be a non-empty string without spaces, ':' or ',': got {name!r}")
    return name


@dataclass
class Registry:
    devices: dict[str, DeviceEntry] = field(default_factory=dict)
    renderers: dict[str, dict[str, RendererEntry]] = field(default_factory=dict)  # device -> name -> entry
    loaders: list[LoaderEntry] = field(default_factory=list)
    apps: dict[str, AppEntry] = field(default_factory=dict)
    transports: dict[str, TransportEntry] = field(default_factory=dict)

    # ---- register callbacks, bound to one plugin ----
    def device_callback(self, plugin: str) -> Callable[..., None]:
        def register(name: str, factory: Callable[[str, str | None], Any], description: str,
                     probe: Probe | None = None, variants: dict[str, str] | str | None = None) -> None:
            name = _check_name("device", name).upper()
            if not callable(factory):
                raise RegistrationError(f"device {name}: factory must be callable")
            if variants not in (None, "*") and not isinstance(variants, dict):
                raise RegistrationError(f"device {name}: variants must be a dict, '*' or None")
            if isinstance(variants, dict):
                variants = {k.upper(): v for k, v in variants.items()}
            self.devices[name] = DeviceEntry(name, factory, description, probe, variants, plugin)
        return register

    def renderer_callback(self, plugin: str) -> Callable[..., None]:
        def register(device: str, name: str, factory: Callable[[], Any], description: str = "",
                     probe: Probe | None = None) -> None:
            device, name = _check_name("device", device).upper(), _check_name("renderer", name).upper()
            if not callable(factory):
                raise RegistrationError(f"renderer {device}:{name}: factory must be callable")
            entry = RendererEntry(device, name, factory, description, probe, plugin)
            self.renderers.setdefault(device, {})[name] = entry
        return register

    def loader_callback(self, plugin: str) -> Callable[..., None]:
        def register(name: str, load: Callable[..., Any], suffixes: tuple[str, ...] = (),
                     magic: tuple[bytes, ...] = ()) -> None:
            if not callable(load):
                raise RegistrationError(f"loader {name}: load must be callable")
            if isinstance(suffixes, str) or isinstance(magic, bytes):
                raise RegistrationError(f"loader {name}: suffixes and magic are tuples")
            if not suffixes and not magic:
                raise RegistrationError(f"loader {name}: give at least one suffix or magic")
            sfx = tuple(s.lower() if s.startswith(".") else "." + s.lower() for s in suffixes)
            self.loaders.append(LoaderEntry(_check_name("loader", name), load, sfx, tuple(magic), plugin))
        return register

    def app_callback(self, plugin: str) -> Callable[..., None]:
        def register(name: str, run: Callable[[list[str]], int], help: str) -> None:
            if not callable(run):
                raise RegistrationError(f"app {name}: run must be callable")
            self.apps[_check_name("app", name)] = AppEntry(name, run, help, plugin)
        return register

    def transport_callback(self, plugin: str) -> Callable[..., None]:
        def register(name: str, factory: Callable[..., Any], description: str, probe: Probe | None = None) -> None:
            if not callable(factory):
                raise RegistrationError(f"transport {name}: factory must be callable")
            name = _check_name("transport", name)
            self.transports[name] = TransportEntry(name, factory, description, probe, plugin)
        return register

    # ---- merging ----
    def conflicts_with(self, other: Registry) -> list[str]:
        """Names ``other`` registers that this registry already has."""
        taken = [f"device {d} (from {self.devices[d].plugin})" for d in other.devices if d in self.devices]
        for dev, rs in other.renderers.items():
            mine = self.renderers.get(dev, {})
            taken += [f"renderer {dev}:{r} (from {mine[r].plugin})" for r in rs if r in mine]
        taken += [f"app {a} (from {self.apps[a].plugin})" for a in other.apps if a in self.apps]
        taken += [f"transport {t} (from {self.transports[t].plugin})" for t in other.transports
                  if t in self.transports]
        return taken

    def merge(self, other: Registry) -> None:
        self.devices.update(other.devices)
        for dev, rs in other.renderers.items():
            self.renderers.setdefault(dev, {}).update(rs)
        self.loaders.extend(other.loaders)
        self.apps.update(other.apps)
        self.transports.update(other.transports)
