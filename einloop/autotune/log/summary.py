"""Readable summaries of tuning logs, and the best candidate (template config or step list)
printed as schedule code."""
from __future__ import annotations

from collections import defaultdict

import json

from ...schedule.steps import Step, step_code
from . import record as rec
from .database import Database
from ..space.candidate import CandidateKind
from ..task.base import TaskKind
from ..task.create import task_from_record


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
        name = _workload_name(r0)
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
                kinds[r.error_kind or r.error_no.name] += 1
        if kinds:
            lines.append(" " * 4 + "errors: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
        if best and best.candidate_kind is CandidateKind.CONFIG:
            lines.append(" " * 4 + f"best config [{best.index}]: "
                         + ", ".join(f"{k}={v}" for k, v in best.config["entities"].items()))
        elif best:
            steps = best.candidate["steps"]
            lines.append(" " * 4 + f"best step list ({len(steps)} steps)"
                         + (":" if steps else ": none"))
            lines += [" " * 6 + step_code(Step.from_json(st)) for st in steps]
    return "\n".join(lines)


def _workload_name(r) -> str:
    args = ", ".join(map(str, r.args))
    name = f"{r.name}({args})" if args or r.kind is not TaskKind.AUTO else r.name
    if r.kind is TaskKind.AUTO:
        name += f" [{json.loads(r.workload).get('auto', '')[:8]}]"
    return name


def best_schedule_code(path, target=None) -> str:
    """The best candidate of each workload in the log as Python schedule code (one block per
    workload; ``task.code``: see :mod:`.schedule_code` for configs)."""
    out = []
    for r in Database(path).best(target).values():
        if r.kind is TaskKind.AUTO and not r.module:
            out.append(_steps_comment(r))
            continue
        task = task_from_record(r)
        code = task.code(task.candidate_from_json(r.candidate))
        out.append(f"# {task.workload} on {r.cpu or r.target}: {r.mean_cost * 1e3:.3f} ms"
                   + (f", {r.gflops:.1f} GFLOP/s" if r.flop else "") + "\n" + code)
    return "\n\n".join(out)


def _steps_comment(r) -> str:
    """The best step list of an operator tuned from tensors (no function declares it here):
    readable schedule code, as comments to apply after declaring its tensors."""
    steps = [step_code(Step.from_json(st)) for st in r.candidate["steps"]]
    return "\n".join([f"# {_workload_name(r)} on {r.cpu or r.target}: {r.mean_cost * 1e3:.3f} ms "
                      "(tuned from tensors: declare them, s = create_schedule(outputs), then)"]
                     + [f"#   {line}" for line in steps or ["(the default schedule: no steps)"]])
