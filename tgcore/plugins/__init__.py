"""Plugin system: hookspecs, the plugin host, and the registry of what plugins provide.

Third-party code needs only ``tgcore.hookimpl`` and the hook names in ``hookspecs``.
"""
from tgcore.plugins.hookspecs import HOOKSPEC_VERSION, SUPPORTED_HOOKSPEC_VERSIONS, hookimpl, hookspec
from tgcore.plugins.manager import PluginError, PluginHost, PluginInfo, get_host, module_plugin, set_host

__all__ = ["HOOKSPEC_VERSION", "SUPPORTED_HOOKSPEC_VERSIONS", "hookimpl", "hookspec", "PluginError", "PluginHost",
           "PluginInfo", "get_host", "module_plugin", "set_host"]
