"""Warm `ask` latency, extractive (the default): one process, the models loaded, each question answered in turn.

Why: the answer is the first thing a user reads; issue 13 asks for a warm p50 of at most 300 ms. The figure is
the whole `answer()` call a front end makes (search, fact look-up, scoring, composing), not the start-up of a CLI
process (bench/cli_latency.py measures that). Two warm-up questions are answered first and not counted.

    .venv/bin/python bench/ask_latency.py --index /tmp/idx1 ../shared/eval/queries.jsonl
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from nbrecall.answer.answer import answer
from nbrecall.config import load_settings
from nbrecall.search.evaluate import load_queries
from nbrecall.service import Archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("queries", type=Path, nargs="+")
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=1, help="answer every question this many times")
    args = parser.parse_args()
    settings = load_settings(None, env={})
    settings.index_dir = args.index
    archive = Archive(settings)
    questions = [q.query for path in args.queries for q in load_queries(path)]
    for q in questions[:2]:
        answer(q, archive, settings)
    times, cpu = [], []
    for _ in range(args.rounds):
        for q in questions:
            start, start_cpu = time.perf_counter(), time.process_time()
            answer(q, archive, settings)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    load = os.getloadavg()
    print(f"{len(times)} answers: wall p50 {_ms(times, 0.5)}, p95 {_ms(times, 0.95)}; CPU (all threads) p50 "
          f"{_ms(cpu, 0.5)}, p95 {_ms(cpu, 0.95)} (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}: on a busy "
          "machine the wall time grows, the CPU time much less)")


def _ms(values: list[float], share: float) -> str:
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(share * len(ordered)))]:.0f} ms"


if __name__ == "__main__":
    main()
