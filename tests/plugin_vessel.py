"""A firm's plugin as a test would install it: the drawing number a notebook mentions, and the vessel class from
its folder; plus an embedder kind ("hash", the tests' HashEmbedder). Loaded through a fake entry point in
tests/test_plugins.py, or registered directly on a manager."""

from __future__ import annotations

import re

from conftest import HashEmbedder
from nbrecall.plugins import hookimpl

DRAWING = re.compile(r"\bDWG-\d{4}\b")


@hookimpl
def nbrecall_notebook_metadata(rel_path, notebook):  # noqa: ANN001, ANN201  # a plugin takes the arguments it needs
    fields = {}
    for cell in notebook.cells:
        found = DRAWING.search(cell.source)
        if found:
            fields["drawing"] = found.group()
            break
    folder = rel_path.split("/")[0]
    if folder.startswith("class-"):
        fields["vessel_class"] = folder.removeprefix("class-")
    return fields or None


@hookimpl
def nbrecall_embedder(settings, cache_dir):  # noqa: ANN001, ANN201
    del cache_dir
    return HashEmbedder() if settings.embed.kind == "hash" else None
