"""The ONNX graph of a BERT sentence encoder, built from safetensors weights with the `onnx` helper API."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

# Bump when the graph builder changes: it is part of the cached .onnx file name, so old caches are not reused.
GRAPH_VERSION = 1
ONNX_OPSET = 17  # LayerNormalization is a native op from 17 on


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

