"""Dtypes, their ranges, and what the generators know of a value (shared by gen_ops, gen_index)."""
from __future__ import annotations

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
DTYPES = FLOATS + INTS + ("bool",)
#: (lo, hi) of each integer dtype
INT_RANGE = {"int8": (-128, 127), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
             "int64": (-2**63, 2**63 - 1), "uint8": (0, 255)}


class Val:
    """What the generator knows of an expression: dtype and range (``lo``..``hi``)."""

    def __init__(self, expr, dtype, lo=0, hi=0):
        self.expr, self.dtype, self.lo, self.hi = expr, dtype, lo, hi

    @property
    def mag(self):
        return max(abs(self.lo), abs(self.hi))


def int_val(expr, dtype, lo, hi):
    """An integer value whose range wraps to the whole dtype when it may overflow."""
    dlo, dhi = INT_RANGE[dtype]
    if lo < dlo or hi > dhi:
        lo, hi = dlo, dhi
    return Val(expr, dtype, lo, hi)
