"""Matrix products: ``matmul`` with NumPy's broadcasting of batch dimensions, ``dense``."""
from __future__ import annotations

from .. import te
from ..errors import TEError
from .elementwise import broadcast_shape, narrow, read_broadcast, rounded_to, same_dim, \
    shape_of, wide
from .layout import reshape


def matmul(a, b, name="matmul", dtype=None):
    """``a @ b`` as NumPy and PyTorch define it: 1-D operands are promoted to a row or column
    (and the dimension dropped again), leading dimensions broadcast.  Two vectors give
    shape (1,) (PyTorch's 0-d scalar), as einloop has no 0-d tensors.  float16 and bfloat16
    operands are multiplied and summed in float32 (:func:`~.elementwise.opmath`), the result
    rounded once to *dtype* (*a*'s by default; ``opmath(a.dtype)`` leaves the sum unrounded
    for an epilogue that rounds once, as ``addmm`` does)."""
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        raise TEError(f"{name}: both operands need at least one dimension, got {sa} and {sb}")
    if len(sa) == 1:
        out = matmul(reshape(a, (1, sa[0]), name + "_row"), b, name, dtype)
        return reshape(out, shape_of(out)[:-2] + shape_of(out)[-1:], name + "_vec")
    if len(sb) == 1:
        out = matmul(a, reshape(b, (sb[0], 1), name + "_col"), name, dtype)
        return reshape(out, shape_of(out)[:-1], name + "_vec")
    (m, k), (k2, n) = sa[-2:], sb[-2:]
    if not same_dim(k, k2):
        raise TEError(f"{name}: inner dimensions differ: {sa} @ {sb}")
    batch = broadcast_shape(sa[:-2], sb[:-2])
    r = te.reduce_axis((0, k), name="k")

    def body(*idx):
        *bi, i, j = idx
        bi = tuple(bi)
        return te.sum(wide(_batch_read(a, bi, (i, r))) * wide(_batch_read(b, bi, (r, j))),
                      axis=r)
    return rounded_to(te.compute(batch + (m, n), body, name=name), dtype or a.dtype, name)


def _batch_read(t, batch_idx, last2):
    shape = shape_of(t)
    lead = shape[:-2]
    if not lead:
        return t[last2]
    return read_broadcast(_Lead(t, last2), batch_idx)


class _Lead:
    """*t* seen as its leading dimensions, read at the fixed last two indices (so that
    broadcasting over the batch dimensions reuses :func:`read_broadcast`)."""

    def __init__(self, t, last2):
        self.t, self.last2 = t, last2
        self.shape = shape_of(t)[:-2]

    def __getitem__(self, idx):
        return self.t[tuple(idx) + tuple(self.last2)]


def batch_matmul(a, b, name="batch_matmul"):
    """``a[b] @ b[b]`` for 3-D operands of equal batch."""
    if len(shape_of(a)) != 3 or len(shape_of(b)) != 3:
        raise TEError(f"{name}: needs 3-D operands, got {shape_of(a)} and {shape_of(b)}")
    return matmul(a, b, name)


def dense(x, w, bias=None, name="dense", dtype=None):
    """``x @ w.T + bias``, *w* of shape (out, in) as PyTorch's ``Linear`` holds it; the result
    rounded once to *dtype* (*x*'s by default), as :func:`matmul`'s."""
    dtype = dtype or x.dtype
    sx, sw = shape_of(x), shape_of(w)
    if len(sw) != 2 or sx[-1] != sw[1]:
        raise TEError(f"{name}: weight {sw} does not fit input {sx} (want (out, {sx[-1]}))")
    if bias is not None and shape_of(bias) not in ((sw[0],), (1,)):
        raise TEError(f"{name}: bias {shape_of(bias)} does not fit {sw[0]} outputs")
    r = te.reduce_axis((0, sw[1]), name="k")

    def body(*idx):
        *lead, j = idx
        return te.sum(wide(x[tuple(lead) + (r,)]) * wide(w[j, r]), axis=r)
    out = te.compute(sx[:-1] + (sw[0],), body, name=name)
    if bias is None:
        return rounded_to(out, dtype, name)
    return te.compute(shape_of(out), lambda *i: narrow(out[i] + wide(
        bias[i[-1] if shape_of(bias)[0] > 1 else 0]), dtype), name=name + "_bias")
