"""The development figures out of archive: each set answered with a learned order that never saw its archive.

Why: the bundled model (`answer/ranker.onnx`) is trained on the development sets' own questions, so
`nbrecall eval --answers` on them is in sample. In session 22, eval2's value@1 was 36/44 with the bundled model and
29/44 with one trained without eval2's archive; A–D's 46/77 and 27/77. A change to the reader or the ranking judged
by the in-sample figures is judged against a model fitted to the old candidates: any change to the candidates
regresses it toward the out-of-sample figure, so a good change can look bad and a change that only keeps the old
candidates in place looks safe. Here, for each archive (the sets that share an index), a model is trained on the
other archives' sets (`ranker_fit.train_model`, the bundled model's settings and size), minus --exclude, and the
archive's sets named by --judge are answered with it (`heldout_run.measure`, the figures `nbrecall eval --answers`
gives).

    .venv/bin/python bench/out_of_archive.py --cache /tmp/rank --exclude L,M,N --judge eval,AD,eval2,ACE \\
        --set eval=/tmp/ev/c:../shared/eval/queries.jsonl:../shared/corpus \\
        --set AD=/tmp/ev/c:AD.jsonl:../shared/corpus … --set N=/tmp/ev/n:bench/heldout/queries_n.jsonl:/tmp/n

`--exclude L,M,N` trains on what the bundled model was trained on (every set but L, M and N), less the archive.
Needs the `fit` extra (lightgbm, onnxmltools), as `ranker_fit.py` does.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from answer_ablation import open_archive, set_spec  # bench/, beside this script
from heldout_run import measure
from nbrecall.search.evaluate import load_queries, resolve_copies
from ranker_fit import ENSEMBLE, archive_of, members, questions, train_model, write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]",
                        help="every labelled set: all train the models, those named by --judge are answered")
    parser.add_argument("--cache", type=Path, help="the folder answer_ablation.py caches its searches in")
    parser.add_argument("--judge", default="", metavar="SET,SET,…", help="the sets answered (default: all)")
    parser.add_argument("--exclude", default="", metavar="SET,SET,…", help="sets never trained on")
    parser.add_argument("--ensemble", type=int, default=ENSEMBLE, metavar="N",
                        help=f"each model the mean of N bagged boosters, as ranker_fit.py builds (default {ENSEMBLE})")
    args = parser.parse_args()
    judged = {s for s in args.judge.split(",") if s}
    exclude = {s for s in args.exclude.split(",") if s}
    items = [q for spec in args.set for q in questions(spec, args.cache)]
    print("| set | trained on | value@1 | value@3 | value cell@1 | where cell@1 | nb@1 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        models: dict[str, Path] = {}
        for spec in args.set:
            name, index, queries_path, root = set_spec(spec)
            if judged and name not in judged:
                continue
            archive_key = archive_of(spec)
            training = [q for q in items if q.archive != archive_key and q.set_name not in exclude]
            if archive_key not in models:
                models[archive_key] = Path(tmp) / f"model{len(models)}.onnx"
                write(train_model(training, members(args.ensemble)), training, set(), models[archive_key])
            archive = open_archive(index)
            archive.settings.answer.ranker_model = str(models[archive_key])
            queries = load_queries(queries_path)
            if root is not None:
                resolve_copies(queries, root)
            # the searches `questions` made (and cached): only the order of their candidates changes here
            c = measure(archive, queries, cache=args.cache / f"{name}.pickle" if args.cache else None)
            print(f"| {name} | {len(training)} | {c['v1']}/{c['values']} | {c['v3']}/{c['values']} | "
                  f"{c['vcell']}/{c['values']} | {c['wcell']}/{c['where']} | {c['nb1']}/{c['n']} |", flush=True)


if __name__ == "__main__":
    main()
