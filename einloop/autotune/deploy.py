"""Deploy time: run templates with the best configuration a tuning log recorded.

    with autotune.apply_history_best("tuning_logs/matmul.jsonl"):
        s, args = matmul(1024, 1024, 1024)      # the best logged config, no tuning

A workload the log does not cover gets the template's fallback config and one warning (naming
the tuned shapes of the same template, if any); ``strict=True`` raises instead.
"""
from __future__ import annotations

import os
import warnings

from ..errors import TuningError, TuningLogError
from .dispatcher import DispatchContext, FallbackConfigWarning
from . import record as rec


class ApplyHistoryBest(DispatchContext):
    """A dispatch context answering each workload with its best logged config for *target*."""

    def __init__(self, logs, target="llvm", strict=False):
        from ..codegen.target import Target
        self.target = str(Target.parse(target))
        self.strict = strict
        records = []
        for item in ([logs] if isinstance(logs, (str, os.PathLike)) else logs):
            if isinstance(item, rec.Record):
                records.append(item)
            else:
                if not os.path.exists(item):
                    raise TuningLogError(f"apply_history_best: no tuning log at {item}")
                records.extend(rec.load(item))
        self.records = records
        self.best = rec.pick_best(records, self.target)
        self._configs = {}
        self._warned = set()
        self.hits, self.misses = 0, 0

    def lookup(self, workload):
        """``(config or None, reason)``: what this context answers for *workload*, and why."""
        best = self.best.get(workload.key)
        if best is None:
            return None, self._miss_reason(workload)
        cfg = self._configs.get(workload.key)
        if cfg is None:
            from .task import create_task
            task = create_task(workload.template, workload.args, kwargs=dict(workload.kwargs))
            try:
                cfg = task.config_space.from_json(best.config)
            except TuningError as exc:
                raise TuningLogError(f"the logged best config of {workload} does not fit the "
                                     f"template as it is now: {exc}") from None
            self._configs[workload.key] = cfg
        return cfg, f"best of the log: {best.mean_cost * 1e3:.3f} ms"

    def _miss_reason(self, workload):
        same = sorted({str(r.args) for r in self.best.values() if r.template == workload.template})
        other_target = any(r.workload == workload.key for r in self.records if r.ok)
        if other_target:
            return "the log has records of this workload only for another target/CPU"
        if same:
            return f"the log tuned {workload.template} only for args {', '.join(same)}"
        return f"the log has no records of template {workload.template!r}"

    def query(self, workload):
        cfg, reason = self.lookup(workload)
        if cfg is not None:
            self.hits += 1
            return cfg
        self.misses += 1
        if self.strict:
            raise TuningError(f"apply_history_best(strict=True): no tuned config for {workload}: "
                              f"{reason}")
        if workload.key not in self._warned:
            self._warned.add(workload.key)
            warnings.warn(f"no tuned config for {workload} ({reason}); using the template's "
                          "fallback config", FallbackConfigWarning, stacklevel=4)
        from .space import ConfigSpace
        return ConfigSpace()


def apply_history_best(logs, target="llvm", strict=False) -> ApplyHistoryBest:
    """A context in which templates use the best config of *logs* (paths or records)."""
    return ApplyHistoryBest(logs, target, strict)
