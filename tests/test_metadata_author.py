"""Who wrote a notebook: its metadata, else git history where the folder is a repository, never the file owner."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from nbformat import v4

from conftest import code, write_nb
from nbrecall.config import MetadataSettings
from nbrecall.ingest.metadata import git_author, notebook_meta
from nbrecall.notebook.analysis import analyse
from nbrecall.notebook.read import read_notebook


def _meta_author(path: Path, rel: str) -> str:
    nb = read_notebook(path, rel)
    return notebook_meta(nb, rel, analyse(nb), MetadataSettings(), file_path=path).author


def _git(repo: Path, *args: str, author: str = "") -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    if author:
        env.update(GIT_AUTHOR_NAME=author, GIT_AUTHOR_EMAIL="a@example.org", GIT_COMMITTER_NAME=author,
                   GIT_COMMITTER_EMAIL="a@example.org")
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def test_author_from_metadata_else_empty_never_the_file_owner(tmp_path: Path) -> None:
    named = write_nb(tmp_path / "named.ipynb", [code("x = 1")],
                     {"authors": [{"name": "Ada Lovelace"}, {"name": "C. Babbage"}]})
    assert _meta_author(named, "named.ipynb") == "Ada Lovelace, C. Babbage"
    plain = write_nb(tmp_path / "plain.ipynb", [code("x = 1")])
    assert plain.owner()  # the file has an owner (root on this machine): it is not who wrote the notebook
    assert _meta_author(plain, "plain.ipynb") == ""


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_author_from_git_history_who_added_the_notebook(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    first = write_nb(repo / "calc" / "ballast é.ipynb", [code("x = 1")])
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "first", author="Grace Hopper")
    write_nb(first, [code("x = 2")])
    second = write_nb(repo / "second.ipynb", [code("y = 1")])
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "second", author="Alan Turing")
    untracked = write_nb(repo / "draft.ipynb", [code("z = 1")])
    assert git_author(first) == "Grace Hopper"  # the one who added it, not the last to change it
    assert _meta_author(second, "second.ipynb") == "Alan Turing"
    assert _meta_author(untracked, "draft.ipynb") == ""
    named = v4.new_notebook(cells=[code("x")], metadata={"author": "Metadata Wins"})
    (repo / "second.ipynb").write_text(__import__("nbformat").writes(named), encoding="utf-8")
    assert _meta_author(second, "second.ipynb") == "Metadata Wins"
    assert git_author(tmp_path / "outside.ipynb") == ""  # no repository above it
