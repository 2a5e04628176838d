"""API keys stored by nbrecall, encrypted at rest with Fernet (architecture §9).

The encryption key comes from `$NBRECALL_SECRET_KEY_FILE` (a file holding a Fernet key) or `$NBRECALL_SECRET_KEY`
(the key itself); there is no default key, so nothing is stored unless one is configured. Stored keys live in
`<index>/secrets.json` (or `answer.secrets_file`), written with 0600 permissions. `$NBRECALL_LLM_API_KEY` always
wins over a stored key.

Make a key with:  python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from nbrecall.config import Settings

ENV_SECRET_KEY = "NBRECALL_SECRET_KEY"
ENV_SECRET_KEY_FILE = "NBRECALL_SECRET_KEY_FILE"
ENV_API_KEY = "NBRECALL_LLM_API_KEY"
DEFAULT_NAME = "llm"


class KeyStoreError(RuntimeError):
    """No encryption key configured, a bad one, or a stored key that cannot be read with it."""


def secrets_path(settings: Settings) -> Path:
    if settings.answer.secrets_file:
        return Path(settings.answer.secrets_file).expanduser()
    return settings.index_dir / "secrets.json"


def _no_key_message() -> str:
    return (
        f"no encryption key configured for stored API keys: set {ENV_SECRET_KEY_FILE} to a file holding a Fernet "
        f"key, or {ENV_SECRET_KEY} to the key itself (make one with: python -c \"from cryptography.fernet import "
        f"Fernet; print(Fernet.generate_key().decode())\"); or pass the API key in {ENV_API_KEY} instead"
    )


def load_fernet(env: Mapping[str, str] | None = None) -> Fernet:
    """The Fernet of the configured key; the key file wins over the variable. Raises `KeyStoreError`."""
    env = os.environ if env is None else env
    raw: str | None = None
    source = ""
    if env.get(ENV_SECRET_KEY_FILE):
        path = Path(env[ENV_SECRET_KEY_FILE]).expanduser()
        try:
            raw = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise KeyStoreError(f"{ENV_SECRET_KEY_FILE}={path}: cannot read the key file ({exc.strerror})") from exc
        source = f"{ENV_SECRET_KEY_FILE} ({path})"
    elif env.get(ENV_SECRET_KEY):
        raw = env[ENV_SECRET_KEY].strip()
        source = ENV_SECRET_KEY
    if not raw:
        raise KeyStoreError(_no_key_message())
    try:
        return Fernet(raw.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise KeyStoreError(
            f"{source}: not a Fernet key (32 url-safe base64-encoded bytes, as Fernet.generate_key() makes)"
        ) from exc


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": 1, "keys": {}}
    except (OSError, ValueError) as exc:
        raise KeyStoreError(f"{path}: unreadable secrets file ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("keys"), dict):
        raise KeyStoreError(f"{path}: not an nbrecall secrets file")
    return data


def _write(path: Path, data: dict) -> None:
    """Atomic write with 0600 permissions from the start (the file never exists with wider ones)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".secrets-", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
        os.chmod(path, 0o600)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store_api_key(
    settings: Settings, api_key: str, env: Mapping[str, str] | None = None, name: str = DEFAULT_NAME
) -> Path:
    """Encrypt and store `api_key`; refuses (KeyStoreError) when no encryption key is configured."""
    api_key = api_key.strip()
    if not api_key:
        raise KeyStoreError("empty API key: nothing stored")
    fernet = load_fernet(env)
    path = secrets_path(settings)
    data = _read(path)
    data["keys"][name] = {"token": fernet.encrypt(api_key.encode("utf-8")).decode("ascii"), "stored_at": time.time()}
    _write(path, data)
    return path


def clear_api_key(settings: Settings, name: str = DEFAULT_NAME) -> bool:
    """Forget a stored key (no encryption key needed); True if there was one. The file goes when empty."""
    path = secrets_path(settings)
    if not path.is_file():
        return False
    data = _read(path)
    existed = data["keys"].pop(name, None) is not None
    if data["keys"]:
        _write(path, data)
    else:
        path.unlink()
    return existed


def stored_api_key(settings: Settings, env: Mapping[str, str] | None = None, name: str = DEFAULT_NAME) -> str | None:
    """The stored key decrypted, or None when none is stored. Raises `KeyStoreError` if it cannot be read."""
    path = secrets_path(settings)
    if not path.is_file():
        return None
    entry = _read(path)["keys"].get(name)
    if not entry:
        return None
    fernet = load_fernet(env)
    try:
        return fernet.decrypt(str(entry["token"]).encode("ascii")).decode("utf-8")
    except (InvalidToken, KeyError, UnicodeError) as exc:
        raise KeyStoreError(
            f"{path}: the stored API key cannot be decrypted with the configured key "
            f"({ENV_SECRET_KEY_FILE} / {ENV_SECRET_KEY}); store it again with `nbrecall key set`"
        ) from exc


def resolve_api_key(settings: Settings, env: Mapping[str, str] | None = None) -> str | None:
    """The API key to send: `$NBRECALL_LLM_API_KEY` if set, else the stored key, else None (no auth)."""
    env = os.environ if env is None else env
    if env.get(ENV_API_KEY):
        return env[ENV_API_KEY]
    return stored_api_key(settings, env)
