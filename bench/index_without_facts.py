"""`nbrecall ...` with value facts turned off: the baseline of the index-growth figures of issue 13.

Why: no setting turns facts off (they are part of what an index is), so the size and time that facts add are
measured against this: the same command, with `ingest.build.extract_facts` returning no facts, in this process and
in the pool's workers (which import this file again as `__mp_main__`).

    NBRECALL_BENCH_NOFACTS=1 .venv/bin/python bench/index_without_facts.py index ../shared/corpus --index /tmp/n
    .venv/bin/python bench/index_without_facts.py index ../shared/corpus --index /tmp/f   # facts on: plain nbrecall
"""

import os
import sys

if os.environ.get("NBRECALL_BENCH_NOFACTS"):
    import nbrecall.ingest.build as build

    build.extract_facts = lambda *args, **kwargs: []

if __name__ == "__main__":
    from nbrecall.cli import app

    sys.argv = ["nbrecall", *sys.argv[1:]]
    app()
