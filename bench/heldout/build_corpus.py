#!/usr/bin/env python3
"""Lay out a fresh corpus from git repositories (standard library and git only): the notebooks of each repository's
checked-out commit, up to 3 MiB each and without `.ipynb_checkpoints` copies, plus its top-level licence files, under
`OUT/<owner>__<repo>/<path in the repository>`.

Usage:
    python3 build_corpus.py OUT GIT_DIR:OWNER/REPO [GIT_DIR:OWNER/REPO ...]

Set F's `fresh` corpus (README_f.md) is the seven repositories its sources table names, each at the commit given
there (a clone checked out at that commit, or its bare git directory at that HEAD).
"""
import os
import subprocess
import sys

MAX_BYTES = 3 * 2**20


def tree(git_dir: str) -> list[tuple[str, int | None]]:
    """(path, size) of every blob at HEAD; size None when git cannot tell (a missing object)."""
    listing = subprocess.run(["git", "-C", git_dir, "ls-tree", "-r", "-l", "HEAD"], capture_output=True, text=True,
                             check=True).stdout
    out = []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        size = meta.split()[3]
        out.append((path, int(size) if size.isdigit() else None))
    return out


def wanted(path: str, size: int | None) -> bool:
    name = path.lower()
    if "/" not in path and name.startswith(("licen", "copying")):
        return True
    return (path.endswith(".ipynb") and ".ipynb_checkpoints" not in path and size is not None
            and size <= MAX_BYTES)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[0]
    for spec in argv[1:]:
        git_dir, _, name = spec.rpartition(":")
        dest = os.path.join(out, name.replace("/", "__"))
        written = 0
        for path, size in tree(git_dir):
            if not wanted(path, size):
                continue
            data = subprocess.run(["git", "-C", git_dir, "show", f"HEAD:{path}"], capture_output=True,
                                  check=True).stdout
            target = os.path.join(dest, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
            written += 1
        print(f"{name}: {written} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
