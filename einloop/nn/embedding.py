"""Embedding lookup: rows of a table gathered by integer indices."""
from __future__ import annotations

from .. import te
from ..errors import TEError
from .elementwise import shape_of


def embedding(table, indices, name="embedding"):
    """``table[indices[...], :]``.  An index outside the table reads a clamped row (PyTorch
    raises there; a kernel must never read out of bounds)."""
    st = shape_of(table)
    if len(st) != 2:
        raise TEError(f"{name}: the table must be 2-D (rows, features), got {st}")
    if not str(indices.dtype).startswith(("int", "uint")):
        raise TEError(f"{name}: indices must be integers, got {indices.dtype}")
    rows = st[0]

    def body(*i):
        ix = indices[i[:-1]].astype("int64")
        return table[te.minimum(te.maximum(ix, 0), rows - 1), i[-1]]
    return te.compute(shape_of(indices) + (st[1],), body, name=name)
