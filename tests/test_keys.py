"""API keys at rest: Fernet round trip, refusal without a key, the environment wins, 0600 files, the CLI."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from typer.testing import CliRunner

from nbrecall.cli import app
from nbrecall.config import Settings
from nbrecall.keys import (
    KeyStoreError,
    clear_api_key,
    load_fernet,
    resolve_api_key,
    secrets_path,
    store_api_key,
    stored_api_key,
)

SECRET = "sk-live-abcdef0123456789"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(index_dir=tmp_path / "idx")


@pytest.fixture
def env() -> dict[str, str]:
    return {"NBRECALL_SECRET_KEY": Fernet.generate_key().decode()}


def test_round_trip_is_encrypted_at_rest(settings: Settings, env: dict[str, str]) -> None:
    path = store_api_key(settings, SECRET, env)
    assert path == settings.index_dir / "secrets.json"
    raw = path.read_text()
    assert SECRET not in raw
    token = json.loads(raw)["keys"]["llm"]["token"]
    assert Fernet(env["NBRECALL_SECRET_KEY"].encode()).decrypt(token.encode()).decode() == SECRET
    assert stored_api_key(settings, env) == SECRET
    assert resolve_api_key(settings, env) == SECRET


def test_file_permissions_are_0600(settings: Settings, env: dict[str, str]) -> None:
    path = store_api_key(settings, SECRET, env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    store_api_key(settings, "sk-other", env)  # rewritten: still 0600, no temp files left behind
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secrets.json"]


def test_refuses_without_a_key_naming_both_variables(settings: Settings) -> None:
    with pytest.raises(KeyStoreError) as info:
        store_api_key(settings, SECRET, {})
    assert "NBRECALL_SECRET_KEY_FILE" in str(info.value) and "NBRECALL_SECRET_KEY " in str(info.value) + " "
    assert not secrets_path(settings).exists()


def test_key_file_wins_and_bad_keys_are_refused(settings: Settings, tmp_path: Path) -> None:
    key_file = tmp_path / "fernet.key"
    key_file.write_text(Fernet.generate_key().decode() + "\n")
    env = {"NBRECALL_SECRET_KEY_FILE": str(key_file), "NBRECALL_SECRET_KEY": "not a key"}
    store_api_key(settings, SECRET, env)
    assert stored_api_key(settings, {"NBRECALL_SECRET_KEY_FILE": str(key_file)}) == SECRET
    with pytest.raises(KeyStoreError, match="not a Fernet key"):
        load_fernet({"NBRECALL_SECRET_KEY": "not a key"})
    with pytest.raises(KeyStoreError, match="cannot read the key file"):
        load_fernet({"NBRECALL_SECRET_KEY_FILE": str(tmp_path / "missing.key")})
    other = {"NBRECALL_SECRET_KEY": Fernet.generate_key().decode()}
    with pytest.raises(KeyStoreError, match="cannot be decrypted"):
        stored_api_key(settings, other)


def test_environment_variable_wins_over_the_stored_key(settings: Settings, env: dict[str, str]) -> None:
    store_api_key(settings, SECRET, env)
    assert resolve_api_key(settings, {**env, "NBRECALL_LLM_API_KEY": "sk-from-env"}) == "sk-from-env"
    # even when the stored key could not be decrypted
    assert resolve_api_key(settings, {"NBRECALL_LLM_API_KEY": "sk-from-env"}) == "sk-from-env"
    assert resolve_api_key(Settings(index_dir=settings.index_dir / "none"), {}) is None


def test_clear_and_secrets_file_setting(settings: Settings, env: dict[str, str], tmp_path: Path) -> None:
    settings.answer.secrets_file = str(tmp_path / "elsewhere" / "keys.json")
    path = store_api_key(settings, SECRET, env)
    assert path == tmp_path / "elsewhere" / "keys.json"
    assert clear_api_key(settings) is True
    assert not path.exists() and clear_api_key(settings) is False
    assert stored_api_key(settings, env) is None


def test_cli_key_set_reads_stdin_and_clear(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    key = Fernet.generate_key().decode()
    runner = CliRunner()
    refused = runner.invoke(app, ["key", "set", "--index", str(index)], input=SECRET + "\n",
                            env={"NBRECALL_SECRET_KEY": "", "NBRECALL_SECRET_KEY_FILE": ""})
    assert refused.exit_code == 2
    assert "NBRECALL_SECRET_KEY_FILE" in refused.output and not (index / "secrets.json").exists()
    done = runner.invoke(app, ["key", "set", "--index", str(index)], input=SECRET + "\n",
                         env={"NBRECALL_SECRET_KEY": key})
    assert done.exit_code == 0, done.output
    assert SECRET not in done.output and SECRET not in (index / "secrets.json").read_text()
    assert stored_api_key(Settings(index_dir=index), {"NBRECALL_SECRET_KEY": key}) == SECRET
    assert runner.invoke(app, ["key", "set", "--index", str(index), SECRET]).exit_code != 0  # never from argv
    cleared = runner.invoke(app, ["key", "clear", "--index", str(index)])
    assert cleared.exit_code == 0 and "removed" in cleared.output
    assert not (index / "secrets.json").exists()
