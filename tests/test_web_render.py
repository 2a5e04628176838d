"""Re-renders in the web app: badges in search results and the API, side-by-side outputs in the viewer, status."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nbrecall.config import Settings
from test_web import CONTRACT_KEYS, assert_page_is_inert
from test_web_support import (
    PLAIN_CELLS,
    RENDER_CHANGED_REL,
    RENDER_PLAIN_REL,
    RENDER_STALE_REL,
    RENDERED_AT,
    build_render_archive,
    local_client,
    make_app,
    make_notebook,
    write_render_for,
)

STALE_WARNING = "stale: import error: oldlib — outputs could not be re-executed"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, str]]:
    return build_render_archive(tmp_path_factory.mktemp("web-render"))


@pytest.fixture(scope="module")
def client(rendered: tuple[Settings, dict[str, str]]) -> Iterator[TestClient]:
    app = make_app(rendered[0])
    yield local_client(app)
    app.state.web.close()  # its render processes


@pytest.fixture(scope="module")
def shas(rendered: tuple[Settings, dict[str, str]]) -> dict[str, str]:
    return rendered[1]


def test_search_api_groups_carry_render_status_and_warning(client: TestClient, shas: dict[str, str]) -> None:
    data = client.get("/api/search", params={"q": "ballast", "k": 10}).json()
    for hit in data["results"]:
        assert set(hit) == CONTRACT_KEYS | ({"fact"} if hit["kind"] == "fact" else set())  # the JSON contract
    groups = {g["path"]: g for g in data["notebooks"]}
    assert set(groups) == {RENDER_CHANGED_REL, RENDER_STALE_REL, RENDER_PLAIN_REL}
    changed, stale, plain = groups[RENDER_CHANGED_REL], groups[RENDER_STALE_REL], groups[RENDER_PLAIN_REL]
    assert (changed["render_status"], changed["render_reason"], changed["warning"]) == ("changed", "", None)
    assert (stale["render_status"], stale["render_reason"]) == ("stale", "import error: oldlib")
    assert stale["warning"] == STALE_WARNING and stale["stale"] is True
    assert all(h["stale"] for h in stale["hits"]) and not any(h["stale"] for h in changed["hits"])
    assert (plain["render_status"], plain["warning"]) == (None, None)


def test_notebook_api_has_the_render(client: TestClient, shas: dict[str, str]) -> None:
    data = client.get(f"/api/notebooks/{shas[RENDER_CHANGED_REL]}").json()
    assert (data["render_status"], data["warning"]) == ("changed", None)
    render = data["render"]
    assert (render["status"], render["rendered_at"], render["indexed_status"]) == ("changed", RENDERED_AT, "changed")
    assert render["outputs_indexed"] == "fresh" and render["has_fresh_outputs"] is True
    assert render["counts"] == {"same": 1, "changed": 3, "failed": 0, "new": 1}
    assert [c["render_status"] for c in data["cells"]] == [None, "changed", "same", "changed", "changed", "new"]

    stale = client.get(f"/api/notebooks/{shas[RENDER_STALE_REL]}").json()
    assert stale["warning"] == STALE_WARNING and stale["render"]["warning"] == STALE_WARNING
    assert stale["render"]["outputs_indexed"] == "original"
    assert [c["status"] for c in stale["render"]["cells"]] == ["changed", "failed", "failed"]
    assert stale["render"]["notes"]

    plain = client.get(f"/api/notebooks/{shas[RENDER_PLAIN_REL]}").json()
    assert (plain["render"], plain["render_status"], plain["warning"]) == (None, None, None)


def test_cell_api_has_original_and_fresh_outputs(client: TestClient, shas: dict[str, str]) -> None:
    cell = client.get(f"/api/notebooks/{shas[RENDER_CHANGED_REL]}/cells/3").json()
    assert cell["render_status"] == "changed"
    assert "1,284.6" in cell["outputs"][0]["text"] and "1,092.4" in cell["fresh_outputs"][0]["text"]
    assert "1,092.4" in cell["outputs_text"]  # what the index holds: the fresh outputs
    stale = client.get(f"/api/notebooks/{shas[RENDER_STALE_REL]}/cells/2").json()
    assert stale["render_status"] == "failed" and stale["fresh_outputs"][0]["kind"] == "error"
    assert "computed 2 loads" in stale["outputs_text"]  # stale: the original outputs stay indexed
    plain = client.get(f"/api/notebooks/{shas[RENDER_PLAIN_REL]}/cells/1").json()
    assert (plain["render_status"], plain["fresh_outputs"]) == (None, None)


def test_viewer_shows_outputs_side_by_side_with_badges(client: TestClient, shas: dict[str, str]) -> None:
    html = client.get(f"/nb/{shas[RENDER_CHANGED_REL]}").text
    assert_page_is_inert(html)
    assert re.search(r'<span class="badge render render-changed" id="render-badge"[^>]*>re-rendered: changed</span>',
                     html)
    assert html.count('class="outputs compare"') == 5  # every code cell
    assert html.count('class="side side-original"') == 5 and html.count("side side-fresh") == 5
    badges = re.findall(r'<span class="badge cell-render render-(\w+)" title="re-render', html)
    assert badges == ["changed", "same", "changed", "changed", "new"]
    sections = html.split('<section class="cell')[1:]
    total = sections[3]
    assert total.index("1,284.6") < total.index("side side-fresh") < total.index("1,092.4")
    assert "diff of the normalised outputs" in total and "+Total ballast aft: 1,092.4 m3" in total
    assert sections[5].count("[no output]") == 1 and "checked by IS" in sections[5]  # `new`: no original output
    assert sections[4].count('src="data:image/svg+xml;base64,') == 2  # both figures, sanitized SVG as images
    assert "Code cells show the stored outputs (left) and the re-rendered outputs (right)." in html
    assert "newer than the index" not in html


def test_viewer_of_a_stale_notebook_sanitizes_fresh_outputs(client: TestClient, shas: dict[str, str]) -> None:
    html = client.get(f"/nb/{shas[RENDER_STALE_REL]}").text
    assert_page_is_inert(html)
    assert "stale: import error: oldlib</span>" in html and STALE_WARNING in html
    for gone in ("window.__pwned=1</script>", "<iframe", "srcdoc", "position:fixed", "javascript:"):
        assert gone not in html, gone
    assert "fresh hostile html" in html and "fresh javascript link" in html  # sanitized, not dropped
    assert "No module named &#39;oldlib&#39; &lt;img src=x onerror=window.__pwned=1&gt;" in html
    assert re.findall(r'cell-render render-(\w+)" title', html) == ["changed", "failed", "failed"]
    assert "not run (the run stopped earlier)" in html
    assert "computed 2 loads" in html and "[412, 398]" in html  # the original outputs are still shown


def test_search_page_shows_notebook_badges_and_the_warning(client: TestClient) -> None:
    html = client.get("/", params={"q": "ballast"}).text
    assert_page_is_inert(html)
    assert '<span class="badge render render-changed" title="re-render status">re-rendered: changed</span>' in html
    assert (f'<span class="badge render render-stale" title="{STALE_WARNING}">stale: import error: oldlib</span>'
            in html)
    assert html.count('class="render-warning"') == 1
    assert "⚠ Outputs could not be re-executed: the stored outputs are shown, ranked lower." in html


def test_status_api_counts_by_render_status(client: TestClient) -> None:
    renders = client.get("/api/status").json()["renders"]
    assert renders == {"fresh": 0, "changed": 1, "stale": 1, "not_rendered": 1,
                       "stale_reasons": [{"reason": "import error: oldlib", "count": 1}]}


def test_status_without_renders_is_null(tmp_path: Path) -> None:
    settings, _ = _plain_index(tmp_path)
    assert local_client(make_app(settings)).get("/api/status").json()["renders"] is None


def _plain_index(tmp_path: Path) -> tuple[Settings, str]:
    import nbformat

    from conftest import HashEmbedder
    from nbrecall.index.store import LanceStore
    from nbrecall.ingest.pipeline import run_index
    from nbrecall.notebook.read import read_notebook

    path = tmp_path / "archive" / RENDER_PLAIN_REL
    path.parent.mkdir(parents=True)
    path.write_text(nbformat.writes(make_notebook(PLAIN_CELLS, "plain")), encoding="utf-8")
    settings = Settings(index_dir=tmp_path / "index")
    run_index([tmp_path / "archive"], settings, HashEmbedder(), LanceStore(settings.index_dir / "lance", 384))
    return settings, read_notebook(path).sha256


def test_a_render_newer_than_the_index_is_shown_and_said(tmp_path: Path) -> None:
    settings, sha = _plain_index(tmp_path)
    write_render_for(tmp_path / "archive" / RENDER_PLAIN_REL, settings.index_dir / "renders", "fresh", "",
                     {1: [{"output_type": "stream", "name": "stdout", "text": "ballast notes\n"}]},
                     {1: ("same", "")})
    client = local_client(make_app(settings))
    html = client.get(f"/nb/{sha}").text
    assert 'id="render-badge"' in html and "newer than the index" in html and "nbrecall index" in html
    data = client.get(f"/api/notebooks/{sha}").json()
    assert data["render"]["status"] == "fresh" and data["render"]["indexed_status"] is None
    assert data["render_status"] is None  # search still reflects what was indexed
