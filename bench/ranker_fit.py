"""Train and check the learned order of value candidates (`nbrecall.answer.rerank`), and write its model.

For every value question of the sets given, the candidates are scored with the default weights (`values.score`), the
first `rerank.TOP` kept and described by `rerank.features`; a candidate is right when it holds the expected value
(`answer.evaluate.holds_value`, the judge's own test). LightGBM learns an order from them (lambdarank, fixed settings
below: they are not tuned per run). Sets that share an index are one archive: each archive's questions are ordered by
a model trained on the other archives only, and the first candidate right (top-1) and a right one among the first
three (top-3) are printed per set against the score's own order: what the model does on an archive it never saw.
With --seeds N the pooled figures are also given over N models per archive that differ only in their random
subsample: a change to the reader or the features is worth believing when it moves them beyond that spread.
Last, a model is trained on every set not named by --test and written as ONNX (--out); the --test sets, never trained
on, are reported with it.

Needs the `fit` extra (lightgbm, onnxmltools); nbrecall itself runs the model with onnxruntime only.

    .venv/bin/python bench/ranker_fit.py --cache /tmp/rank \\
        --set eval=/tmp/idx1:../shared/eval/queries.jsonl:../shared/corpus \\
        --set eval2=/tmp/idx2:../shared/eval2/queries.jsonl:../shared/eval2/corpus \\
        --set F=/tmp/idxf:bench/heldout/queries_f.jsonl:/tmp/fresh_f/corpus … --test L
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from answer_ablation import set_spec  # bench/, beside this script
from answer_fit import load_set
from confidence_fit import fit, model_of, table
from nbrecall.answer.confidence import LEARNED_ALONE, lead
from nbrecall.answer.evaluate import holds_value
from nbrecall.answer.question import read_question
from nbrecall.answer.rerank import FEATURES, TOP, features
from nbrecall.answer.values import ValueWeights, score

SETTINGS = {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 7, "min_data_in_leaf": 50,
            "feature_fraction": 1.0, "lambdarank_truncation_level": 10, "deterministic": True, "num_threads": 2,
            "seed": 1, "verbose": -1}
ROUNDS = 200
# The shipped model: the mean of this many models that differ only in their random subsample (bagging 0.8). One
# model's first values move by several questions with its seed alone (`--seeds`); the mean of several is steadier.
ENSEMBLE = 1
BAGGING = {"bagging_fraction": 0.8, "bagging_freq": 1}
OUT = Path(__file__).resolve().parent.parent / "src" / "nbrecall" / "answer" / "ranker.onnx"


@dataclass
class Question:
    set_name: str
    archive: str  # the index: sets that share one are one archive
    rows: np.ndarray
    right: np.ndarray
    values: list[str]  # each candidate's value as printed (two candidates may hold one value)
    notebook: str = ""  # the question's expected notebook (`archive_adapt.py` keeps a notebook in one fold)


def archive_of(spec: str) -> str:
    """The archive a `--set` spec belongs to: sets that share an index are one archive."""
    return str(set_spec(spec)[1])


def questions(spec: str, cache: Path | None) -> list[Question]:
    data = load_set(spec, cache)
    archive = archive_of(spec)
    weights = ValueWeights()
    out = []
    for q, result, cands, _context in data.prepared:
        if q.kind != "value" or not q.answer or not cands:
            continue
        ranked = score(read_question(q.query), copy.deepcopy(cands), result, weights)[:TOP]
        right = np.array([holds_value(q.answer, c.fact.shown) or holds_value(q.answer, c.fact.statement())
                          for c in ranked], dtype=np.float32)
        out.append(Question(data.name, archive, features(ranked, weights), right, [c.fact.value for c in ranked],
                            q.notebook))
    return out


def train(items: list[Question], settings: dict | None = None):  # type: ignore[no-untyped-def]
    import lightgbm as lgb

    x = np.vstack([q.rows for q in items])
    y = np.concatenate([q.right for q in items])
    return lgb.train(settings or SETTINGS, lgb.Dataset(x, y, group=[len(q.right) for q in items]),
                     num_boost_round=ROUNDS)


class Ensemble:
    """The mean of several boosters' scores (one booster: its own scores, unchanged)."""

    def __init__(self, boosters: list) -> None:  # type: ignore[type-arg]
        self.boosters = boosters

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return np.mean([b.predict(rows) for b in self.boosters], axis=0)


def members(size: int) -> list[int] | None:
    """The seeds of a model of `size` boosters, 1…size (None for size 1: the one unbagged booster of `SETTINGS`, the
    single model of earlier sessions)."""
    return None if size <= 1 else list(range(1, size + 1))


def train_model(items: list[Question], seeds: list[int] | None) -> Ensemble:
    """One booster with `SETTINGS` (seeds None), or the mean of one bagged booster (0.8) per seed."""
    if seeds is None:
        return Ensemble([train(items)])
    return Ensemble([train(items, {**SETTINGS, **BAGGING, "seed": seed}) for seed in seeds])


def unseen_scores(items: list[Question], test: set[str], seeds: list[int] | None = None) -> dict[int, np.ndarray]:
    """Each question's candidate scores (by `id`) from a model trained on the other archives' sets, never on --test
    (`train_model` with `seeds`)."""
    scores: dict[int, np.ndarray] = {}
    for archive in dict.fromkeys(q.archive for q in items):
        model = train_model([q for q in items if q.archive != archive and q.set_name not in test], seeds)
        scores.update((id(q), model.predict(q.rows)) for q in items if q.archive == archive)
    return scores


def seed_spread(items: list[Question], test: set[str], runs: int, size: int = 1) -> None:
    """Pooled out-of-archive top-1 and top-3 under `runs` models per archive (each the mean of `size` boosters) that
    differ only in their random subsample (bagging 0.8): how much of a difference between two candidate pools is the
    model's own variance. In session 22, with the data unchanged, five single boosters spread over 7 first values
    and 8 among the first three."""
    found = []
    for run in range(1, runs + 1):
        seeds = list(range((run - 1) * size + 1, run * size + 1))  # bagged even for size 1; runs share no seed
        scores = unseen_scores(items, test, seeds)
        found.append(hits(items, lambda q, s=scores: np.argsort(-s[id(q)], kind="stable")))
    ones, threes = np.array([f[0] for f in found]), np.array([f[1] for f in found])
    print(f"over {runs} runs of {size} bagged booster(s): top-1 {ones.mean():.1f} (min {ones.min()}, "
          f"max {ones.max()}), top-3 {threes.mean():.1f} (min {threes.min()}, max {threes.max()})")


def hits(items: list[Question], order_of) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(top-1, top-3) right under an ordering function of a question's rows."""
    one = three = 0
    for q in items:
        order = order_of(q)
        one += bool(q.right[order[0]])
        three += bool(q.right[order[:3]].any())
    return one, three


def observation(q: Question, scores: np.ndarray) -> tuple[float, float, float]:
    """(share, margin, right) of the first candidate in the order of `scores`, as `confidence.evidence` reads them."""
    order = np.argsort(-scores, kind="stable")
    first = int(order[0])
    margin = lead([float(scores[i]) for i in order], [q.values[i] for i in order], LEARNED_ALONE)
    return float(q.rows[first, FEATURES.index("share")]), margin, float(q.right[first])


def calibrate(items: list[Question], unseen: dict[int, np.ndarray], names: list[str], test: set[str]) -> None:
    """The confidence of the learned order (`confidence.LEARNED`): a logistic curve of share and the model's lead,
    fitted on questions ordered by models that never saw their archive; each archive's calibration checked with
    coefficients fitted on the other archives."""
    obs = {id(q): observation(q, unseen[id(q)]) for q in items}
    train_items = [q for q in items if q.set_name not in test]
    margins = np.array([obs[id(q)][1] for q in train_items])
    print("the model's lead over the best different value, percentiles 10/50/90/99:",
          np.round(np.percentile(margins[margins < LEARNED_ALONE], [10, 50, 90, 99]), 2))
    held: dict[int, float] = {}
    for archive in dict.fromkeys(q.archive for q in train_items):
        w = fit(np.array([obs[id(q)] for q in train_items if q.archive != archive]))
        for q in train_items:
            if q.archive == archive:
                held[id(q)] = model_of(w).probability(*obs[id(q)][:2])
    print("Confidence, each archive's coefficients fitted on the other archives:")
    for name in names:
        chosen = [q for q in train_items if q.set_name == name]
        if chosen:
            print(table(name, np.array([held[id(q)] for q in chosen]), np.array([obs[id(q)][2] for q in chosen])))
    print(table("all trained", np.array([held[id(q)] for q in train_items]),
                np.array([obs[id(q)][2] for q in train_items])))
    w = fit(np.array([obs[id(q)] for q in train_items]))
    print(f"LEARNED = ConfidenceModel(intercept={w[0]:.2f}, share_weight={w[1]:.2f}, margin_weight={w[2]:.2f})")
    for name in sorted(test):
        chosen = [q for q in items if q.set_name == name]
        if chosen:
            print(table(f"{name} (test)", np.array([model_of(w).probability(*obs[id(q)][:2]) for q in chosen]),
                        np.array([obs[id(q)][2] for q in chosen])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]")
    parser.add_argument("--cache", type=Path, help="the folder answer_ablation.py caches its searches in")
    parser.add_argument("--test", default="", metavar="SET,SET,…", help="sets never trained on (reported last)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the ONNX model goes (default {OUT})")
    parser.add_argument("--no-write", action="store_true", help="report only; write no model")
    parser.add_argument("--seeds", type=int, default=0, metavar="N",
                        help="also report the pooled out-of-archive figures over N bagging seeds (their spread)")
    parser.add_argument("--ensemble", type=int, default=ENSEMBLE, metavar="N",
                        help=f"models averaged into one (bagging 0.8, seeds 1…N; default {ENSEMBLE})")
    parser.add_argument("--final-only", action="store_true",
                        help="train and write the model only (no archive-by-archive check, no confidence fit)")
    args = parser.parse_args()
    items = [q for spec in args.set for q in questions(spec, args.cache)]
    names = list(dict.fromkeys(q.set_name for q in items))
    test = {t for t in args.test.split(",") if t}
    by_hand = lambda q: np.arange(len(q.right))  # noqa: E731 - the score's own order

    seeds = members(args.ensemble)
    trained = [q for q in items if q.set_name not in test]  # what the written model learns from

    print(f"{len(items)} value questions, {sum(len(q.right) for q in items)} candidates, {len(FEATURES)} features")
    if args.final_only:
        write(train_model(trained, seeds), items, test, args.out)
        return
    print("Each archive ordered by a model trained on the other archives (top-1, top-3; the score's order → learned):")
    unseen = unseen_scores(items, test, seeds)  # from a model that never saw the question's archive
    total = [0, 0, 0, 0, 0]
    for name in names:
        chosen = [q for q in items if q.set_name == name]
        base = hits(chosen, by_hand)
        learned = hits(chosen, lambda q: np.argsort(-unseen[id(q)], kind="stable"))
        print(f"{name:>8}: n {len(chosen)}, top-1 {base[0]} → {learned[0]}, top-3 {base[1]} → {learned[1]}")
        for i, v in enumerate((len(chosen), *base, *learned)):
            total[i] += v
    print(f"{'all':>8}: n {total[0]}, top-1 {total[1]} → {total[3]}, top-3 {total[2]} → {total[4]}")
    if args.seeds:
        seed_spread(items, test, args.seeds, args.ensemble)

    calibrate(items, unseen, names, test)
    final = train_model(trained, seeds)
    for name in sorted(test & set(names)):
        chosen = [q for q in items if q.set_name == name]
        base = hits(chosen, by_hand)
        got = hits(chosen, lambda q: np.argsort(-final.predict(q.rows), kind="stable"))
        print(f"never trained on, {name}: top-1 {base[0]} → {got[0]}, top-3 {base[1]} → {got[1]}")
    if not args.no_write:
        write(final, items, test, args.out)


def merged_trees(models: list[Any]) -> Any:
    """One ONNX model that scores the mean of `models` (each an ONNX model of one `TreeEnsembleRegressor`): their
    trees side by side in one regressor, each leaf weight divided by their number. The mean of sums is the sum of
    the scaled leaves, so one node computes it exactly and `rerank` needs no change."""
    import onnx

    first = models[0]
    node, *others = (next(n for n in m.graph.node if n.op_type == "TreeEnsembleRegressor") for m in models)
    if others and any(a.name == "base_values" for regressor in (node, *others) for a in regressor.attribute):
        raise ValueError("a regressor with base values: the mean of the models is not the mean of their trees")
    listed = {a.name: list(onnx.helper.get_attribute_value(a)) for a in node.attribute
              if a.name.startswith(("nodes_", "target_"))}
    offset = 1 + max(listed["nodes_treeids"])
    for extra in others:
        more = {a.name: onnx.helper.get_attribute_value(a) for a in extra.attribute}
        for name in listed:
            ids = name in ("nodes_treeids", "target_treeids")
            listed[name].extend([t + offset for t in more[name]] if ids else more[name])
        offset = 1 + max(listed["nodes_treeids"])
    listed["target_weights"] = [w / len(models) for w in listed["target_weights"]]
    kept = [a for a in node.attribute if a.name not in listed]
    del node.attribute[:]
    node.attribute.extend(kept)
    for name, values in sorted(listed.items()):
        node.attribute.append(onnx.helper.make_attribute(name, values))
    return first


def write(final: Ensemble, items: list[Question], test: set[str], out: Path) -> None:
    """The model as ONNX at `out` (an ensemble as one regressor: `merged_trees`), checked against LightGBM's own
    predictions."""
    import onnxmltools
    import onnxruntime
    from onnxmltools.convert.common.data_types import FloatTensorType

    shape = FloatTensorType([None, len(FEATURES)])
    converted = [onnxmltools.convert_lightgbm(b, initial_types=[("features", shape)], target_opset=15)
                 for b in final.boosters]
    onnx_model = merged_trees(converted)
    # the converter names the graph at random and lists its opsets in an order that varies between processes:
    # fixed here, so that the same model is the same bytes (a refactor is checked with `cmp`)
    onnx_model.graph.name = "nbrecall_value_ranker"
    opsets = sorted(onnx_model.opset_import, key=lambda o: o.domain)
    del onnx_model.opset_import[:]
    onnx_model.opset_import.extend(opsets)
    payload = onnx_model.SerializeToString()
    rows = np.vstack([q.rows for q in items])
    session = onnxruntime.InferenceSession(payload, providers=["CPUExecutionProvider"])
    drift = np.abs(session.run(None, {"features": rows})[0].ravel() - final.predict(rows)).max()
    out.write_bytes(payload)
    print(f"wrote {out} ({len(payload):,} bytes, {len(final.boosters)} × {ROUNDS} trees, trained on "
          f"{sum(q.set_name not in test for q in items)} questions); ONNX against LightGBM: max difference {drift:.1e}")


if __name__ == "__main__":
    main()
