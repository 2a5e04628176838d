"""Settings: one validated model for the file, the environment and the flags (errors name the file and the key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbrecall.config import ConfigError, Settings, load_settings


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "nbrecall.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_wrong_types_are_errors_naming_the_file_and_the_key(tmp_path: Path) -> None:
    config = _toml(tmp_path, '[embed]\nbatch_size = "32"\nthreads = "lots"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    message = str(caught.value)
    assert f"{config}: 'embed.batch_size'" in message and "'32'" in message
    assert f"{config}: 'embed.threads'" in message and "'lots'" in message


def test_unknown_keys_and_sections_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown setting 'embed\.batchsize' \(known: .*batch_size"):
        load_settings(_toml(tmp_path, "[embed]\nbatchsize = 32\n"), env={})
    with pytest.raises(ConfigError, match="unknown setting 'embedding'"):
        load_settings(_toml(tmp_path, "[embedding]\nkind = 'openai'\n"), env={})
    with pytest.raises(ConfigError, match="'embed' must be a table"):
        load_settings(_toml(tmp_path, "embed = 3\n"), env={})
    with pytest.raises(ConfigError, match=r"\[index\] takes only 'dir'"):
        load_settings(_toml(tmp_path, "[index]\nfolder = 'x'\n"), env={})


def test_a_ranker_model_that_is_not_a_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.onnx"
    with pytest.raises(ConfigError, match=r"answer\.ranker_model: .*missing\.onnx.* is not a file"):
        load_settings(_toml(tmp_path, f"[answer]\nranker_model = '{missing}'\n"), env={})
    missing.write_bytes(b"a model")
    assert load_settings(_toml(tmp_path, f"[answer]\nranker_model = '{missing}'\n"), env={}).answer.ranker_model \
        == str(missing)


def test_documented_keys_load_with_their_types(tmp_path: Path) -> None:
    config = _toml(tmp_path, """
[index]
dir = "idx"
[render]
cell_timeout = 60
path_map = [{from = "C:/data", to = "data"}]
[embed]
kind = "openai"
url = "http://127.0.0.1:11434/v1"
api_key = "from-the-file"
[retrieve]
alpha = 1
""")
    settings = load_settings(config, env={})
    assert settings.index_dir == Path("idx") and settings.config_path == config
    assert settings.render.cell_timeout == 60.0 and isinstance(settings.render.cell_timeout, float)
    assert settings.render.path_map == [{"from": "C:/data", "to": "data"}]
    assert settings.embed.api_key == "from-the-file" and settings.retrieve.alpha == 1.0
    assert load_settings(None, env={}) == Settings()


def test_precedence_flags_over_environment_over_file(tmp_path: Path) -> None:
    config = _toml(tmp_path, '[index]\ndir = "from-file"\n[store]\nschema = "s"\n')
    env = {"NBRECALL_INDEX": "from-env", "NBRECALL_EMBED_API_KEY": "k", "NBRECALL_STORE": "postgresql://h/db"}
    assert load_settings(config, env=env).index_dir == Path("from-env")
    flagged = load_settings(config, env=env, flags={"index_dir": Path("from-flag"), "store": {"url": "postgresql://x/y"}})
    assert flagged.index_dir == Path("from-flag") and flagged.store.url == "postgresql://x/y"
    assert flagged.store.schema == "s" and flagged.embed.api_key == "k"
    with pytest.raises(ConfigError, match="flags: 'store.url'"):
        load_settings(config, env={}, flags={"store": {"url": 5}})


def test_vision_settings_are_validated_like_the_rest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'vision\.concurrency'.*'two'"):
        load_settings(_toml(tmp_path, '[vision]\nkind = "ocr"\nconcurrency = "two"\n'), env={})
    with pytest.raises(ConfigError, match=r"unknown setting 'vision\.lang' \(known: .*languages"):
        load_settings(_toml(tmp_path, '[vision]\nlang = "deu"\n'), env={})
    settings = load_settings(_toml(tmp_path, '[vision]\nkind = "ocr"\ntimeout = 30\n'),
                             env={"NBRECALL_VISION_URL": "http://127.0.0.1:9/v1", "NBRECALL_VISION_MODEL": "m"})
    vision = settings.vision
    assert (vision.kind, vision.url, vision.model) == ("openai", "http://127.0.0.1:9/v1", "m")
    assert settings.vision.timeout == 30.0


def test_every_section_refuses_unknown_keys(tmp_path: Path) -> None:
    from dataclasses import fields, is_dataclass

    from nbrecall.config import Settings

    sections = [f.name for f in fields(Settings) if isinstance(f.default_factory, type)
                and is_dataclass(f.default_factory)]
    assert "families" in sections and "vision" in sections
    for name in sections:
        with pytest.raises(ConfigError, match=rf"unknown setting '{name}\.no_such_key'"):
            load_settings(_toml(tmp_path, f"[{name}]\nno_such_key = 1\n"), env={})
