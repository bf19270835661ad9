"""Device strings and opening devices.

A device string is ``NAME`` or ``NAME:VARIANT``: ``CPU``, ``CPU:X86``, ``AMD:EMU``,
``DISK:/path/to/file``. The variant names a renderer registered for that device or a
runtime variant the device itself declared. ``DEV`` in the environment picks the default.
Everything here reads the plugin host's registry; nothing names a particular backend.
"""
from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from typing import Any

from tgcore.plugins.known import install_hint
from tgcore.plugins.manager import PluginHost, get_host
from tgcore.plugins.registry import DeviceEntry, RendererEntry, unavailable_reason


class DeviceError(ValueError):
    """An unknown or unavailable device or variant."""


@dataclass(frozen=True)
class DeviceSpec:
    name: str            # upper-case device name, "CPU"
    variant: str | None  # "X86", "EMU", a file path for DISK, or None

    def __str__(self) -> str:
        return self.name if self.variant is None else f"{self.name}:{self.variant}"


def parse_device(spec: str) -> DeviceSpec:
    """Split ``"cpu:x86"`` into ``DeviceSpec("CPU", "X86")``.

    Names are case-insensitive; a variant is upper-cased unless it looks like a path (it
    contains ``/`` or ``\\`` or starts with ``.``), so ``DISK:/data/Model.gguf`` keeps its case.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise DeviceError(f"a device is a string like 'CPU' or 'CPU:X86', got {spec!r}")
    name, sep, variant = spec.strip().partition(":")
    if not name:
        raise DeviceError(f"device string {spec!r} has no device name before ':'")
    if not sep:
        return DeviceSpec(name.upper(), None)
    if not variant:
        raise DeviceError(f"device string {spec!r} has an empty variant after ':'")
    is_path = "/" in variant or "\\" in variant or variant.startswith(".")
    return DeviceSpec(name.upper(), variant if is_path else variant.upper())


def default_device_string() -> str:
    """``DEV`` from the environment, else ``CPU``."""
    return os.environ.get("DEV", "").strip() or "CPU"


def _unknown_device_message(name: str, host: PluginHost) -> str:
    known = ", ".join(sorted(host.registry.devices)) or "none"
    msg = f"unknown device {name!r}; available devices: {known}"
    hint = install_hint("device", name)
    return f"{msg}. {hint}" if hint else msg


def _unknown_variant_message(spec: DeviceSpec, entry: DeviceEntry, host: PluginHost) -> str:
    options = sorted(host.registry.renderers.get(spec.name, {}))
    if isinstance(entry.variants, dict):
        options += sorted(entry.variants)
    msg = f"unknown variant {spec.variant!r} of device {spec.name}; variants: {', '.join(options) or 'none'}"
    hint = install_hint("variant", f"{spec.name}:{spec.variant}")
    return f"{msg}. {hint}" if hint else msg


def default_renderer(device: str, host: PluginHost | None = None) -> tuple[RendererEntry | None, list[str]]:
    """The renderer a device uses when no variant names one, and why others were passed over.

    The first available renderer registered by the device's own plugin wins, then the first
    available one from any other plugin (so a backend plugin can stand in for a missing C
    compiler).
    """
    host = host or get_host()
    entry = host.registry.devices.get(device)
    renderers = list(host.registry.renderers.get(device, {}).values())
    own = [r for r in renderers if entry is not None and r.plugin == entry.plugin]
    others = [r for r in renderers if r not in own]
    skipped: list[str] = []
    for r in own + others:
        reason = unavailable_reason(r.probe)
        if reason is None:
            return r, skipped
        skipped.append(f"{r.name}: {reason}")
    return None, skipped


def resolve(spec: str | DeviceSpec, host: PluginHost | None = None) -> tuple[DeviceEntry, RendererEntry | None,
                                                                              DeviceSpec]:
    """Check a device string against the registry: the device, its renderer and the parsed spec.

    Raises ``DeviceError`` naming what is available (and which pip package provides a known
    but missing device) when the device or variant is unknown or cannot run here.
    """
    host = host or get_host()
    spec = parse_device(spec) if isinstance(spec, str) else spec
    entry = host.registry.devices.get(spec.name)
    if entry is None:
        raise DeviceError(_unknown_device_message(spec.name, host))
    reason = unavailable_reason(entry.probe)
    if reason is not None:
        raise DeviceError(f"device {spec.name} is unavailable here: {reason}")
    renderer: RendererEntry | None
    if spec.variant is not None and spec.variant in host.registry.renderers.get(spec.name, {}):
        renderer = host.registry.renderers[spec.name][spec.variant]
        reason = unavailable_reason(renderer.probe)
        if reason is not None:
            raise DeviceError(f"renderer {spec} is unavailable here: {reason}")
        return entry, renderer, spec
    if spec.variant is not None and not entry.accepts_variant(spec.variant):
        raise DeviceError(_unknown_variant_message(spec, entry, host))
    renderer, skipped = default_renderer(spec.name, host)
    if renderer is None and host.registry.renderers.get(spec.name):
        raise DeviceError(f"device {spec.name} has no usable renderer here ({'; '.join(skipped)})")
    return entry, renderer, spec


_open: dict[str, Any] = {}
_open_lock = threading.Lock()


@functools.lru_cache(maxsize=1024)  # parsing costs ~3 us and a new tensor asks ~3 times; DISK paths are open-ended
def _canonical_str(spec: str) -> str:
    return str(parse_device(spec))


def canonical(spec: str | None = None) -> str:
    """The canonical form of a device string (``"cpu:x86"`` -> ``"CPU:X86"``), default ``DEV``."""
    if spec is None:
        spec = default_device_string()
    return _canonical_str(spec) if type(spec) is str else str(parse_device(spec))  # the latter raises


def open_device(spec: str | None = None) -> Any:
    """The device object for a device string, created once per canonical string."""
    key = canonical(spec)
    dev = _open.get(key)
    if dev is not None:
        return dev
    with _open_lock:
        if key in _open:
            return _open[key]
        entry, renderer, parsed = resolve(key)
        runtime_variant = parsed.variant if renderer is None or parsed.variant != renderer.name else None
        dev = entry.factory(key, runtime_variant)
        if renderer is not None and getattr(dev, "renderer", None) is None:
            dev.renderer = renderer.factory()
        _open[key] = dev
        return dev


def close_devices() -> None:
    """Forget opened devices (tests, or after the plugin host changed)."""
    with _open_lock:
        _open.clear()
