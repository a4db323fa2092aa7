"""Constant folding with the run-time semantics of each dtype.

A folded constant must equal what the kernel computes, or unrolling (which turns loop variables
into constants) would change results.  So integers wrap (two's complement; uint8 modulo 256),
``x // 0 == x % 0 == 0`` as in NumPy, floats are computed and rounded in their own precision, and
a conversion whose result the machine leaves undefined (a float outside an integer's range) is
not folded at all.  Values are Python numbers already normalised to their dtype.
"""
import math
import operator

import numpy as np

from ..ir import dtypes
from ..ir.expr import BinOp, CmpOp

_INT_OPS = {BinOp.ADD: operator.add, BinOp.SUB: operator.sub, BinOp.MUL: operator.mul,
            BinOp.MAX: max, BinOp.MIN: min}
_FLOAT_OPS = {BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
              BinOp.DIV: np.divide, BinOp.MAX: np.maximum, BinOp.MIN: np.minimum}
_DIVMOD = frozenset((BinOp.FLOORDIV, BinOp.MOD, BinOp.TDIV, BinOp.TMOD))
COMPARE = {CmpOp.LT: operator.lt, CmpOp.LE: operator.le, CmpOp.GT: operator.gt,
           CmpOp.GE: operator.ge, CmpOp.EQ: operator.eq, CmpOp.NE: operator.ne}


def binary(op, a, b, dtype):
    """The value of ``a op b`` (a BinOp) in *dtype*, or None if it is not folded."""
    if dtypes.is_float(dtype):
        fn = _FLOAT_OPS.get(op)
        if fn is None:
            return None
        t = dtypes.numpy_dtype(dtype).type
        with np.errstate(all="ignore"):
            return float(fn(t(a), t(b)))
    if not dtypes.is_int(dtype):
        return None
    if op in _INT_OPS:
        return dtypes.wrap(_INT_OPS[op](a, b), dtype)
    if op in _DIVMOD:
        if b == 0:
            return 0
        floor = op is BinOp.FLOORDIV or op is BinOp.MOD
        q = a // b if floor else _trunc_div(a, b)
        quotient = op is BinOp.FLOORDIV or op is BinOp.TDIV
        return dtypes.wrap(q if quotient else a - q * b, dtype)
    return None


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def cast(v, src, dst):
    """The value of *v* (of dtype *src*) converted to *dst*, or None if it is not folded."""
    if dst == dtypes.BOOL:
        return v != 0
    if dtypes.is_float(dst):
        with np.errstate(all="ignore"):
            return float(np.asarray(v, dtype=dtypes.numpy_dtype(src))
                         .astype(dtypes.numpy_dtype(dst)))
    if dtypes.is_float(src):
        if not math.isfinite(v):
            return None
        t = math.trunc(v)
        lo, hi = dtypes.int_range(dst)
        return t if lo <= t <= hi else None
    return dtypes.wrap(int(v), dst)
