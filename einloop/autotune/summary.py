"""Readable summaries of tuning logs, and the best config printed as schedule code."""
from __future__ import annotations

from collections import defaultdict

from . import record as rec


def summarize(path) -> str:
    """A table: per workload and target, trials, errors by kind, and the best record."""
    records = rec.load(path)
    if not records:
        return f"{path}: no records"
    groups = defaultdict(list)
    for r in records:
        groups[(r.workload, r.target)].append(r)
    lines = [f"{path}: {len(records)} records, {len(groups)} workload(s)", ""]
    head = f"{'workload':<40} {'cpu':<16} {'trials':>6} {'errors':>7} {'best ms':>9} {'GFLOP/s':>9}"
    lines += [head, "-" * len(head)]
    for (_, _), rs in groups.items():
        r0 = rs[0]
        name = f"{r0.template}({', '.join(map(str, r0.args))})"
        ok = [r for r in rs if r.ok]
        best = min(ok, key=lambda r: r.mean_cost) if ok else None
        errors = len(rs) - len(ok)
        best_ms = f"{best.mean_cost * 1e3:.3f}" if best else "-"
        gf = f"{best.gflops:.1f}" if best and best.flop else "-"
        lines.append(f"{name[:40]:<40} {r0.cpu[:16]:<16} {len(rs):>6} {errors:>7} {best_ms:>9} "
                     f"{gf:>9}")
        kinds = defaultdict(int)
        for r in rs:
            if not r.ok:
                kinds[r.error_kind or str(r.error_no)] += 1
        if kinds:
            lines.append(" " * 4 + "errors: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
        if best:
            lines.append(" " * 4 + f"best config [{best.index}]: "
                         + ", ".join(f"{k}={v}" for k, v in best.config["entities"].items()))
    return "\n".join(lines)


def best_schedule_code(path, target=None) -> str:
    """The best config of each workload in the log as Python code that runs as is (one block
    per workload; see :mod:`.schedule_code`)."""
    from .schedule_code import config_code
    from .task import create_task
    out = []
    for r in rec.pick_best(rec.load(path), target).values():
        task = create_task(r.template, r.args, kwargs=r.kwargs, module=r.module or None)
        code = config_code(task, task.config_space.from_json(r.config))
        out.append(f"# {task.workload} on {r.cpu or r.target}: {r.mean_cost * 1e3:.3f} ms"
                   + (f", {r.gflops:.1f} GFLOP/s" if r.flop else "") + "\n" + code)
    return "\n\n".join(out)
