"""Several schedules of one operator with symbolic extents, each for the sizes it was tuned at.

A schedule tuned at ``n = 16`` (small register tiles, one thread) and one tuned at ``n = 2048``
(wide tiles, every core) are both valid for every ``n`` but fast for their own.  A
:class:`SizeDispatch` keeps them with their sizes; ``build`` compiles each once (not once per
size) into a :class:`~einloop.runtime.DispatchKernel`, which runs each call with the schedule
tuned nearest its sizes.
"""
from __future__ import annotations

from ..errors import ScheduleError


class SizeDispatch:
    """``cases``: ``[(sizes, schedule)]`` with *sizes* a ``{name: int}`` giving a value to each
    symbolic extent of the operator.  Every schedule schedules the same (symbolic) tensors."""

    def __init__(self, cases):
        cases = [(dict(sizes), s) for sizes, s in cases]
        if not cases:
            raise ScheduleError("SizeDispatch: give at least one (sizes, schedule) case")
        names = sorted(cases[0][0])
        for sizes, _ in cases:
            if sorted(sizes) != names:
                raise ScheduleError(f"SizeDispatch: every case sizes the same extents "
                                    f"({', '.join(names)}), got {sorted(sizes)}")
        self.names = tuple(names)
        self.cases = cases

    def __len__(self):
        return len(self.cases)

    def __repr__(self):
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in sorted(sizes.items()))
                          for sizes, _ in self.cases)
        return f"SizeDispatch({len(self.cases)} schedules: {shown})"
