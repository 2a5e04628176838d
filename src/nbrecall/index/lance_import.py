"""`import lancedb` without the REST namespace client a local folder never uses.

lancedb 0.40 imports `lance_namespace`, which re-exports the generated OpenAPI client
`lance_namespace_urllib3_client`; that package's `__init__` imports all nine REST API modules (urllib3 and
hundreds of request methods) before anything else: 0.45-0.7 s of lancedb's 1.2-1.9 s import on this project's
machines (`python -X importtime`, bench/README.md). Only its pydantic `models` are used on the local path. pylance
made the same import lazy upstream (lance-format/lance#9273); lancedb has not yet.

`import_lancedb()` registers the client package with its `__init__` not yet run, so `...client.models` (which
lancedb needs) imports on its own; the first attribute asked of the package itself (`ApiClient`, `BranchApi`: a
REST namespace) runs the real `__init__` then, so nothing changes for code that uses it. If the package is laid
out otherwise, lancedb is imported the ordinary way.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

CLIENT = "lance_namespace_urllib3_client"


def _defer_package_init(name: str) -> None:
    """Put package `name` in sys.modules with its `__path__` but without running its `__init__` until one of
    its own attributes is read (submodules import as usual)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    module = importlib.util.module_from_spec(spec)

    def load(attr: str) -> Any:
        # Runs once: the real __init__ then fills the module in place (it defines no __getattr__ of its own).
        module.__dict__.pop("__getattr__", None)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    module.__getattr__ = load  # type: ignore[method-assign]
    sys.modules[name] = module


def import_lancedb() -> ModuleType:
    """lancedb, imported once per process (later calls return the module)."""
    if "lancedb" not in sys.modules:
        try:
            _defer_package_init(CLIENT)
        except Exception:  # an unexpected layout: the ordinary import below still works
            sys.modules.pop(CLIENT, None)
    import lancedb

    return lancedb
