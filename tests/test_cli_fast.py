"""The CLI's start-up and small things: `--version`, help without `<bool>`, an empty question refused, a no-change
run shown as done, and `search` / `ask` answered by a running `serve` of the same index (`web.local_server`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nbrecall.cli import app
from nbrecall.cli.common import _settings
from nbrecall.web.local_server import ServerRecord, find_server, server_file, settings_digest
from test_web_support import SAMPLES, build_archive, live_server, make_app

CONFIG = str(SAMPLES / "nbrecall.toml")


def test_version() -> None:
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"nbrecall {version('nbrecall')}"


@pytest.mark.parametrize("command", [[], ["index"], ["search"], ["serve"], ["key"]])
def test_help_shows_no_bool_type(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "--help" in result.output
    assert "<bool>" not in result.output


@pytest.mark.parametrize("args", [["search", ""], ["search", "   "], ["ask", ""], ["ask", " \t"]])
def test_an_empty_question_exits_2(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*args, "--index", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "the question is empty" in result.output


@pytest.mark.parametrize("args", [["search", "???"], ["search", "* -"], ["ask", "🙂"], ["ask", '""']])
def test_a_question_without_words_or_numbers_exits_2(args: list[str], tmp_path: Path) -> None:
    """Punctuation or symbols alone give keyword search nothing and vector search arbitrary neighbours."""
    result = CliRunner().invoke(app, [*args, "--index", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "has no words or numbers" in result.output


def test_what_has_terms() -> None:
    from nbrecall.index.terms import has_terms

    assert all(has_terms(t) for t in ["GM", "0", "船", "Δp", "x?", "π"])
    assert not any(has_terms(t) for t in ["", "???", "* -", "🙂", "__", "√ ∑"])


def test_a_run_with_nothing_to_do_shows_done(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    (archive / "broken.ipynb").parent.mkdir(parents=True)
    (archive / "broken.ipynb").write_text("{not json")  # quarantined: no model is needed for this run
    args = ["index", str(archive), "--index", str(tmp_path / "index"), "--no-vectors", "--config", CONFIG,
            "--executor", "inline"]
    assert CliRunner().invoke(app, args, env={"COLUMNS": "160"}).exit_code == 0
    again = CliRunner().invoke(app, args, env={"COLUMNS": "160"})
    assert again.exit_code == 0, again.output
    assert "up to date" in again.output and "1/1 files checked" in again.output
    assert "0/?" not in again.output


def test_lancedb_imports_without_the_rest_client(tmp_path: Path) -> None:
    """A fresh interpreter: opening the embedded store never runs the REST namespace client's package."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom nbrecall.index.store import LanceStore\n"
        "from nbrecall.records import SearchFilters\n"
        f"store = LanceStore(Path({str(tmp_path / 'lance')!r}), 4)\n"
        "store.keyword('x', 5, SearchFilters())\n"
        "assert 'lance_namespace_urllib3_client.api' not in sys.modules, 'REST client imported'\n"
        "import lance_namespace_urllib3_client as client\n"
        "assert client.ApiClient.__name__ == 'ApiClient'  # asked for: the real package loads then\n"
        "assert 'lance_namespace_urllib3_client.api' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# --- through a running server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served_index(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    settings, _shas = build_archive(tmp_path_factory.mktemp("fast"))
    app_ = make_app(settings)
    with live_server(app_) as base:
        yield settings, app_, int(base.rsplit(":", 1)[1])


def _announce(served_index, monkeypatch: pytest.MonkeyPatch) -> ServerRecord:  # type: ignore[no-untyped-def]
    """Announce the test server in its index folder for the settings the CLI will load."""
    settings, app_, port = served_index
    monkeypatch.delenv("NBRECALL_SERVER", raising=False)
    cli_settings = _settings(Path(CONFIG), settings.index_dir)
    record = ServerRecord.announce(cli_settings, "127.0.0.1", port, token=False, tls=False)
    app_.server_instance = record.instance
    return record


def _no_direct_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the CLI opened the index itself")

    monkeypatch.setattr("nbrecall.service.Archive.__post_init__", refuse)


def test_search_is_answered_by_the_running_server(served_index, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    settings, _app, _port = served_index
    _announce(served_index, monkeypatch)
    _no_direct_path(monkeypatch)
    args = ["search", "ballast volume aft", "--index", str(settings.index_dir), "--config", CONFIG, "-k", "3"]
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    payload = json.loads(as_json.stdout)
    assert payload["query"] == "ballast volume aft"
    assert len(payload["results"]) == 3
    assert payload["results"][0]["notebook"] == "projects/2017/17-042/ballast_distribution.ipynb"
    assert set(payload["results"][0]) >= {"notebook", "cell", "cells", "cell_id", "kind", "score", "snippet"}
    assert "nb_id" not in payload["results"][0]  # the contract, not the API's extras
    text = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert "projects/2017/17-042/ballast_distribution.ipynb" in text.stdout and "#cell-id=" in text.stdout


def test_ask_is_answered_by_the_running_server(served_index, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import urllib.parse
    import urllib.request

    settings, _app, port = served_index
    _announce(served_index, monkeypatch)
    _no_direct_path(monkeypatch)
    question = "what ballast volume did we use aft for the 130 m PSV?"
    args = ["ask", question, "--index", str(settings.index_dir), "--config", CONFIG]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["mode"] == "extractive" and answer["citations"]
    assert answer["citations"][0]["notebook"].endswith(".ipynb")
    assert answer["values"] and answer["places"] and answer["kind"] == "value"
    query = urllib.parse.urlencode({"q": question, "format": "json"})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/ask?{query}", timeout=60) as response:
        assert answer == json.loads(response.read())  # the CLI passes on all that the server answered
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 0 and "Cited cells:" in plain.stdout and "(extractive answer)" in plain.stdout


def test_a_server_is_used_only_when_it_checks_out(served_index, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from nbrecall.web.local_server import ServerUnusable

    settings, app_, _port = served_index
    record = _announce(served_index, monkeypatch)
    cli_settings = _settings(Path(CONFIG), settings.index_dir)
    server = find_server(cli_settings)
    assert server is not None and server.record.instance == record.instance

    assert find_server(cli_settings, env={"NBRECALL_SERVER": "off"}) is None
    other = _settings(Path(CONFIG), settings.index_dir)
    other.retrieve.alpha = 0.5  # another --config: results would differ
    assert settings_digest(other) != record.settings and find_server(other) is None
    extractive = _settings(Path(CONFIG), settings.index_dir)
    extractive.embed.cache_dir = "/elsewhere"  # where the model file is kept does not change a result
    assert find_server(extractive) is not None

    app_.server_instance = "someone-else"  # a port taken over by another server: not mistaken for this one
    with pytest.raises(ServerUnusable):
        server.search("ballast", 3, {})
    app_.server_instance = record.instance

    path = server_file(cli_settings)
    data = json.loads(path.read_text())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path.write_text(json.dumps({**data, "pid": int(dead.stdout)}))  # the server was killed: a stale file
    assert find_server(cli_settings) is None
    path.write_text(json.dumps({**data, "token": True}))
    assert find_server(cli_settings, env={}) is None  # it wants a token this shell does not have
    assert find_server(cli_settings, env={"NBRECALL_TOKEN": "x" * 20}) is not None
    path.write_text("{half")
    assert find_server(cli_settings) is None
    record.withdraw(cli_settings)
    assert os.path.exists(path)  # not its file any more: left alone
    path.unlink()


@pytest.mark.parametrize(("args", "message"), [
    (["serve", "--watch"], "need ROOT"),
    (["serve", "--every", "10m"], "need ROOT"),
    (["serve", "{root}", "--every", "often"], "no duration"),
    (["serve", "{root}/missing"], "no such file or folder"),
])
def test_serve_refuses_what_it_cannot_do(args: list[str], message: str, tmp_path: Path) -> None:
    args = [a.replace("{root}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(app, [*args, "--index", str(tmp_path / "index")], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert message in result.output
