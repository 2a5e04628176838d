"""The plugin manager, built from the validated settings and passed to where hooks are called (no global one).

`plugin_manager(settings)` adds the hook specifications (`hookspecs`), registers the built-in plugins, then the
plugins installed under the entry-point group `nbrecall` unless `[plugins] load_entrypoints = false`. Plugins
registered later are asked first, so an installed plugin may take over a built-in `kind`.

The built-in plugins are named here as module paths and imported when a manager is built, as datasette names its
default plugins: this package sits low in the layers (it declares the hooks; every stage may import it), and
the stages above it reach it only through the hooks, never by a direct call (docs/architecture.md, "Plugins").
The built-in plugin modules are small and import their implementations when a hook is called.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pluggy

from nbrecall.config import Settings
from nbrecall.plugins import hookspecs

PluginManager = pluggy.PluginManager

# the built-in embedders, figure describers and answerers, registered through the same hooks as any plugin
BUILTIN_PLUGINS = (
    "nbrecall.index.embedder_plugin",
    "nbrecall.vision.describer_plugin",
    "nbrecall.answer.answerer_plugin",
)


def plugin_manager(settings: Settings, *, entrypoints: bool | None = None) -> PluginManager:
    """A manager with the hook specs, the built-in plugins and (unless `[plugins] load_entrypoints = false`, or
    `entrypoints=False`) the plugins installed under the entry-point group `nbrecall`."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    for name in BUILTIN_PLUGINS:
        manager.register(importlib.import_module(name), name)
    if settings.plugins.load_entrypoints if entrypoints is None else entrypoints:
        manager.load_setuptools_entrypoints(hookspecs.PROJECT)
    return manager


def _is_builtin(manager: PluginManager, plugin: object) -> bool:
    return manager.get_name(plugin) in BUILTIN_PLUGINS


def installed(manager: PluginManager) -> list[tuple[str, str]]:
    """(name, version) of every plugin that is not built in; the version is the distribution's, "" without one
    (a plugin registered in code)."""
    versions = {id(plugin): dist.version for plugin, dist in manager.list_plugin_distinfo()}
    return [(manager.get_name(plugin) or "", versions.get(id(plugin), ""))
            for plugin in manager.get_plugins() if not _is_builtin(manager, plugin)]


def metadata_fingerprint(manager: PluginManager | None) -> str:
    """What of the plugins a notebook's chunks depend on: the metadata extractors (name and version) that are not
    built in; "" when there are none, so an index without plugins keeps its fingerprint. Installing, removing or
    upgrading one re-indexes the archive (its fields are tags of every chunk)."""
    if manager is None:
        return ""
    versions = {id(plugin): dist.version for plugin, dist in manager.list_plugin_distinfo()}
    names = sorted(
        f"{impl.plugin_name} {versions.get(id(impl.plugin), '')}".strip()
        for impl in manager.hook.nbrecall_notebook_metadata.get_hookimpls()
        if not _is_builtin(manager, impl.plugin)
    )
    return f"; metadata plugins {', '.join(names)}" if names else ""


def metadata_fields(
    manager: PluginManager, rel_path: str, file_path: Path | None, notebook: Any, metadata: Any
) -> dict[str, str]:
    """The extra fields the metadata extractors return for one notebook, merged in the order the plugins were
    registered (a later one wins a name); names and values stripped, empty ones dropped. ValueError, naming the
    extractors, when one raises or returns something that is not a dict of text (the notebook is quarantined
    with that reason)."""
    hook = manager.hook.nbrecall_notebook_metadata
    names = ", ".join(impl.plugin_name for impl in hook.get_hookimpls())
    try:
        results = hook(rel_path=rel_path, file_path=file_path, notebook=notebook, metadata=metadata)
    except Exception as exc:
        raise ValueError(f"a metadata plugin ({names}) failed on {rel_path}: {type(exc).__name__}: {exc}") from exc
    fields: dict[str, str] = {}
    for result in reversed(results):  # pluggy calls the last registered first
        if not isinstance(result, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in result.items()
        ):
            raise ValueError(
                f"a metadata plugin ({names}) returned {type(result).__name__} for {rel_path}; "
                "nbrecall_notebook_metadata returns a dict of text fields or None"
            )
        for key, value in result.items():
            key, value = key.strip(), value.strip()
            if key and value:
                fields[key] = value
    return fields
