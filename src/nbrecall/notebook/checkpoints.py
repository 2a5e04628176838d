"""Jupyter's checkpoint copies: `D/.ipynb_checkpoints/N-checkpoint.ipynb` is the autosave of `D/N.ipynb`.

Discovery enters the folder, families treat the copy as a version of its notebook, and search labels what only
the copy holds; all three read the convention from here.
"""

from __future__ import annotations

import posixpath

CHECKPOINTS = ".ipynb_checkpoints"
CHECKPOINT_SUFFIX = "-checkpoint.ipynb"


def is_checkpoint(rel: str) -> bool:
    """Whether a path is a Jupyter checkpoint copy (`.../.ipynb_checkpoints/NAME-checkpoint.ipynb`)."""
    parts = rel.replace("\\", "/").split("/")
    return len(parts) >= 2 and parts[-2] == CHECKPOINTS


def saved_path(rel: str) -> str:
    """The notebook a checkpoint path saves: `D/.ipynb_checkpoints/N-checkpoint.ipynb` → `D/N.ipynb`."""
    folder, name = posixpath.split(rel.replace("\\", "/"))
    parent = posixpath.dirname(folder)
    if name.endswith(CHECKPOINT_SUFFIX):
        name = name[: -len(CHECKPOINT_SUFFIX)] + ".ipynb"
    return posixpath.join(parent, name) if parent else name


def checkpoint_path(rel: str) -> str:
    """Where Jupyter keeps the checkpoint of a notebook path: `D/N.ipynb` → `D/.ipynb_checkpoints/N-checkpoint…`."""
    folder, name = posixpath.split(rel.replace("\\", "/"))
    stem = name[: -len(".ipynb")] if name.endswith(".ipynb") else name
    return posixpath.join(folder, CHECKPOINTS, stem + CHECKPOINT_SUFFIX) if folder else posixpath.join(
        CHECKPOINTS, stem + CHECKPOINT_SUFFIX)
