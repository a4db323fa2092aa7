"""Reads before the start of a placeholder, held until a scan can accept them.

TVM's ``te.scan`` takes its state as a plain ``te.placeholder`` that the update reads at the step
before (``state[t - 1, i]``).  Declared on its own, that read is out of bounds at ``t = 0``, and
``te.compute`` rejects reads that are certainly out of bounds; but it cannot know yet that the
placeholder will be a scan's state, since ``te.scan`` is called afterwards.  So a read of a
placeholder that certainly falls *before the start* of an axis does not raise at once: its error
is kept on the compute (``op.deferred``, pairs of the placeholder and the error) and the read is
clamped.  ``te.scan`` accepts the ones whose placeholder is one of its states and raises any
other; every other use of the compute raises the first error: reading it in another compute
(:meth:`Tensor.__getitem__`) or building its DAG (:class:`~einloop.te.dag.ComputeDAG`, which
scheduling, tuning, building and differentiating all start from).  Reads past the end, and any
read of a computed tensor, are rejected at declaration as before.
"""
from __future__ import annotations

import contextlib

from .tensor import PlaceholderOp

#: the list the declaration being checked collects deferred errors into (None: none is)
_collecting = []


@contextlib.contextmanager
def deferring():
    """Collect the errors :func:`defer` holds while a compute's reads are checked."""
    found = []
    _collecting.append(found)
    try:
        yield found
    finally:
        _collecting.pop()


def defer(op, error) -> bool:
    """Hold *error* (a read before the start of *op*) for a scan to judge, if *op* is a
    placeholder and a declaration is collecting; whether it was held."""
    if not _collecting or not isinstance(op, PlaceholderOp):
        return False
    _collecting[-1].append((op, error))
    return True


def raise_deferred(op, accepted=()):
    """Raise the first error held on compute *op* whose placeholder is not in *accepted* (the
    ids of a scan's states)."""
    for placeholder, error in getattr(op, "deferred", ()):
        if id(placeholder) not in accepted:
            raise error
