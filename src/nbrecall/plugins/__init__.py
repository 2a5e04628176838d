"""Plugin seams where firms differ (docs/architecture.md, "Plugins"): pluggy hooks found through the entry-point
group `nbrecall`: a notebook metadata extractor, an embedder, a figure describer, an answerer.

A plugin marks its functions with `hookimpl`; `plugin_manager(settings)` builds the manager that callers pass on.
"""

from nbrecall.plugins.hookspecs import PROJECT, hookimpl, hookspec
from nbrecall.plugins.manager import (
    BUILTIN_PLUGINS,
    PluginManager,
    installed,
    metadata_fields,
    metadata_fingerprint,
    plugin_manager,
)

__all__ = [
    "BUILTIN_PLUGINS",
    "PROJECT",
    "PluginManager",
    "hookimpl",
    "hookspec",
    "installed",
    "metadata_fields",
    "metadata_fingerprint",
    "plugin_manager",
]
