"""What an index takes on disk: `lance/` compacted, the manifest, and both (issue 13's index-growth figures).

Why compacted: a run leaves old table versions for ten minutes (readers may still hold them), so `du` of the live
folder depends on when it is read. A copy of `lance/` is compacted with `optimize(cleanup_older_than=0)` on each
table; the index itself is not touched.

    .venv/bin/python bench/index_size.py /tmp/no-facts /tmp/facts
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
from pathlib import Path

from index_corpus import folder_size


def lance_compacted(index: Path) -> int:
    from nbrecall.index.lance_import import import_lancedb

    lancedb = import_lancedb()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "lance"
        shutil.copytree(index / "lance", copy)
        db = lancedb.connect(copy)
        for name in db.list_tables().tables:
            db.open_table(name).optimize(cleanup_older_than=dt.timedelta(0))
        return folder_size(copy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("indexes", nargs="+", type=Path, help="index folders; the first is the baseline")
    args = parser.parse_args()
    base = 0
    print("| index | lance compacted | manifest | both | growth |")
    print("|---|---:|---:|---:|---:|")
    for index in args.indexes:
        lance = lance_compacted(index)
        manifest = (index / "manifest.sqlite").stat().st_size
        both = lance + manifest
        growth = f"{100 * (both / base - 1):+.1f}%" if base else "—"
        base = base or both
        print(f"| {index} | {lance / 1e6:.1f} MB | {manifest / 1e6:.1f} MB | {both / 1e6:.1f} MB | {growth} |")


if __name__ == "__main__":
    main()
