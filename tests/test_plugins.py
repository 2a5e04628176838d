"""Plugin seams (`nbrecall.plugins`): a firm's metadata extractor whose fields the tag filter finds, registered on
the manager and through a (fake) entry point; a plugin's embedder, describer and answerer selected by settings."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plugin_vessel
from conftest import HashEmbedder, code, write_nb
from nbrecall.answer.answer import answer
from nbrecall.answer.types import Answer, AnswerEvent
from nbrecall.config import ConfigError, Settings, load_settings
from nbrecall.index.embedder_from_settings import make_embedder
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from nbrecall.plugins import BUILTIN_PLUGINS, hookimpl, installed, metadata_fingerprint, plugin_manager
from nbrecall.records import SearchFilters
from nbrecall.service import Archive
from nbrecall.vision.factory import make_describer


def make_share(root: Path) -> None:
    write_nb(root / "class-panamax/ballast.ipynb", [code("# ballast tank sizing per DWG-4711\nvolume = 120.5")])
    write_nb(root / "class-feeder/ballast.ipynb", [code("# ballast tank sizing, first draft\nvolume = 80.0")])
    write_nb(root / "misc/notes.ipynb", [code("# ballast notes\nprint('DWG-0042 is superseded')")])


def index_share(tmp_path: Path, plugins: Any = None, settings: Settings | None = None) -> Settings:
    settings = settings or Settings(index_dir=tmp_path / "idx")
    embedder = HashEmbedder()
    run_index([tmp_path / "share"], settings, embedder, LanceStore(settings.index_dir / "lance", embedder.dim),
              plugins=plugins)
    return settings


def found(settings: Settings, tag: str) -> list[str]:
    archive = Archive(settings, _embedder=HashEmbedder())
    return sorted(nb.notebook for nb in archive.search("ballast", SearchFilters(tag=tag)).notebooks)


class FakeDistribution(importlib.metadata.Distribution):
    """An installed distribution declaring the entry point `vessel = plugin_vessel` in the group `nbrecall`."""

    def read_text(self, filename: str) -> str | None:
        if filename == "METADATA":
            return "Metadata-Version: 2.1\nName: nbrecall-vessel\nVersion: 0.3\n"
        if filename == "entry_points.txt":
            return "[nbrecall]\nvessel = plugin_vessel\n"
        return None

    def locate_file(self, path: Any) -> Path:
        raise FileNotFoundError(path)


@pytest.fixture
def vessel_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vessel plugin as if installed: `importlib.metadata` lists one more distribution (what pluggy reads)."""
    real = importlib.metadata.distributions
    monkeypatch.setattr(importlib.metadata, "distributions", lambda **kw: [*real(**kw), FakeDistribution()])


def test_a_metadata_plugin_registered_on_the_manager_adds_fields_the_tag_filter_finds(tmp_path: Path) -> None:
    make_share(tmp_path / "share")
    plain = index_share(tmp_path)
    assert found(plain, "drawing:DWG-4711") == []  # without the plugin no notebook has the field
    manager = plugin_manager(plain, entrypoints=False)
    manager.register(plugin_vessel, name="vessel")
    report = run_index([tmp_path / "share"], plain, HashEmbedder(), LanceStore(plain.index_dir / "lance", 384),
                       plugins=manager)
    assert report.notebooks_indexed == 3  # a new metadata plugin changes the fingerprint: the archive is redone
    assert found(plain, "drawing:DWG-4711") == ["class-panamax/ballast.ipynb"]
    assert found(plain, "drawing:DWG-0042") == ["misc/notes.ipynb"]  # found in the text of any cell
    assert found(plain, "vessel_class:feeder") == ["class-feeder/ballast.ipynb"]
    archive = Archive(plain, _embedder=HashEmbedder())
    meta = archive.manifest.content(archive.manifest.find_by_path("class-panamax/ballast.ipynb")).meta
    assert meta["extra"] == {"drawing": "DWG-4711", "vessel_class": "panamax"}
    assert meta["fingerprint"].endswith("; metadata plugins vessel")  # registered in code: no version
    again = run_index([tmp_path / "share"], plain, HashEmbedder(), LanceStore(plain.index_dir / "lance", 384),
                      plugins=manager)
    assert again.notebooks_indexed == 0  # the same plugins: nothing to redo


def test_a_metadata_plugin_found_through_its_entry_point(tmp_path: Path, vessel_installed: None) -> None:
    make_share(tmp_path / "share")
    settings = index_share(tmp_path)  # run_index builds the manager from the settings: entry points load
    assert found(settings, "drawing:DWG-4711") == ["class-panamax/ballast.ipynb"]
    manager = plugin_manager(settings)
    assert installed(manager) == [("vessel", "0.3")]
    assert metadata_fingerprint(manager) == "; metadata plugins vessel 0.3"
    off = load_settings(env={}, flags={"index_dir": str(tmp_path / "off"), "plugins": {"load_entrypoints": False}})
    assert installed(plugin_manager(off)) == []
    index_share(tmp_path, settings=off)
    assert found(off, "drawing:DWG-4711") == []


def test_the_built_in_plugins_register_through_the_hooks() -> None:
    manager = plugin_manager(Settings(), entrypoints=False)
    assert sorted(manager.get_name(p) for p in manager.get_plugins()) == sorted(BUILTIN_PLUGINS)
    assert metadata_fingerprint(manager) == ""  # no plugin: the fingerprint is what it was before plugins
    for hook in ("nbrecall_embedder", "nbrecall_figure_describer", "nbrecall_answerer"):
        assert [impl.plugin_name for impl in getattr(manager.hook, hook).get_hookimpls()], hook


def test_a_plugins_embedder_is_used_when_the_settings_name_its_kind(tmp_path: Path, vessel_installed: None) -> None:
    settings = load_settings(env={}, flags={"index_dir": str(tmp_path / "idx"), "embed": {"kind": "hash"}})
    embedder = make_embedder(settings)  # the manager is built from the settings: the entry point's plugin answers
    assert isinstance(embedder, HashEmbedder)
    make_share(tmp_path / "share")
    run_index([tmp_path / "share"], settings, embedder, LanceStore(settings.index_dir / "lance", embedder.dim))
    archive = Archive(settings)
    assert isinstance(archive.embedder, HashEmbedder)
    assert archive.search("ballast tank sizing").notebooks
    off = load_settings(env={}, flags={"embed": {"kind": "hash"}, "plugins": {"load_entrypoints": False}})
    with pytest.raises(ValueError, match="unknown embedding kind 'hash'.*installed plugin"):
        make_embedder(off)


class Junk:
    @hookimpl
    def nbrecall_embedder(self, settings: Settings) -> object:
        return object() if settings.embed.kind == "junk" else None

    @hookimpl
    def nbrecall_figure_describer(self, settings: Settings) -> object:
        return "a describer" if settings.vision.kind == "mine" else None


def test_a_plugin_object_without_the_interface_is_refused_and_a_describer_comes_through_the_hook() -> None:
    manager = plugin_manager(Settings(), entrypoints=False)
    manager.register(Junk(), name="junk")
    settings = Settings()
    settings.embed.kind = "junk"
    with pytest.raises(TypeError, match="lacks model_id, dim, max_tokens, count_tokens, embed"):
        make_embedder(settings, manager)
    settings.vision.kind = "mine"
    assert make_describer(settings, plugins=manager) == "a describer"
    settings.vision.kind = "nobody"
    with pytest.raises(ConfigError, match="unknown describer 'nobody'"):
        make_describer(settings, plugins=manager)


class CannedAnswerer:
    def stream(self, question: str, result: Any, archive: Any, filters: Any) -> Iterator[AnswerEvent]:
        text = f"{len(result.notebooks)} notebooks for {question!r}"
        yield AnswerEvent("token", text=text)
        yield AnswerEvent("done", answer=Answer(question, text, [], "canned", None))


class Canned:
    @hookimpl
    def nbrecall_answerer(self, settings: Settings) -> CannedAnswerer | None:
        return CannedAnswerer() if settings.answer.kind == "canned" else None


def test_a_plugins_answerer_is_used_when_the_settings_name_its_kind(tmp_path: Path) -> None:
    make_share(tmp_path / "share")
    settings = index_share(tmp_path)
    manager = plugin_manager(settings, entrypoints=False)
    manager.register(Canned(), name="canned")
    archive = Archive(settings, _embedder=HashEmbedder(), _plugins=manager)
    assert answer("ballast volume", archive, settings).mode == "extractive"  # kind "": the built-in choice
    settings.answer.kind = "canned"
    got = answer("ballast volume", archive, settings)
    assert got.mode == "canned" and got.text == "3 notebooks for 'ballast volume'"
    settings.answer.kind = "oracle"
    with pytest.raises(ConfigError, match="unknown answerer 'oracle'"):
        answer("ballast volume", archive, settings)


def test_plugin_settings_are_validated(tmp_path: Path) -> None:
    config = tmp_path / "nbrecall.toml"
    config.write_text('[plugins]\nload_entrypoints = "no"\n')
    with pytest.raises(ConfigError, match=r"plugins\.load_entrypoints"):
        load_settings(config, env={})
    config.write_text("[plugins]\nload = false\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'plugins\.load' \(known: load_entrypoints\)"):
        load_settings(config, env={})
    assert load_settings(env={}).plugins.load_entrypoints is True


class Broken:
    @hookimpl
    def nbrecall_notebook_metadata(self, rel_path: str) -> object:
        if rel_path.startswith("misc/"):
            raise KeyError("no drawing register")
        return ["not", "a", "dict"] if "feeder" in rel_path else None


def test_a_failing_metadata_plugin_quarantines_the_notebook_with_a_reason_naming_it(tmp_path: Path) -> None:
    make_share(tmp_path / "share")
    settings = Settings(index_dir=tmp_path / "idx")
    manager = plugin_manager(settings, entrypoints=False)
    manager.register(Broken(), name="broken-register")
    report = run_index([tmp_path / "share"], settings, HashEmbedder(), LanceStore(settings.index_dir / "lance", 384),
                       plugins=manager)
    reasons = dict(report.quarantined)
    assert report.notebooks_indexed == 1 and set(reasons) == {"misc/notes.ipynb", "class-feeder/ballast.ipynb"}
    assert "metadata plugin (broken-register) failed on misc/notes.ipynb: KeyError" in reasons["misc/notes.ipynb"]
    assert "returned list" in reasons["class-feeder/ballast.ipynb"]


@pytest.mark.slow
def test_a_worker_without_the_runs_metadata_plugin_stops_the_run(tmp_path: Path) -> None:
    """Out of process, a worker builds its own manager from the settings (entry points); one that lacks the run's
    metadata plugin would index without its fields, so its fingerprint differs and the run stops (a fault, not
    quarantined notebooks)."""
    from nbrecall.executor import ProcessExecutor
    from nbrecall.ingest.worker import WorkerFault

    make_share(tmp_path / "share")
    settings = Settings(index_dir=tmp_path / "idx")
    manager = plugin_manager(settings, entrypoints=False)
    manager.register(plugin_vessel, name="vessel")
    with ProcessExecutor(1) as pool, pytest.raises(WorkerFault, match="would chunk with .*metadata plugins vessel"):
        run_index([tmp_path / "share"], settings, HashEmbedder(), LanceStore(settings.index_dir / "lance", 384),
                  executor=pool, plugins=manager)
