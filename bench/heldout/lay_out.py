#!/usr/bin/env python3
"""Lay out the corpora of labelled sets again from their READMEs (standard library and git only).

Each `README_<set>.md` names its repositories and commits in a table with `repository` and `commit` columns; this
reads that table, checks that each repository's git directory is at that commit, and writes the corpus with
`build_corpus.py` (same file rules). Why: the corpora live outside the repository (their notebooks are not ours to
copy), and a wiped `/tmp` used to cost a session an hour of by-hand rebuilding before a model could be judged on
every labelled archive again (bench/README.md, sessions 26 and 27).

Usage:
    python3 lay_out.py --git-dir '/work/.mirror/{owner}+{name}/repo' --out '/tmp/fresh_{set}/corpus' o p q …

`{owner}`, `{name}` and `{set}` are filled in. A set whose repository is missing or at another commit is skipped
with the reason (build a checkout at the README's commit and point `--git-dir` at it); a corpus folder that exists
already is left alone. Steps a README adds after the build (a file removed) are its own: read it.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import build_corpus

HERE = os.path.dirname(os.path.abspath(__file__))


def sources(readme: str) -> list[tuple[str, str]]:
    """(owner/name, commit) of every row of the README's first table that has `repository` and `commit` columns."""
    rows: list[tuple[str, str]] = []
    columns: list[str] | None = None
    with open(readme, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("|"):
                if rows:
                    break  # the table ended
                columns = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if columns is None:
                names = [c.lower() for c in cells]
                if "repository" in names and "commit" in names:
                    columns = names
                continue
            if set("".join(cells)) <= set("-: "):
                continue  # the rule under the header
            repo = re.sub(r"[`\[\]]|\(.*?\)", "", cells[columns.index("repository")]).strip()
            commit = cells[columns.index("commit")].strip("` ")
            if re.fullmatch(r"[\w.-]+/[\w.-]+", repo) and re.fullmatch(r"[0-9a-f]{7,40}", commit):
                rows.append((repo, commit))
    return rows


def head(git_dir: str) -> str:
    done = subprocess.run(["git", "-C", git_dir, "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def lay_out(name: str, git_dir: str, out: str) -> str:
    """Build one set's corpus; what was done, or why not."""
    readme = os.path.join(HERE, f"README_{name}.md")
    if not os.path.exists(readme):
        return f"{name}: no {readme}"
    target = out.format(set=name)
    if os.path.exists(target):
        return f"{name}: {target} exists, left alone"
    specs = []
    for repo, commit in sources(readme):
        owner, repo_name = repo.split("/", 1)
        directory = git_dir.format(owner=owner, name=repo_name)
        at = head(directory)
        if not at:
            return f"{name}: skipped, {repo} has no git directory at {directory}"
        if not at.startswith(commit) and not commit.startswith(at):
            return f"{name}: skipped, {directory} is at {at[:12]}, the README names {commit[:12]}"
        specs.append(f"{directory}:{repo}")
    if not specs:
        return f"{name}: skipped, no repository table in {readme}"
    build_corpus.main([target, *specs])
    return f"{name}: {len(specs)} repositories written to {target}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", help="set letters (README_<set>.md beside this script)")
    parser.add_argument("--git-dir", required=True, help="each repository's git directory: {owner} {name}")
    parser.add_argument("--out", required=True, help="each corpus folder: {set}")
    args = parser.parse_args(argv)
    for name in args.sets:
        print(lay_out(name, args.git_dir, args.out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
