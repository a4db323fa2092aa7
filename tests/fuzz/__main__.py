"""Command line: ``python -m tests.fuzz -n 10000 --seed 1 -j 2`` (see the package docstring)."""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

from .campaign import FAILURES, case_seeds, failure_groups, replay, run, shrink_failures, summary
from .cases import make_case
from .gen_ops import LANG_RATE
from .pool import Limits


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("-n", type=int, default=1000, help="number of cases (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="run seed: picks the case seeds")
    p.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--out", default="fuzz_out", help="folder for shrunk reproducers")
    p.add_argument("--compile-timeout", type=float, default=60.0)
    p.add_argument("--run-timeout", type=float, default=20.0)
    p.add_argument("--max-shrink", type=int, default=12,
                   help="failure signatures to shrink (default 12; 0: none)")
    p.add_argument("--shrink-budget", type=float, default=120.0, help="seconds per shrink")
    p.add_argument("--replay", metavar="CASE.json", help="run one case description")
    p.add_argument("--case", type=int, metavar="SEED", help="run the case of one case seed")
    p.add_argument("--lang-rate", type=float, default=LANG_RATE,
                   help="chance of a stage to be a newer construct: argmax, tuple reducer, "
                        "te.welford, multi-output compute, cumsum/cumprod, user-written "
                        f"te.scan, scatter, extern (default {LANG_RATE})")
    a = p.parse_args(argv)
    limits = Limits(a.compile_timeout, a.run_timeout)
    if a.replay or a.case is not None:
        case = json.loads(pathlib.Path(a.replay).read_text()) if a.replay else \
            make_case(a.case, a.lang_rate)
        return replay(case, pathlib.Path(a.out), limits, a.shrink_budget if a.max_shrink else 0)
    t0 = time.monotonic()
    step = max(1, a.n // 20)

    def progress(done, case, outcome):
        if done % step == 0 or done == a.n:
            print(f"  {done}/{a.n} cases, {time.monotonic() - t0:.0f} s", flush=True)

    cases = (make_case(s, a.lang_rate) for s in case_seeds(a.seed, a.n))
    results = run(cases, a.jobs, limits, progress)
    print(summary(results, time.monotonic() - t0))
    if a.max_shrink and failure_groups(results):
        print(f"shrinking one case per signature into {a.out}/ ...", flush=True)
        shrink_failures(results, pathlib.Path(a.out), limits, a.max_shrink, a.shrink_budget)
    bad = sum(o["status"] in FAILURES for _, o in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
