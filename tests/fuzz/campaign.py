"""A fuzzing campaign: run many cases in the pool, report them, shrink each kind of failure."""
from __future__ import annotations

import collections
import json

from . import program
from .pool import Pool
from .repro import write
from .shrink import normalize, shrink, signature

STATUSES = ("ok", "rejected", "wrong", "crash", "hang", "exception", "internal", "harness")
FAILURES = ("wrong", "crash", "hang", "exception", "internal", "harness")
SEED_STRIDE = 1_000_000


def case_seeds(seed, n):
    """Seeds of the *n* cases of run *seed* (runs with different seeds never overlap)."""
    return range(seed * SEED_STRIDE, seed * SEED_STRIDE + n)


def run(cases, jobs, limits, progress=None):
    """Run *cases*; return [(case, outcome)] in the order they finished."""
    results = []
    with Pool(jobs, limits) as pool:
        for case, outcome in pool.imap(cases):
            results.append((case, outcome))
            if progress:
                progress(len(results), case, outcome)
    return results


def summary(results, seconds, top=25):
    """The report: counts per outcome, rejections grouped by message, failures by signature."""
    counts = collections.Counter(o["status"] for _, o in results)
    lines = [f"{len(results)} cases in {seconds:.0f} s ({seconds / max(1, len(results)):.2f} s "
             "per case)",
             "  " + "  ".join(f"{s}={counts.get(s, 0)}" for s in STATUSES)]
    rejected = collections.defaultdict(list)
    tolerated = collections.Counter()
    for case, o in results:
        if o["status"] == "rejected":
            key = f"{o['etype']}@{o['phase']}: {normalize(o['msg'])[:120]}"
            rejected[key].append((case["seed"], o["msg"]))
        tolerated.update(normalize(m)[:120] for m in o.get("tolerated", ()))
    if rejected:
        lines.append("rejected declarations/schedules, by message (check each is a right rejection):")
        for key, items in sorted(rejected.items(), key=lambda kv: -len(kv[1]))[:top]:
            seed, msg = items[0]
            lines.append(f"  {len(items):5d}  {key}\n         e.g. seed {seed}: {msg[:300]}")
    if tolerated:
        lines.append("wild steps rejected (tolerated), by message:")
        lines += [f"  {n:5d}  {m}" for m, n in tolerated.most_common(10)]
    groups = failure_groups(results)
    if groups:
        lines.append("failures, by signature:")
        for sig, items in groups.items():
            seeds = [c["seed"] for c, _ in items]
            lines.append(f"  {len(items):5d}  {' | '.join(map(str, sig))}   seeds {seeds[:6]}")
    return "\n".join(lines)


def failure_groups(results):
    groups = collections.defaultdict(list)
    for case, o in results:
        if o["status"] in FAILURES:
            groups[signature(o)].append((case, o))
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def shrink_failures(results, out_dir, limits, max_shrink, budget_s, log=print):
    """Shrink the smallest case of each failure signature; write reproducers to *out_dir*."""
    written = []
    with Pool(1, limits) as pool:
        for sig, items in list(failure_groups(results).items())[:max_shrink]:
            case, _ = min(items, key=lambda co: len(json.dumps(co[0])))
            path = shrink_and_write(pool, case, out_dir, budget_s, f"{len(items)} case(s) of this run.")
            written.append(path)
            log(f"  {path}  ({' | '.join(map(str, sig))})")
    return written


def shrink_and_write(pool, case, out_dir, budget_s, note=""):
    """Shrink failing *case* and write its reproducer (.py) and description (.json)."""
    small, sig = shrink(case, pool.run, budget_s)
    outcome = pool.run(small)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{outcome['status']}-{case['seed']}.py"
    write(path, small, outcome, f"Signature: {' | '.join(map(str, sig))}. {note}\n"
                                f"Replay: python -m tests.fuzz --replay {path.with_suffix('.json')}")
    return path


def replay(case, out_dir, limits, shrink_budget):
    """Run one case, print it and its outcome; shrink it into *out_dir* if it fails."""
    print(program.declare_source(case), program.schedule_source(case), sep="\n")
    with Pool(1, limits) as pool:
        outcome = pool.run(case)
        print(json.dumps(outcome, indent=1))
        failed = outcome["status"] in FAILURES
        if failed and shrink_budget:
            print(f"shrunk reproducer: {shrink_and_write(pool, case, out_dir, shrink_budget)}")
    return int(failed)
