"""The whole contract between tgcore and its plugins.

A plugin is a module (found through the entry-point group ``tgcore``) with functions
marked ``@tgcore.hookimpl`` whose names are the hooks below. Every registration hook is
called once, with a ``register`` callback, and returns nothing. Core's own devices and
renderers register through the same hooks (``tgcore.plugins.builtin``).

A plugin module may declare ``TG_HOOKSPEC_VERSION = <int>``: the version of this file it
was written for. A plugin declaring a version the core does not support is reported and
skipped.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

import pluggy

PROJECT = "tgcore"
HOOKSPEC_VERSION = 1
SUPPORTED_HOOKSPEC_VERSIONS = frozenset({1})

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class RegisterDevice(Protocol):
    def __call__(self, name: str, factory: Callable[[str, str | None], Any], description: str,
                 probe: Callable[[], str | None] | None = None,
                 variants: dict[str, str] | str | None = None) -> None: ...


class RegisterRenderer(Protocol):
    def __call__(self, device: str, name: str, factory: Callable[[], Any], description: str = "",
                 probe: Callable[[], str | None] | None = None) -> None: ...


class RegisterLoader(Protocol):
    def __call__(self, name: str, load: Callable[..., Any], suffixes: tuple[str, ...] = (),
                 magic: tuple[bytes, ...] = ()) -> None: ...


class RegisterTransport(Protocol):
    def __call__(self, name: str, factory: Callable[..., Any], description: str,
                 probe: Callable[[], str | None] | None = None) -> None: ...


class RegisterApp(Protocol):
    def __call__(self, name: str, run: Callable[[list[str]], int], help: str) -> None: ...


@hookspec
def tg_register_devices(register: RegisterDevice) -> None:
    """Register devices.

    ``register(name, factory, description, probe=None, variants=None)``:

    - ``name``: upper-case device name, e.g. ``"AMD"``.
    - ``factory(name, variant)`` builds the device object; ``name`` is the canonical device
        string (``"AMD:EMU"``), ``variant`` is a runtime variant from ``variants`` or ``None``.
        The registry then gives it a renderer (attribute ``renderer``) unless the factory set one.
    - ``description``: one line for ``tg devices``.
    - ``probe()`` returns ``None`` when the device can be used here, else the reason it cannot
        (``"no /dev/kfd"``). It must be cheap and must not raise.
    - ``variants``: runtime variants the factory understands, ``{"EMU": "emulator"}``, or
        ``"*"`` when any string is accepted (``DISK:/path/to/file``).
    """


@hookspec
def tg_register_renderers(register: RegisterRenderer) -> None:
    """Register renderers for a device: ``register(device, name, factory, description="", probe=None)``.

    ``factory()`` returns a Renderer (it carries the ``compiler`` that turns its output into a
    loadable program). ``DEV=CPU:X86`` selects renderer ``X86`` of device ``CPU``. A device's
    default renderer is the first available one registered by the plugin that registered the
    device, else the first available one of any plugin. ``probe`` is as for devices.
    """


@hookspec
def tg_register_loaders(register: RegisterLoader) -> None:
    """Register file loaders: ``register(name, load, suffixes=(".gguf",), magic=(b"GGUF",))``.

    ``tgcore.load(path, **kwargs)`` picks a loader by the file's leading bytes first, then by
    suffix, and returns whatever ``load(path, **kwargs)`` returns.
    """


@hookspec
def tg_register_apps(register: RegisterApp) -> None:
    """Register apps for ``tg serve NAME``: ``register(name, run, help)``.

    ``run(argv)`` receives the arguments after the app name and returns the exit code.
    """


@hookspec
def tg_register_transports(register: RegisterTransport) -> None:
    """Register transports that move tensors between processes or machines.

    ``register(name, factory, description, probe=None)``: ``factory(**options)`` connects this process
    to its group and returns a transport object (``rank``, ``world_size``, ``send``, ``recv``,
    ``allreduce``, ``barrier``, ``close``); ``probe`` is as for devices. ``tgcore.transport(name)``
    looks a transport up by name.
    """


@hookspec
def tg_add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``tg`` subcommands: ``p = subparsers.add_parser(...)``; ``p.set_defaults(func=fn)``.

    ``fn(args) -> int`` is called with the parsed namespace and returns the exit code.
    Only called by the ``tg`` command line, never on ``import tgcore``.
    """
