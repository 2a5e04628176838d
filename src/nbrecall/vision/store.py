"""Figure descriptions cached by image content, and the queue of figures still to describe.

`<index>/figures.sqlite` holds two tables. `descriptions` is a cache keyed by (image SHA-256, describer id): a
re-index, a changed chunker or a copied notebook finds the same bytes and never pays twice. `figures` lists the
raster images of every indexed notebook with their state for the configured describer (`waiting`, `described`,
`failed`), in embedding priority order: the describe phase works through it and `nbrecall status` counts it.
The queue is written before a batch's store commit, so a killed run never leaves an indexed figure unqueued; rows
of contents that are no longer indexed are dropped at the start of the next describe phase.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS descriptions (
    image_sha TEXT NOT NULL, describer TEXT NOT NULL, text TEXT, error TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 1, seconds REAL NOT NULL DEFAULT 0, at REAL NOT NULL,
    PRIMARY KEY (image_sha, describer));
CREATE TABLE IF NOT EXISTS figures (
    nb_sha TEXT NOT NULL, image_sha TEXT NOT NULL, priority REAL NOT NULL, state TEXT NOT NULL,
    PRIMARY KEY (nb_sha, image_sha));
CREATE INDEX IF NOT EXISTS figures_state ON figures (state, priority DESC, nb_sha);
"""

FILE_NAME = "figures.sqlite"


@dataclass
class Description:
    """What a describer made of one image: `text` (possibly empty: nothing legible), or None with `error`."""

    text: str | None
    error: str = ""
    attempts: int = 1
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.text is not None


class FigureStore:
    """The description cache and the figure queue, one SQLite file in the index folder."""

    def __init__(self, path: Path, readonly: bool = False) -> None:
        self.path = path
        if readonly:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(SCHEMA)

    @classmethod
    def of_index(cls, index_dir: Path) -> FigureStore:
        return cls(index_dir / FILE_NAME)

    def close(self) -> None:
        self.db.close()

    # descriptions --------------------------------------------------------------------------------------------

    def get_many(self, image_shas: Iterable[str], describer: str) -> dict[str, Description]:
        found: dict[str, Description] = {}
        shas = sorted(set(image_shas))
        for start in range(0, len(shas), 500):
            part = shas[start : start + 500]
            marks = ",".join("?" * len(part))
            for sha, text, error, attempts, seconds in self.db.execute(
                f"SELECT image_sha, text, error, attempts, seconds FROM descriptions WHERE describer = ? AND "
                f"image_sha IN ({marks})", [describer, *part]
            ):
                found[sha] = Description(text, error, attempts, seconds)
        return found

    def put(self, image_sha: str, describer: str, description: Description) -> None:
        """Store one result; a failure counts its attempts across runs (`VisionSettings.max_attempts`)."""
        with self.db:
            previous = self.db.execute(
                "SELECT attempts, text FROM descriptions WHERE image_sha = ? AND describer = ?", (image_sha, describer)
            ).fetchone()
            attempts = (previous[0] + 1) if previous and previous[1] is None and not description.ok else 1
            self.db.execute(
                "INSERT OR REPLACE INTO descriptions (image_sha, describer, text, error, attempts, seconds, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (image_sha, describer, description.text, description.error, attempts, description.seconds,
                 time.time()),
            )
            state = "described" if description.ok else "failed"
            self.db.execute("UPDATE figures SET state = ? WHERE image_sha = ?", (state, image_sha))

    # queue ---------------------------------------------------------------------------------------------------

    def set_notebook(self, nb_sha: str, states: dict[str, str], priority: float) -> None:
        """The figures of one content as just indexed (replaces what was listed for it)."""
        with self.db:
            self.db.execute("DELETE FROM figures WHERE nb_sha = ?", (nb_sha,))
            self.db.executemany(
                "INSERT INTO figures (nb_sha, image_sha, priority, state) VALUES (?, ?, ?, ?)",
                [(nb_sha, sha, priority, state) for sha, state in states.items()],
            )

    def keep_only(self, nb_shas: set[str]) -> int:
        """Drop the rows of contents no longer indexed (removed, changed, or written by a killed batch)."""
        listed = {row[0] for row in self.db.execute("SELECT DISTINCT nb_sha FROM figures")}
        gone = sorted(listed - nb_shas)
        with self.db:
            self.db.executemany("DELETE FROM figures WHERE nb_sha = ?", [(sha,) for sha in gone])
        return len(gone)

    def retry_failed(self, describer: str, max_attempts: int) -> int:
        """Failed figures whose description was tried fewer than `max_attempts` times wait again."""
        with self.db:
            cursor = self.db.execute(
                "UPDATE figures SET state = 'waiting' WHERE state = 'failed' AND image_sha IN (SELECT image_sha "
                "FROM descriptions WHERE describer = ? AND text IS NULL AND attempts < ?)", (describer, max_attempts)
            )
        return cursor.rowcount

    def waiting_notebooks(self, limit: int, skip: set[str] | None = None) -> list[str]:
        """Contents with figures waiting, most urgent first (recent and healthy notebooks, as vectors)."""
        skip = skip or set()
        out: list[str] = []
        for (sha,) in self.db.execute(
            "SELECT nb_sha FROM figures WHERE state = 'waiting' GROUP BY nb_sha ORDER BY MAX(priority) DESC, nb_sha"
        ):
            if sha not in skip:
                out.append(sha)
                if len(out) >= limit:
                    break
        return out

    def waiting_images(self, nb_sha: str) -> list[str]:
        return [r[0] for r in self.db.execute(
            "SELECT image_sha FROM figures WHERE nb_sha = ? AND state = 'waiting' ORDER BY image_sha", (nb_sha,))]

    def counts(self, nb_shas: set[str] | None = None) -> dict[str, int]:
        """Distinct images by state (`described`, `waiting`, `failed`), among `nb_shas` when given."""
        counts = {"described": 0, "waiting": 0, "failed": 0}
        rows = self.db.execute("SELECT nb_sha, image_sha, state FROM figures").fetchall()
        seen: dict[str, str] = {}
        order = {"described": 0, "failed": 1, "waiting": 2}
        for nb_sha, image_sha, state in rows:
            if nb_shas is not None and nb_sha not in nb_shas:
                continue
            if image_sha not in seen or order.get(state, 3) < order.get(seen[image_sha], 3):
                seen[image_sha] = state
        for state in seen.values():
            counts[state] = counts.get(state, 0) + 1
        return counts

    def cache_bytes(self) -> int:
        """Size of the file on disk (with its write-ahead log)."""
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += Path(f"{self.path}{suffix}").stat().st_size
        return total
