"""The hooks a plugin may implement (pluggy hook specifications); see docs/architecture.md, "Plugins".

A plugin is a module (or object) with functions named as below and marked with `nbrecall.plugins.hookimpl`; it
is found through the entry-point group `nbrecall`. A plugin implements any subset of the hooks and takes any
subset of a hook's arguments, by name. The built-in embedders, figure describers and answerers register through
the same hooks (`nbrecall.plugins.manager.BUILTIN_PLUGINS`).

The factory hooks are `firstresult`: the first implementation that returns something other than None wins. The
last registered is asked first, so an installed plugin is asked before the built-in ones; an implementation
returns None for every `kind` that is not its own.

This module only declares: it imports no stage. The arguments' types are named in the docstrings (they belong to
stages above this one in the layers, docs/architecture.md §1); the callers check what a hook returns.
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "nbrecall"  # the pluggy project name, the marker name and the entry-point group
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def nbrecall_notebook_metadata(
    rel_path: str, file_path: Any, notebook: Any, metadata: Any
) -> dict[str, str] | None:
    """Extra fields of one notebook, found by a firm's own rules (a vessel class, a client, a drawing number).

    Called once per indexed notebook, while the indexer reads its metadata (`ingest.metadata.notebook_meta`),
    after the built-in metadata is known. Arguments: `rel_path` (str, the notebook's path under its root, with
    `/`), `file_path` (`pathlib.Path` of the file, or None when there is no file), `notebook`
    (`notebook.model.Notebook`: its cells, sources, outputs and notebook metadata), `metadata`
    (`ingest.metadata.NotebookMeta`: year, project, author, tags and the rest found so far; read it, do not
    change it).

    Returns a dict of field name → text, or None for nothing. Every field is kept with the notebook (the
    manifest's metadata, `extra`) and becomes the tag `name:value`, so `nbrecall search --tag name:value` (and the
    API's and MCP's `tag` filter) finds the notebook's chunks. Names and values are stripped; an empty one is
    dropped. When several plugins return the same name, the one registered last wins.
    """


@hookspec(firstresult=True)
def nbrecall_embedder(settings: Any, cache_dir: Any) -> Any:
    """The text embedder `[embed] kind` names, or None when that kind is not this plugin's.

    Called when an index run, a search or a worker process builds its embedder
    (`index.embedder_from_settings.make_embedder`). Arguments: `settings` (`config.Settings`, validated; the
    `[embed]` section is `settings.embed`), `cache_dir` (`pathlib.Path`, where a model built at first use may be
    cached). Returns an object with the `index.embed.Embedder` interface (`model_id`, `dim`, `max_tokens`,
    `count_tokens`, `embed`). Its `model_id` keys the embedding cache and the index's fingerprint: a new model_id
    re-embeds the archive.
    """


@hookspec(firstresult=True)
def nbrecall_figure_describer(settings: Any, env: Any) -> Any:
    """The figure describer `[vision] kind` names, or None when that kind is not this plugin's.

    Called when the indexer, `convert --describe-figures` or the viewer needs the describer
    (`vision.factory.make_describer`), never when `[vision] kind` is empty ("off"). Arguments: `settings`
    (`config.Settings`; `[vision]` is `settings.vision`), `env` (a mapping of environment variables, or None for
    the process's, where API keys are looked up). Returns an object with the `vision.describe.Describer`
    interface (`id`, `label`, `describe`).
    """


@hookspec(firstresult=True)
def nbrecall_answerer(settings: Any) -> Any:
    """The answerer `[answer] kind` names ("" chooses the LLM when one is configured, else the extractive one),
    or None when that kind is not this plugin's.

    Called once per question, after the search (`answer.answerers.make_answerer`). Arguments: `settings`
    (`config.Settings`; `[answer]` is `settings.answer`). Returns an object with the `answer.answerers.Answerer`
    interface: `stream(question, result, archive, filters)` yields `answer.types.AnswerEvent`s and ends with a
    `done` event that carries the `Answer`.
    """
