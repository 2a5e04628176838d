"""Tests for nbrecall.index.embed: ONNX MiniLM vs a numpy forward pass, batching, hashes, the HTTP client.

The ONNX graph is built once per session into a temp cache (about 1-2 s on a 2-core machine).
"""

from __future__ import annotations

import json
import math
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from nbrecall.config import EmbedSettings
from nbrecall.index.embed import (
    PINNED_SHA256,
    Embedder,
    EmbeddingServiceError,
    ModelIntegrityError,
    OnnxMiniLM,
    OpenAIEmbedder,
    bundled_minilm_dir,
    load_embedder,
    sha256_file,
    verify_sha256,
)

LONG_CODE = "\n".join(
    f"df_{i} = pd.read_csv('data/ballast_{i}.csv').groupby('vessel_id')['volume_m3'].sum() * {i}.5"
    for i in range(40)
)
TEXTS = [
    "ballast water volume of the vessel",
    "import numpy as np\nx = np.linspace(0, 1, 100)\nplt.plot(x, np.sin(x))",
    "## Resistance of an inland vessel\nHoltrop & Mennen's method gives the total resistance R_T in kN.",
    "Übersicht: Tiefgang 3,5 m — Geschwindigkeit 12 km/h 🚢",
    LONG_CODE,
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("embed-cache")


@pytest.fixture(scope="session")
def minilm(cache_dir: Path) -> OnnxMiniLM:
    """The default embedder, its ONNX graph built once for the whole session."""
    emb = load_embedder(EmbedSettings(), cache_dir)
    assert isinstance(emb, OnnxMiniLM)
    start = time.perf_counter()
    emb.prepare()
    print(f"\nONNX build {emb.build_seconds:.2f} s, build + session {time.perf_counter() - start:.2f} s")
    return emb


# --- an independent forward pass in numpy (float64) ---------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def numpy_minilm(weights: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """all-MiniLM-L6-v2 on one unpadded sequence: BERT encoder, mean pooling, L2 normalisation."""
    w = weights
    n, heads = len(ids), 12
    x = (
        w["embeddings.word_embeddings.weight"][ids].astype(np.float64)
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    for i in range(6):
        p = f"encoder.layer.{i}."

        def dense(t: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return t @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q, k, v = (
            dense(x, f"attention.self.{m}").reshape(n, heads, -1).transpose(1, 0, 2)
            for m in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(1, 0, 2).reshape(n, -1)
        x = _layer_norm(
            dense(ctx, "attention.output.dense") + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        inter = dense(x, "intermediate.dense")
        gelu = 0.5 * inter * (1.0 + _erf(inter / math.sqrt(2.0)))
        x = _layer_norm(
            dense(gelu, "output.dense") + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]
        )
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- the default ONNX embedder ------------------------------------------------------------------------------


def test_default_embedder_identity(minilm: OnnxMiniLM, cache_dir: Path) -> None:
    assert isinstance(minilm, Embedder)
    assert minilm.model_id == "all-MiniLM-L6-v2@" + PINNED_SHA256["model.safetensors"][:12]
    assert (minilm.dim, minilm.max_tokens) == (384, 256)
    onnx_path = minilm.cached_onnx_path
    assert onnx_path is not None and onnx_path.parent == cache_dir
    assert PINNED_SHA256["model.safetensors"][:16] in onnx_path.name
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".tmp")]  # atomic write left no temp file


@pytest.mark.slow
def test_onnx_matches_numpy_reference(minilm: OnnxMiniLM) -> None:
    folder = bundled_minilm_dir()
    weights = {
        k: v if k == "embeddings.word_embeddings.weight" else v.astype(np.float64)
        for k, v in load_file(str(folder / "model.safetensors")).items()
    }
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=256)
    assert minilm.count_tokens([LONG_CODE])[0] > 256  # the long text really gets truncated
    got = minilm.embed(TEXTS)  # one call: mixed lengths, so padding and the attention mask are exercised
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    for text, vec in zip(TEXTS, got, strict=True):
        ids = tok.encode(text).ids
        assert len(ids) <= 256
        assert _cos(vec, numpy_minilm(weights, ids)) >= 0.9999, text[:40]


def test_max_tokens_128_truncates(cache_dir: Path, minilm: OnnxMiniLM) -> None:
    short = OnnxMiniLM.bundled(cache_dir, max_tokens=128)  # reuses the cached graph
    assert short.model_id == minilm.model_id + "/t128"
    assert short.build_seconds is None
    a, b = short.embed([LONG_CODE, TEXTS[0]])
    full_long, full_short = minilm.embed([LONG_CODE, TEXTS[0]])
    assert _cos(b, full_short) > 0.99999  # short text: same vector
    assert _cos(a, full_long) < 0.999  # long text: cut at 128 word pieces


def test_semantic_sanity(minilm: OnnxMiniLM) -> None:
    q, near, far = minilm.embed(
        [
            "ballast water volume of the vessel",
            "the ship's ballast tank capacity",
            "matplotlib scatter plot colours",
        ]
    )
    assert q @ near > q @ far + 0.3


def test_order_preserved_with_mixed_lengths(cache_dir: Path, minilm: OnnxMiniLM) -> None:
    small_batches = OnnxMiniLM.bundled(cache_dir, batch_size=3)
    texts = [("word " * (7 * i % 23 + 1)) + f"item {i}" for i in range(17)] + [LONG_CODE, "x"]
    together = small_batches.embed(texts)
    alone = np.stack([minilm.embed([t])[0] for t in texts])
    sims = np.sum(together * alone, axis=1)
    assert np.all(sims > 0.99999), sims
    assert small_batches.embed([]).shape == (0, 384)


@pytest.mark.parametrize("bad", ["", "   ", "\n\t "])
def test_empty_text_rejected(minilm: OnnxMiniLM, bad: str) -> None:
    with pytest.raises(ValueError, match="index 1"):
        minilm.embed(["fine", bad, "also fine"])


def test_count_tokens(minilm: OnnxMiniLM) -> None:
    assert minilm.count_tokens([]) == []
    assert minilm.count_tokens(["hello world"]) == [4]  # [CLS] hello world [SEP]
    assert minilm.count_tokens(["Hello, World!"]) == [6]  # uncased; punctuation splits
    long_count = minilm.count_tokens([LONG_CODE])[0]
    assert long_count > 600  # untruncated
    assert minilm.count_tokens(["a b", LONG_CODE]) == [4, long_count]


# --- hashes -------------------------------------------------------------------------------------------------


def _copy_bundled(dst: Path, link_weights: bool = False) -> Path:
    """A copy of the bundled model folder; the 90 MB weights optionally as a symlink, to keep tests quick."""
    src = bundled_minilm_dir()
    ignore = shutil.ignore_patterns("model.safetensors") if link_weights else None
    shutil.copytree(src, dst, ignore=ignore)
    if link_weights:
        (dst / "model.safetensors").symlink_to(src / "model.safetensors")
    return dst


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_pinned_hashes_match_installed_files() -> None:
    folder = bundled_minilm_dir()
    for rel, expected in PINNED_SHA256.items():
        assert verify_sha256(folder / rel, expected) == expected


def test_corrupt_weights_rejected_with_clear_error(tmp_path: Path) -> None:
    folder = _copy_bundled(tmp_path / "minilm")
    weights = folder / "model.safetensors"
    _flip_byte(weights, weights.stat().st_size // 2)
    actual = sha256_file(weights)
    with pytest.raises(ModelIntegrityError) as err:
        OnnxMiniLM.from_folder(folder, tmp_path / "cache", expected_sha256=PINNED_SHA256)
    msg = str(err.value)
    assert str(weights) in msg and PINNED_SHA256["model.safetensors"] in msg and actual in msg
    assert not (tmp_path / "cache").exists()  # nothing was built from bad weights


@pytest.mark.slow
def test_onnx_folder_with_manifest(tmp_path: Path, minilm: OnnxMiniLM) -> None:
    folder = _copy_bundled(tmp_path / "my-model", link_weights=True)
    (folder / "SHA256SUMS").write_text(
        "".join(f"{sha}  {rel}\n" for rel, sha in PINNED_SHA256.items()), encoding="utf-8"
    )
    settings = EmbedSettings(kind="onnx-folder", path=str(folder))
    cache = tmp_path / "cache"
    emb = load_embedder(settings, cache)
    assert emb.model_id == minilm.model_id  # same weights: same embedding-cache key
    v = emb.embed(TEXTS[:2])
    assert np.all(np.sum(v * minilm.embed(TEXTS[:2]), axis=1) > 0.99999)

    # A damaged cached graph is caught by its hash and rebuilt, not loaded.
    assert isinstance(emb, OnnxMiniLM) and emb.cached_onnx_path is not None
    _flip_byte(emb.cached_onnx_path, 1000)
    again = load_embedder(settings, cache)
    assert isinstance(again, OnnxMiniLM)
    again.prepare()
    assert again.build_seconds is not None
    assert (emb.cached_onnx_path.parent / (emb.cached_onnx_path.name + ".sha256")).read_text().strip() == (
        sha256_file(emb.cached_onnx_path)
    )

    # A tampered tokenizer named in the manifest stops the load.
    tok = folder / "tokenizer.json"
    tok.write_text(tok.read_text(encoding="utf-8").replace('"[UNK]"', '"[UNK ]"', 1), encoding="utf-8")
    with pytest.raises(ModelIntegrityError, match=r"tokenizer\.json: expected be50c362"):
        load_embedder(settings, cache)


def test_onnx_folder_manifest_must_cover_what_is_read(
    tmp_path: Path, minilm: OnnxMiniLM, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _copy_bundled(tmp_path / "partial", link_weights=True)
    settings = EmbedSettings(kind="onnx-folder", path=str(folder))
    # No manifest: loads (hashes still give the model id), with a warning that nothing was verified.
    assert load_embedder(settings, tmp_path / "cache").model_id == minilm.model_id
    assert "cannot be verified" in caplog.text
    # A manifest that leaves out the tokenizer is refused rather than half-trusted.
    sha = PINNED_SHA256["model.safetensors"]
    (folder / "SHA256SUMS").write_text(f"{sha}  model.safetensors\n", encoding="utf-8")
    with pytest.raises(ModelIntegrityError, match="no expected SHA-256 for tokenizer.json"):
        load_embedder(settings, tmp_path / "cache")


def test_load_embedder_rejects_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown embedding kind"):
        load_embedder(EmbedSettings(kind="word2vec"), tmp_path)
    with pytest.raises(ValueError, match="folder path"):
        load_embedder(EmbedSettings(kind="onnx-folder"), tmp_path)
    with pytest.raises(ValueError, match="url"):
        load_embedder(EmbedSettings(kind="openai", model="m"), tmp_path)
    with pytest.raises(FileNotFoundError):
        load_embedder(EmbedSettings(kind="onnx-folder", path=str(tmp_path / "missing")), tmp_path)


# --- OpenAI-compatible endpoint -----------------------------------------------------------------------------


def _number(text: str) -> float:
    last = text.split()[-1]
    return float(last) if last.isdigit() else 0.0


class FakeEmbeddings:
    """A tiny /v1/embeddings server: vector of text i is (i+1, 1, 0, ...); can fail the first requests."""

    def __init__(self, fail_first: int = 1, status: int = 500) -> None:
        self.fail_first = fail_first
        self.status = status
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                fake.headers.append(dict(self.headers))
                if self.path != "/v1/embeddings":
                    return self._send(404, {"error": "not found"})
                if len(fake.requests) <= fake.fail_first:
                    return self._send(fake.status, {"error": "overloaded"})
                data = [
                    {"object": "embedding", "index": i, "embedding": [_number(text) + 1, 1.0, 0.0, 0.0]}
                    for i, text in enumerate(body["input"])
                ]
                # Sent in reverse: the client must order by "index".
                self._send(200, {"object": "list", "data": data[::-1], "model": body["model"]})

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeEmbeddings:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_server() -> Iterator[FakeEmbeddings]:
    with FakeEmbeddings() as fake:
        yield fake


def test_openai_batches_retries_and_order(fake_server: FakeEmbeddings) -> None:
    emb = OpenAIEmbedder(fake_server.url, "fake-embed", api_key="sk-test", backoff=0.01)
    texts = [f"chunk number {i}" for i in range(120)]
    vecs = emb.embed(texts)
    sizes = [len(r["input"]) for r in fake_server.requests]
    assert sizes == [50, 50, 50, 20]  # first batch failed with 500 once, then was retried
    assert fake_server.headers[0]["Authorization"] == "Bearer sk-test"
    assert vecs.shape == (120, 4) and emb.dim == 4
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(vecs[:, 0] / vecs[:, 1], np.arange(120) + 1, rtol=1e-5)  # order by "index"
    emb.close()


def test_openai_empty_text_rejected_before_any_request(fake_server: FakeEmbeddings) -> None:
    emb = OpenAIEmbedder(fake_server.url, "fake-embed", backoff=0.01)
    with pytest.raises(ValueError, match="index 2"):
        emb.embed(["a 1", "b 2", " ", "c 3"])
    assert fake_server.requests == []


def test_openai_gives_up_after_three_tries() -> None:
    with FakeEmbeddings(fail_first=10, status=503) as fake:
        emb = OpenAIEmbedder(fake.url, "fake-embed", backoff=0.01)
        with pytest.raises(EmbeddingServiceError, match="after 3 tries.*HTTP 503"):
            emb.embed(["x 1"])
        assert len(fake.requests) == 3


def test_openai_client_error_not_retried() -> None:
    with FakeEmbeddings(fail_first=10, status=400) as fake:
        emb = OpenAIEmbedder(fake.url, "fake-embed", backoff=0.01)
        with pytest.raises(EmbeddingServiceError, match="HTTP 400"):
            emb.embed(["x 1"])
        assert len(fake.requests) == 1


def test_openai_via_load_embedder(fake_server: FakeEmbeddings, tmp_path: Path) -> None:
    fake_server.fail_first = 0
    emb = load_embedder(EmbedSettings(kind="openai", url=fake_server.url + "/", model="fake-embed"), tmp_path)
    assert emb.model_id == f"fake-embed@{fake_server.url}"
    assert emb.dim == 4  # probed once
    assert emb.count_tokens(["hello world"]) == [4]  # estimated with the bundled MiniLM tokenizer
    assert fake_server.headers[0].get("Authorization") is None


def test_onnx_folder_with_shipped_model_onnx(tmp_path: Path, minilm: OnnxMiniLM) -> None:
    folder = tmp_path / "shipped"
    folder.mkdir()
    src = bundled_minilm_dir()
    for rel in ("tokenizer.json", "config.json"):
        shutil.copy(src / rel, folder / rel)
    assert minilm.cached_onnx_path is not None
    (folder / "model.onnx").symlink_to(minilm.cached_onnx_path)
    files = ("tokenizer.json", "config.json", "model.onnx")
    (folder / "SHA256SUMS").write_text("".join(f"{sha256_file(folder / f)}  {f}\n" for f in files))
    emb = load_embedder(EmbedSettings(kind="onnx-folder", path=str(folder)), tmp_path / "cache")
    assert isinstance(emb, OnnxMiniLM) and emb.cached_onnx_path is None  # nothing to build or cache
    assert emb.model_id.startswith("shipped@") and emb.dim == 384
    assert np.all(np.sum(emb.embed(TEXTS[:2]) * minilm.embed(TEXTS[:2]), axis=1) > 0.99999)
