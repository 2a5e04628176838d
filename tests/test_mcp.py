"""`nbrecall mcp` as a subprocess over stdio, driven by the official MCP client; and `nbrecall ask` end to end.

Both use a real `Archive` on a small index built with the bundled model (ONNX graph cached per session).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from nbrecall.answer.types import Answer
from nbrecall.cli import app
from nbrecall.config import EmbedSettings, Settings
from nbrecall.index.embed import load_embedder
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from test_answer import BALLAST, GLOSSARY, make_notebooks

pytestmark = pytest.mark.slow  # a real-model index and a stdio MCP server


@pytest.fixture(scope="module")
def real_index(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    base = tmp_path_factory.mktemp("mcp")
    make_notebooks(base / "share")
    settings = Settings(index_dir=base / "idx")
    settings.metadata.path_rules = [r"projects/(?P<year>\d{4})/(?P<project>\d{2}-\d{3})/"]
    embedder = load_embedder(EmbedSettings(), model_cache)
    run_index([base / "share"], settings, embedder, LanceStore(settings.index_dir / "lance", embedder.dim))
    return settings.index_dir


def env_for(model_cache: Path) -> dict[str, str]:
    return {"NBRECALL_MODEL_CACHE": str(model_cache), "NBRECALL_LLM_BASE_URL": "", "NBRECALL_LLM_MODEL": ""}


def session_calls(index: Path, model_cache: Path, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Start `nbrecall mcp`, list its tools and make `calls`; returns what came back."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrecall.cli", "mcp", "--index", str(index)],
        env=env_for(model_cache),
        cwd=str(index.parent),
    )
    out: dict[str, Any] = {"results": []}

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            out["tools"] = {t.name: t for t in (await client.list_tools()).tools}
            for name, args in calls:
                out["results"].append(await client.call_tool(name, args))

    anyio.run(main)
    return out


def test_mcp_server_tools(real_index: Path, model_cache: Path) -> None:
    from nbrecall.index.manifest import SqliteManifest

    sha = SqliteManifest(real_index / "manifest.sqlite", readonly=True).find_by_path(GLOSSARY)
    assert sha
    out = session_calls(
        real_index,
        model_cache,
        [
            ("search", {"query": "total ballast aft volume", "k": 3}),
            ("search", {"query": "total ballast aft volume", "year": "2018"}),
            ("ask", {"question": "what total ballast volume did we use aft"}),
            ("get_cell", {"notebook": BALLAST, "cell": 4}),
            ("get_cell", {"notebook": "/etc/passwd", "cell": 0}),
            ("get_cell", {"notebook": "../" + BALLAST, "cell": 0}),
            ("get_cell", {"notebook": GLOSSARY, "cell": 99}),
            ("search", {"query": "x", "year": "twenty"}),
            ("get_cell", {"notebook": sha[:16], "cell": 1}),
        ],
    )
    tools = out["tools"]
    assert set(tools) == {"search", "ask", "get_cell"}
    assert set(tools["search"].input_schema["properties"]) >= {"query", "k", "year", "project", "tag"}
    assert tools["get_cell"].input_schema["required"] == ["notebook", "cell"]

    search, filtered, ask, cell, passwd, escape, missing, bad_year, by_sha = out["results"]
    assert not search.is_error
    payload = search.structured_content or json.loads(search.content[0].text)
    assert payload["query"] == "total ballast aft volume" and 1 <= len(payload["results"]) <= 3
    top = payload["results"][0]
    assert top["notebook"] == BALLAST and {"cell", "cells", "cell_id", "kind", "snippet", "heading"} <= set(top)
    filtered_payload = filtered.structured_content or json.loads(filtered.content[0].text)
    assert all(r["year"] == 2018 for r in filtered_payload["results"])

    answer = ask.structured_content or json.loads(ask.content[0].text)
    assert answer["mode"] == "extractive"
    best = answer["values"][0]
    assert float(best["value"].replace(",", "")) == 1284.6 and best["notebook"] == BALLAST
    assert answer["text"].startswith(best["shown"])
    assert answer["citations"][0]["label"] == f"[{BALLAST} › Cell {best['cell']}]"
    assert {"label", "unit", "cell_id", "year"} <= set(best) and len(answer["values"]) <= 3
    # the same JSON form as `ask --json` and `/api/ask` (`Answer.as_dict`), citations with a label to quote
    assert answer["kind"] == "value" and 0 < answer["confidence"] <= 1
    assert Answer.from_dict(answer).values[0].value == best["value"]

    got = cell.structured_content or json.loads(cell.content[0].text)
    assert got["notebook"] == BALLAST and got["cell"] == 4 and got["cell_type"] == "code"
    assert got["source"].startswith("aft = summary.loc['aft', 'volume_m3']")
    assert "Total ballast aft: 1,284.6 m3" in got["outputs"]
    assert got["heading"].endswith("Ballast by zone") and got["cell_id"]

    for refused in (passwd, escape):
        assert refused.is_error and "not a notebook in this index" in refused.content[0].text
    assert missing.is_error and "has no cell 99" in missing.content[0].text
    assert bad_year.is_error and "year takes YYYY" in bad_year.content[0].text
    got = by_sha.structured_content or json.loads(by_sha.content[0].text)
    assert got["notebook"] == GLOSSARY and got["nb_sha"] == sha and got["source"].startswith("## Deadweight")


def test_cli_ask_streams_text_then_citations(real_index: Path, model_cache: Path) -> None:
    runner = CliRunner()
    plain = runner.invoke(app, ["ask", "what total ballast volume did we use aft", "--index", str(real_index)],
                          env=env_for(model_cache))
    assert plain.exit_code == 0, plain.output
    lines = plain.stdout.splitlines()
    assert lines[0].startswith("Total ballast aft: 1,284.6 m3")
    assert "Cited cells:" in lines and any(line.strip().startswith(f"[{BALLAST} › Cell 4]") for line in lines)
    as_json = runner.invoke(
        app, ["ask", "what total ballast volume did we use aft", "--index", str(real_index), "--json",
              "--year", "2017"],
        env=env_for(model_cache),
    )
    assert as_json.exit_code == 0, as_json.output
    obj = json.loads(as_json.stdout)
    assert obj["mode"] == "extractive" and obj["citations"][0]["cell"] == 4
    assert obj["text"].startswith("Total ballast aft")


def test_a_question_without_words_is_a_tool_error() -> None:
    """As the CLI and the HTTP API refuse it: punctuation alone gives search nothing to match."""
    from nbrecall.mcp_server import ToolInputError, _words

    for text in ("???", "* -", ""):
        with pytest.raises(ToolInputError, match="no words or numbers"):
            _words(text)
    _words("GM 2.1")
