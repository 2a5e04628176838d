"""Notebook families in the web app: one result per family with its versions, the toggle, the members in the
viewer, and the cell-by-cell diff of two versions (escaped, under the CSP like every page)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from nbformat import v4

from conftest import code, stream, write_nb
from nbrecall.config import Settings
from test_web import assert_page_is_inert, assert_security_headers
from test_web_support import index_archive, local_client, make_app


def calc_cells(rho: str, note: str = "") -> list:
    cells = [v4.new_markdown_cell("# Ballast distribution\nThe aft tanks of the supply vessel." + note)]
    for i in range(8):
        cells.append(code(f"tank_{i}_volume = {i + 1} * 12.5\nprint('tank {i}', tank_{i}_volume)", i + 1,
                          [stream(f"tank {i} {(i + 1) * 12.5}\n")]))
    cells.append(code(f"rho = {rho}\nprint('density', rho)", 9, [stream(f"density {rho}\n")]))
    return cells


@pytest.fixture(scope="module")
def family_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str]]]:
    base = tmp_path_factory.mktemp("web-families")
    archive = base / "archive"
    write_nb(archive / "2017/ballast.ipynb", calc_cells("1025"))
    write_nb(archive / "2018/ballast_copy.ipynb", calc_cells("1025", " "))
    write_nb(archive / "2019/ballast_v2.ipynb", calc_cells("1000  # <b>fresh</b> water"))
    write_nb(archive / "2018/mooring.ipynb", [v4.new_markdown_cell("# Mooring loads\nCatenary pretension."),
                                              code("pretension_kN = 1200\nprint(pretension_kN)", 1,
                                                   [stream("1200\n")])])
    settings = Settings(index_dir=base / "index")
    settings.embed.cache_dir = str(base / "models")
    shas = index_archive(archive, settings)
    app = make_app(settings)
    yield local_client(app), shas
    app.state.web.close()


def test_search_api_gives_one_result_per_family_with_its_versions(
    family_app: tuple[TestClient, dict[str, str]]
) -> None:
    client, shas = family_app
    data = client.get("/api/search", params={"q": "ballast tank volume", "k": 30}).json()
    groups = [g for g in data["notebooks"] if "ballast" in g["path"]]
    assert len(groups) == 1 and groups[0]["n_versions"] == 2
    assert {v["nb_id"] for v in groups[0]["versions"]} | {groups[0]["id"]} == {
        shas["2017/ballast.ipynb"], shas["2018/ballast_copy.ipynb"], shas["2019/ballast_v2.ipynb"]}
    assert all(h["family"] == groups[0]["family"] for h in groups[0]["hits"])
    every = client.get("/api/search", params={"q": "ballast tank volume", "k": 30, "all_versions": "true"}).json()
    assert len([g for g in every["notebooks"] if "ballast" in g["path"]]) == 3


def test_search_page_lists_other_versions_and_has_the_toggle(family_app: tuple[TestClient, dict[str, str]]) -> None:
    client, _shas = family_app
    page = client.get("/", params={"q": "ballast tank volume"})
    assert page.status_code == 200
    assert_security_headers(page)
    assert "2 other versions" in page.text
    assert 'name="all_versions"' in page.text
    assert "what differs" in page.text
    every = client.get("/", params={"q": "ballast tank volume", "all_versions": "true"})
    assert every.text.count('class="nb-path"') > page.text.count('class="nb-path"')


def test_viewer_lists_the_members_with_diff_links(family_app: tuple[TestClient, dict[str, str]]) -> None:
    client, shas = family_app
    page = client.get(f"/nb/{shas['2017/ballast.ipynb']}")
    assert page.status_code == 200
    assert "2 other versions of this notebook" in page.text
    assert f"/nb/{shas['2017/ballast.ipynb']}/diff/{shas['2019/ballast_v2.ipynb']}" in page.text
    alone = client.get(f"/nb/{shas['2018/mooring.ipynb']}")
    assert "other version" not in alone.text


def test_the_diff_of_two_members_shows_the_changed_cell_escaped(
    family_app: tuple[TestClient, dict[str, str]]
) -> None:
    client, shas = family_app
    page = client.get(f"/nb/{shas['2017/ballast.ipynb']}/diff/{shas['2019/ballast_v2.ipynb']}")
    assert page.status_code == 200, page.text
    assert_security_headers(page)
    assert_page_is_inert(page.text)
    assert "1 changed" in page.text and "9 unchanged cells" in page.text  # the title cell and 8 tanks: same
    assert "- rho = 1025" in page.text and "+ rho = 1000  # &lt;b&gt;fresh&lt;/b&gt; water" in page.text
    assert "<b>fresh</b>" not in page.text  # notebook text is shown as text, never as markup
    assert "- density 1025" in page.text  # and the outputs that changed with it
    assert "These two notebooks are not in one family" not in page.text
    other = client.get(f"/nb/{shas['2017/ballast.ipynb']}/diff/{shas['2018/mooring.ipynb']}")
    assert other.status_code == 200 and "not in one family" in other.text
    assert client.get(f"/nb/{shas['2017/ballast.ipynb']}/diff/{'0' * 64}").status_code == 404
    assert client.get(f"/nb/{shas['2017/ballast.ipynb']}/diff/not-an-id").status_code == 404
    assert client.get(f"/nb/{shas['2017/ballast.ipynb']}/diff/..%2F..%2Fetc").status_code in (400, 404)


def test_diff_pairs_inserted_cells_instead_of_shifting_every_later_one() -> None:
    from nbrecall.records import CellRecord
    from nbrecall.web.diff import pair_cells

    def rec(i: int, source: str, cell_id: str) -> CellRecord:
        return CellRecord("x", i, cell_id, "code", None, source, "")

    a = [rec(i, f"step_{i} = {i} * 2.5\nprint(step_{i})", f"id{i}") for i in range(6)]
    inserted = rec(2, "inserted = True", "fresh")
    for ids in ("kept", "new"):  # a re-saved version keeps its cell ids; a copy made by hand may not
        later = [rec(i + 1, c.source, c.cell_id if ids == "kept" else f"n{i}") for i, c in enumerate(a[2:], start=2)]
        rows = pair_cells(a, a[:2] + [inserted] + later)
        assert [r.status for r in rows] == ["same", "same", "added", "same", "same", "same", "same"]
