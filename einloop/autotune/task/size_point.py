"""A size point of an operator with symbolic extents: the operator bound at those sizes is tuned
as an ordinary task, and its records say which symbolic operator and sizes they measured."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SizePoint:
    """Given to the task of the operator bound at *sizes* when it is created.

    ``key``: the symbolic operator's structural hash, which its records are grouped by;
    ``sizes``: ``((extent name, size), ...)`` in the order of the extents (a declaration with
    other names takes them by position); ``round``: the cross-size round that measures at this
    point (None for a search); ``deployed``: the symbolic operator's tensors, when candidates
    are to be built as the kernel a size dispatch deploys (one for every size) and timed at
    these sizes (None: built for the sizes).  The reference is built for the sizes either way:
    its shapes size the runner's arrays.
    """
    key: str
    sizes: tuple
    round: int | None = None
    deployed: tuple | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict:
        """The record's ``"dynamic"`` field."""
        out = {"key": self.key, "sizes": [[name, int(size)] for name, size in self.sizes]}
        if self.round is not None:
            out["round"] = self.round
        return out
