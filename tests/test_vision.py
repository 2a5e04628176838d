"""Figure describers: OCR of figures the test draws, an OpenAI-compatible endpoint faked on loopback, the cache,
the describe phase in an index run (resumable, failing endpoint, Tesseract missing), markdown images."""

from __future__ import annotations

import base64
import io
import json
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import matplotlib
import pytest
from nbformat import v4

from conftest import HashEmbedder, code, write_nb
from nbrecall.backends import open_store
from nbrecall.config import Settings, VisionSettings
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from nbrecall.vision.describe import FigureImage, image_sha
from nbrecall.vision.ocr import OcrDescriber, OcrWord, clean_words
from nbrecall.vision.remote import OpenAIDescriber
from nbrecall.vision.store import FigureStore

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="Tesseract not installed")


def png_of(fig) -> bytes:  # type: ignore[no-untyped-def]
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def moment_figure() -> bytes:
    """Title, axis labels and legend all come from variables, as in a real notebook."""
    import numpy as np

    quantity, unit = "Bending moment", "kNm"
    fig, ax = plt.subplots()
    x = np.linspace(0, 12, 40)
    for span in (4, 8):
        ax.plot(x, span * x, label=f"span {span} m")
    ax.set_title(f"{quantity} along the girder")
    ax.set_xlabel("Position [m]")
    ax.set_ylabel(f"Moment [{unit}]")
    ax.legend()
    return png_of(fig)


def dataframe_figure() -> bytes:
    """`df.plot()`: the legend is the DataFrame's column names, which no line of code spells out."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"Discharge": np.arange(12) * 3.0, "Rainfall": np.arange(12)[::-1] * 2.0})
    ax = frame.plot(title="Catchment response")
    ax.set_xlabel("Hour")
    return png_of(ax.figure)


def figure_output(data: bytes):  # type: ignore[no-untyped-def]
    return v4.new_output("display_data", data={"image/png": base64.b64encode(data).decode("ascii"),
                                               "text/plain": "<Figure size 640x480 with 1 Axes>"})


# --- OCR --------------------------------------------------------------------------------------------------------


@needs_tesseract
def test_ocr_reads_title_axis_labels_and_legend_of_a_matplotlib_figure() -> None:
    describer = OcrDescriber(VisionSettings(kind="ocr"))
    describer.check()
    started = time.perf_counter()
    result = describer.describe(FigureImage("x", "image/png", moment_figure()))
    assert result.ok, result.error
    text = result.text or ""
    assert "Bending moment along the girder" in text
    assert "Position [m]" in text  # the x label
    assert "Moment [kNm]" in text  # the y label, drawn upright
    assert "span 4m" in text and "span 8m" in text  # legend entries built in a loop
    assert "values 0 to" in text  # tick labels kept as a range, not one by one
    assert time.perf_counter() - started < 15


@needs_tesseract
def test_ocr_reads_dataframe_column_names_in_the_legend() -> None:
    result = OcrDescriber(VisionSettings(kind="ocr")).describe(FigureImage("x", "image/png", dataframe_figure()))
    text = result.text or ""
    for word in ("Catchment response", "Discharge", "Rainfall", "Hour"):
        assert word in text, text


def test_ocr_cleaning_drops_noise_and_keeps_numbers_as_a_range() -> None:
    words = [
        OcrWord("Drag", 95, (0, 1, 1, 1), 10), OcrWord("coefficient", 92, (0, 1, 1, 1), 60),
        OcrWord("l", 90, (0, 1, 1, 2)), OcrWord("|", 90, (0, 1, 1, 2)), OcrWord("~~a-", 70, (0, 1, 1, 2)),
        OcrWord("blurry", 20, (0, 1, 1, 3)),  # unsure: dropped
        OcrWord("0.5", 90, (0, 2, 1, 1)), OcrWord("1.5", 90, (0, 2, 1, 1)), OcrWord("−2", 90, (0, 2, 1, 1)),
        OcrWord("[m/s]", 80, (0, 3, 1, 1)), OcrWord("Drag", 95, (1, 1, 1, 1), 10),
        OcrWord("coefficient", 92, (1, 1, 1, 1), 60),  # the same line read again: once
    ]
    assert clean_words(words) == "Drag coefficient; [m/s]; values -2 to 1.5"


def test_ocr_without_tesseract_says_so_once_and_the_run_goes_on(
    tmp_path: Path, hash_embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytesseract

    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(tmp_path / "no-tesseract"))
    root = tmp_path / "share"
    for n in range(3):
        write_nb(root / f"nb{n}.ipynb", [v4.new_markdown_cell(f"# Plot {n}"),
                                         code(f"plt.plot([{n}, 2])", 1, [figure_output(tiny_png(n))])])
    settings = Settings(index_dir=tmp_path / "idx")
    settings.vision.kind = "ocr"
    report = run_index([root], settings, hash_embedder, open_store(settings, hash_embedder.dim))
    assert report.notebooks_indexed == 3
    assert report.figures is not None
    assert len(report.figures.notes) == 1 and "Tesseract" in report.figures.notes[0]
    assert "apt-get install tesseract-ocr" in report.figures.notes[0]
    with closing(FigureStore.of_index(settings.index_dir)) as figures:
        assert figures.counts() == {"described": 0, "waiting": 3, "failed": 0}  # described by a later run


def tiny_png(seed: int) -> bytes:
    from PIL import Image

    img = Image.new("RGB", (40, 30), (255, 255 - seed * 20, 255))
    buffer = io.BytesIO()
    img.save(buffer, format="PNG")
    return buffer.getvalue()


# --- a fake OpenAI-compatible vision endpoint ----------------------------------------------------------------------


class FakeVision:
    """A loopback chat-completions server: records every request; `script` says what the next ones get."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.script: list[str] = []  # "ok", "503", "429", "slow", "500"; when empty: "ok"
        self.default = "ok"
        self.reply = "A line chart of pump head {digest}."  # the description; {digest}: the image's hash, 8 chars
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                fake.headers.append(dict(self.headers))
                action = fake.script.pop(0) if fake.script else fake.default
                if action == "slow":
                    time.sleep(1.5)
                    action = "ok"
                if action != "ok":
                    self.send_response(int(action))
                    self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "busy"}}')
                    return
                url = body["messages"][0]["content"][1]["image_url"]["url"]
                digest = image_sha(base64.b64decode(url.split(",", 1)[1]))[:8]
                content = "<think>hm</think>" + fake.reply.format(digest=digest)
                answer = {"choices": [{"message": {"role": "assistant", "content": content}}]}
                data = json.dumps(answer).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the time-out test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_vision() -> Iterator[FakeVision]:
    fake = FakeVision()
    yield fake
    fake.close()


def vision_settings(fake: FakeVision, **overrides: object) -> VisionSettings:
    settings = VisionSettings(kind="openai", url=fake.url, model="llava-test", timeout=1.0, retries=2, backoff=0.01)
    for key, value in overrides.items():
        setattr(settings, key, value)
    return settings


def test_openai_request_carries_the_prompt_caption_and_image_as_a_data_uri(fake_vision: FakeVision) -> None:
    data = tiny_png(1)
    describer = OpenAIDescriber(vision_settings(fake_vision), api_key="sk-test-123")
    result = describer.describe(FigureImage(image_sha(data), "image/png", data, caption="Pump curve"))
    assert result.ok and result.text == f"A line chart of pump head {image_sha(data)[:8]}."  # think block gone
    body = fake_vision.requests[0]
    assert body["model"] == "llava-test" and body["stream"] is False
    text, image = body["messages"][0]["content"]
    assert text["type"] == "text" and "axes" in text["text"] and "Pump curve" in text["text"]
    assert image["type"] == "image_url"
    assert image["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(data).decode()
    assert fake_vision.headers[0]["Authorization"] == "Bearer sk-test-123"


def test_openai_retries_with_backoff_then_succeeds(fake_vision: FakeVision) -> None:
    fake_vision.script = ["503", "429"]
    describer = OpenAIDescriber(vision_settings(fake_vision))
    result = describer.describe(FigureImage("x", "image/png", tiny_png(2)))
    assert result.ok
    assert describer.requests == 3


def test_openai_time_out_is_a_failed_description_not_an_exception(fake_vision: FakeVision) -> None:
    fake_vision.default = "slow"
    describer = OpenAIDescriber(vision_settings(fake_vision, timeout=0.3, retries=1))
    started = time.perf_counter()
    result = describer.describe(FigureImage("x", "image/png", tiny_png(3)))
    assert not result.ok and "timed out" in result.error
    assert describer.requests == 2
    assert time.perf_counter() - started < 3


def test_openai_gif_is_sent_as_png(fake_vision: FakeVision) -> None:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (0, 0, 0)).save(buffer, format="GIF")
    OpenAIDescriber(vision_settings(fake_vision)).describe(FigureImage("x", "image/gif", buffer.getvalue()))
    assert fake_vision.requests[0]["messages"][0]["content"][1]["image_url"]["url"].startswith("data:image/png;")


# --- the describe phase in an index run ----------------------------------------------------------------------------


def figure_archive(root: Path, images: list[bytes]) -> None:
    for n, data in enumerate(images):
        write_nb(root / f"pumps/nb{n}.ipynb", [
            v4.new_markdown_cell(f"# Pump test {n}"),
            code("plot_results(df)", 1, [figure_output(data)]),
        ])


def stored_figure_texts(store: LanceStore) -> list[str]:
    rows = store.table.search().select(["kind", "text"]).limit(None).to_arrow().to_pylist()
    return sorted(r["text"] for r in rows if r["kind"] == "figure")


def openai_settings(index: Path, fake: FakeVision, **overrides: object) -> Settings:
    settings = Settings(index_dir=index)
    settings.vision = vision_settings(fake, **overrides)
    return settings


def test_index_describes_figures_after_phase_one_and_caches_them(
    tmp_path: Path, hash_embedder: HashEmbedder, fake_vision: FakeVision
) -> None:
    root = tmp_path / "share"
    images = [tiny_png(n) for n in range(3)]
    figure_archive(root, images)
    settings = openai_settings(tmp_path / "idx", fake_vision)
    store = open_store(settings, hash_embedder.dim)
    report = run_index([root], settings, hash_embedder, store)
    assert report.figures is not None and report.figures.described == 3
    assert len(fake_vision.requests) == 3
    texts = stored_figure_texts(store)
    assert all("figure description (machine-made, vision model llava-test): A line chart of pump head" in t
               for t in texts), texts
    with closing(FigureStore.of_index(settings.index_dir)) as figures:
        assert figures.counts() == {"described": 3, "waiting": 0, "failed": 0}
    # The description is searchable: only the description says "pump head".
    from nbrecall.backends import open_manifest
    from nbrecall.search.retrieve import retrieve

    with closing(open_manifest(settings, readonly=True)) as manifest:
        hits = retrieve("pump head " + image_sha(images[1])[:8], store, manifest, None, settings.retrieve)
    assert hits.hits(1)[0].notebook == "pumps/nb1.ipynb"

    # A copied notebook and a changed chunker (here: a new index folder sharing nothing but the cache file) never
    # pay twice: the second run sends no request.
    (root / "copy").mkdir()
    shutil.copy(root / "pumps/nb0.ipynb", root / "copy/nb0-copy.ipynb")
    again = run_index([root], settings, hash_embedder, store)
    assert again.notebooks_indexed == 0 and len(fake_vision.requests) == 3
    other = openai_settings(tmp_path / "idx2", fake_vision)
    (tmp_path / "idx2").mkdir()
    shutil.copy(settings.index_dir / "figures.sqlite", other.index_dir / "figures.sqlite")
    store2 = open_store(other, hash_embedder.dim)
    third = run_index([root], other, hash_embedder, store2)
    assert third.figures is not None and third.figures.described == 0 and third.figures.cached == 3
    assert len(fake_vision.requests) == 3
    assert sum("machine-made" in t for t in stored_figure_texts(store2)) == 3  # the copy is the same content


def test_failing_endpoint_leaves_the_run_going_with_figures_not_described(
    tmp_path: Path, hash_embedder: HashEmbedder, fake_vision: FakeVision
) -> None:
    fake_vision.default = "500"
    root = tmp_path / "share"
    figure_archive(root, [tiny_png(n) for n in range(2)])
    settings = openai_settings(tmp_path / "idx", fake_vision, retries=1, max_failures_in_a_row=10)
    store = open_store(settings, hash_embedder.dim)
    report = run_index([root], settings, hash_embedder, store)
    assert report.notebooks_indexed == 2 and report.vectors_pending == 0
    assert report.figures is not None and (report.figures.described, report.figures.failed) == (0, 2)
    assert len(stored_figure_texts(store)) == 2
    assert not any("machine-made" in t for t in stored_figure_texts(store))
    with closing(FigureStore.of_index(settings.index_dir)) as figures:
        assert figures.counts() == {"described": 0, "waiting": 0, "failed": 2}
    # The endpoint is back: the next run tries the failed figures again.
    fake_vision.default = "ok"
    again = run_index([root], settings, hash_embedder, store)
    assert again.figures is not None and again.figures.described == 2
    assert all("machine-made" in t for t in stored_figure_texts(store))


def test_endpoint_failing_in_a_row_stops_describing_for_this_run(
    tmp_path: Path, hash_embedder: HashEmbedder, fake_vision: FakeVision
) -> None:
    fake_vision.default = "500"
    root = tmp_path / "share"
    figure_archive(root, [tiny_png(n) for n in range(6)])
    settings = openai_settings(tmp_path / "idx", fake_vision, retries=0, max_failures_in_a_row=2,
                               batch_notebooks=2, concurrency=1)
    report = run_index([root], settings, hash_embedder, open_store(settings, hash_embedder.dim))
    assert report.notebooks_indexed == 6
    assert report.figures is not None and report.figures.failed == 2
    assert any("stopped after 2 failures" in note for note in report.figures.notes)
    with closing(FigureStore.of_index(settings.index_dir)) as figures:
        assert figures.counts() == {"described": 0, "waiting": 4, "failed": 2}


def test_describe_phase_resumes_after_a_kill(
    tmp_path: Path, hash_embedder: HashEmbedder, fake_vision: FakeVision
) -> None:
    root = tmp_path / "share"
    figure_archive(root, [tiny_png(n) for n in range(4)])
    settings = openai_settings(tmp_path / "idx", fake_vision, batch_notebooks=1, concurrency=1)
    store = open_store(settings, hash_embedder.dim)

    class Killed(BaseException):
        pass

    real = OpenAIDescriber(settings.vision)
    calls = {"n": 0}

    class DiesOnThird:
        id, label = real.id, real.label

        def check(self) -> None:
            pass

        def describe(self, image: FigureImage):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            if calls["n"] == 3:
                raise Killed  # the process dies mid-phase
            return real.describe(image)

    with pytest.raises(Killed):
        run_index([root], settings, hash_embedder, store, describer=DiesOnThird())  # type: ignore[arg-type]
    assert len(fake_vision.requests) == 2
    report = run_index([root], settings, hash_embedder, store)
    assert report.figures is not None and report.figures.described == 2  # only the two left
    assert len(fake_vision.requests) == 4
    assert sum("machine-made" in t for t in stored_figure_texts(store)) == 4


# --- images pasted into markdown -----------------------------------------------------------------------------------


def test_markdown_attachments_and_data_uris_are_described_figures(
    tmp_path: Path, hash_embedder: HashEmbedder, fake_vision: FakeVision
) -> None:
    root = tmp_path / "share"
    attached, inline = tiny_png(4), tiny_png(5)
    cell = v4.new_markdown_cell("# Site\nThe drawing of the quay wall:\n\n![quay section](attachment:quay.png)")
    cell["attachments"] = {"quay.png": {"image/png": base64.b64encode(attached).decode()}}
    uri = "data:image/png;base64," + base64.b64encode(inline).decode()
    write_nb(root / "site.ipynb", [cell, v4.new_markdown_cell(f"Photo of the crane rail <img src=\"{uri}\">")])
    settings = openai_settings(tmp_path / "idx", fake_vision)
    store = open_store(settings, hash_embedder.dim)
    report = run_index([root], settings, hash_embedder, store)
    assert report.figures is not None and report.figures.described == 2
    texts = stored_figure_texts(store)
    assert len(texts) == 2
    assert any("figure: quay section" in t and image_sha(attached)[:8] in t for t in texts)
    assert any("crane rail" in t and image_sha(inline)[:8] in t for t in texts)


# --- machine-made text weighs less than the notebook's own -------------------------------------------------------


def test_split_machine_text_and_machine_share() -> None:
    from nbrecall.index.terms import keyword_stems
    from nbrecall.search.retrieve import machine_share as share
    from nbrecall.vision.describe import description_line, split_machine_text

    own_text = "pumps/a.ipynb\nTrials\n\nfigure: impeller trials\ncode:\nplot(df)"
    text = f"{own_text}\n{description_line('ocr', 'Pump head [m]; Flow [l/s]; values 0 to 40')}"
    own, machine = split_machine_text(text)
    assert own == own_text and machine.startswith("text in the figure (machine-made, read by OCR): Pump head")
    # A line that only quotes the words is the notebook's own: only the lines a describer adds are split off.
    assert split_machine_text("text in the figure: machine-made, said the note")[1] == ""

    def machine_share(query: str, text: str, weight: float) -> float:
        return share(keyword_stems(query), text, weight)

    # "impeller" is the notebook's own word, "head" only the OCR's: it counts a quarter.
    assert machine_share("impeller head", text, 0.25) == pytest.approx((1 + 0.25) / 2)
    assert machine_share("the impeller trials", text, 0.25) == 1.0
    assert machine_share("head flows", text, 0.0) == 0.0  # stems, as the keyword index sees them
    assert machine_share("pump head", text, 0.0) == 0.5  # "pumps/" of the path is the notebook's own
    assert machine_share("pump head", own_text, 0.25) == 1.0  # no machine-made line: counted whole
    assert machine_share("pump head", text, 1.0) == 1.0


def test_machine_made_text_is_found_by_keyword_but_does_not_outrank_the_notebooks_own_words(
    tmp_path: Path, hash_embedder: HashEmbedder, fake_vision: FakeVision
) -> None:
    from nbrecall.backends import open_manifest
    from nbrecall.search.retrieve import retrieve

    root = tmp_path / "share"
    drawn = tiny_png(6)
    # Only the describer says "pump head" of this notebook's figure.
    write_nb(root / "trials.ipynb", [v4.new_markdown_cell("# Impeller trials"),
                                     code("plot_results(df)", 1, [figure_output(drawn)])])
    # This notebook says it in its own words (in a longer cell: keyword scores favour short texts).
    write_nb(root / "curves.ipynb", [
        v4.new_markdown_cell("# Test stand notes\nThe pump head falls as the flow rises; the curve below is fitted "
                             "to the measured points of the stand, with the duty point marked, the efficiency read "
                             "off the vendor sheet and the motor rating checked against the nameplate."),
        code("fit = np.polyfit(flow, lift, 2)\nprint(fit)", 1),
    ])
    fake_vision.reply = "Pump head over time, run {digest}."
    settings = openai_settings(tmp_path / "idx", fake_vision)
    store = open_store(settings, hash_embedder.dim)
    run_index([root], settings, hash_embedder, store)
    assert settings.retrieve.machine_text_weight < 1.0

    def ranked(query: str, weight: float) -> list[str]:
        settings.retrieve.machine_text_weight = weight
        with closing(open_manifest(settings, readonly=True)) as manifest:
            result = retrieve(query, store, manifest, None, settings.retrieve)
        return [nb.notebook for nb in result.notebooks]

    default = Settings().retrieve.machine_text_weight
    # Found by keyword: words only the machine-made text has still find the figure.
    assert ranked(f"run {image_sha(drawn)[:8]}", default) == ["trials.ipynb"]
    # The same words in a notebook's own text rank it above the figure that has them only from the describer.
    assert ranked("pump head", default) == ["curves.ipynb", "trials.ipynb"]
    # Counted whole (as before), the short figure chunk's machine-made words won.
    assert ranked("pump head", 1.0)[0] == "trials.ipynb"


# --- the viewer and convert show descriptions ------------------------------------------------------------------------


def test_viewer_shows_the_description_under_the_image_and_convert_adds_it_with_the_flag(tmp_path: Path) -> None:
    from nbrecall.convert.markdown import ConvertOptions, convert_notebook
    from nbrecall.notebook.read import read_notebook
    from nbrecall.vision.describe import description_line
    from nbrecall.web.render import page_views

    data = tiny_png(6)
    path = write_nb(tmp_path / "a.ipynb", [v4.new_markdown_cell("# Pumps"),
                                          code("plot(df)", 1, [figure_output(data)])])
    nb = read_notebook(path)
    line = description_line("ocr", "Pump head [m]; Flow rate")
    asked: list[list[str]] = []

    def describe(shas: list[str]) -> dict[str, str]:
        asked.append(shas)
        return {image_sha(data): line}

    page = page_views(nb.cells, [], "python", {}, describe=describe)
    assert asked == [[image_sha(data)]]
    html = str(page.cells[1].outputs[0])
    assert "<img" in html and 'class="figure-description"' in html and "Pump head [m]; Flow rate" in html

    plain = convert_notebook(nb, "a").markdown
    assert "machine-made" not in plain
    options = ConvertOptions(describe_figure=lambda figure: line if image_sha(figure.data) == image_sha(data) else None)
    described = convert_notebook(nb, "a", options).markdown
    assert "(text in the figure (machine-made, read by OCR): Pump head [m]; Flow rate)" in described
