"""Model files verified once are not hashed again by every process while they are unchanged (`known_sha256`)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from nbrecall.index import embed
from nbrecall.index.embed import OnnxMiniLM, known_sha256, record_sha256


def test_a_recorded_hash_holds_only_while_the_file_is_unchanged(tmp_path: Path) -> None:
    cache, data = tmp_path / "cache", tmp_path / "weights.bin"
    data.write_bytes(b"weights v1")
    assert known_sha256(cache, data) is None
    sha = hashlib.sha256(b"weights v1").hexdigest()
    record_sha256(cache, data, sha)
    assert known_sha256(cache, data) == sha
    assert known_sha256(None, data) is None  # no cache folder: always hashed
    stat = data.stat()
    data.write_bytes(b"weights v2")  # same size, written again
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime put back (ctime moves)
    assert known_sha256(cache, data) is None
    replaced = tmp_path / "other.bin"
    replaced.write_bytes(b"weights v1")
    os.replace(replaced, data)  # another file at the same path
    assert known_sha256(cache, data) is None
    (cache / embed.STAMPS_NAME).write_text("{half")
    assert known_sha256(cache, data) is None  # a damaged stamp file: hash again


def test_the_second_load_reads_no_weights(tmp_path: Path, model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = OnnxMiniLM.bundled(model_cache)
    first.prepare()
    calls: list[Path] = []

    def counting(path: Path) -> str:
        calls.append(path)
        raise AssertionError(f"hashed again: {path}")

    monkeypatch.setattr(embed, "sha256_file", counting)
    second = OnnxMiniLM.bundled(model_cache)
    assert second.model_id == first.model_id
    assert isinstance(second._model_bytes(), str)  # the verified cached graph, loaded from its path
    assert calls == []
