"""Expression emission, shared by scalar code and vectorized loop bodies.

A value is an LLVM scalar, an LLVM vector (it depends on the vectorized loop's lane), or a
:class:`Ramp`: an int64 index ``base + offsets[lane]`` (a scalar base, constant offsets) kept
symbolic, so that a load or store can tell a contiguous access (``base + lane``) from one that a
few vector loads and a shuffle serve (a stride, or the period of ``x // 2`` and ``x % 2``) and
from a gather.  Expressions that do not depend on the lane stay scalar and are broadcast only
where they meet a vector.

``Select`` (and ``and``/``or``) are lazy: when a side that may not run could fault (a load, an
integer division by a variable), scalar code branches around it and vector code evaluates it
under a lane mask so that inactive lanes touch no memory.
"""
from __future__ import annotations


import math

from llvmlite import ir

from ..errors import BuildError, InternalError
from ..ir import expr as E
from ..ir import stmt as L
from ..ir.expr import BinOp, LogicOp
from . import arith, mathlib
from .irtypes import I1, I64, const, const_vector, lanes_of, scalar_type, splat


class Ramp:
    """The int64 lanes ``base + offsets[k]`` for ``k`` in ``0 .. lanes-1``: *base* a scalar,
    *offsets* Python ints.  A loop's lanes are ``base + k`` (``Ramp(base, 1, lanes)``); a
    division or remainder by a constant that divides the base keeps the form (``(2c + k) // 2 =
    c + k // 2``), so a periodic index stays known lane by lane.  *align*: a known divisor of
    the base (0: the base is zero), read from how the base was computed when not given."""
    __slots__ = ("base", "offsets", "align")

    def __init__(self, base, stride: int, lanes: int, align=None):
        self.base, self.offsets = base, tuple(stride * k for k in range(lanes))
        self.align = multiple_of(base) if align is None else align

    @classmethod
    def of(cls, base, offsets, align):
        r = cls.__new__(cls)
        r.base, r.offsets, r.align = base, tuple(offsets), align
        return r

    @property
    def lanes(self) -> int:
        return len(self.offsets)

    @property
    def stride(self):
        """``s`` when the offsets are ``s * k`` (an affine ramp), else None."""
        o = self.offsets
        s = o[1] - o[0] if len(o) > 1 else 0
        return s if all(v == s * k for k, v in enumerate(o)) else None


def multiple_of(v) -> int:
    """A known divisor of the int scalar *v* (0: *v* is zero; 1: nothing known), read from the
    constants it was computed with (``c * 16`` is a multiple of 16)."""
    if isinstance(v, ir.Constant):
        c = arith.const_int(v)
        return abs(c) if c is not None else 1
    op = getattr(v, "opname", None)
    if op in ("add", "sub") and len(v.operands) == 2:
        return math.gcd(multiple_of(v.operands[0]), multiple_of(v.operands[1]))
    if op == "mul" and len(v.operands) == 2:
        return multiple_of(v.operands[0]) * multiple_of(v.operands[1])
    if op == "shl" and len(v.operands) == 2:
        k = arith.const_int(v.operands[1])
        return multiple_of(v.operands[0]) << k if k is not None and 0 <= k < 62 else 1
    return 1


class ExprMixin:
    """Turns expression nodes into LLVM values; needs ``b``, ``vars``, ``k.an``, ``vec``."""

    # entry points --------------------------------------------------------------------------
    def expr(self, e):
        """Emit *e*; the result may be a :class:`Ramp`."""
        method = _DISPATCH.get(type(e))
        if method is None:
            raise InternalError(f"codegen: unexpected expression node {type(e).__name__} ({e}); "
                                "tensor reads and reductions must be lowered first")
        return method(self, e)

    def value(self, e, lanes=None):
        """Emit *e* as an LLVM value, broadcast to *lanes* lanes if given."""
        return self.mat(self.expr(e), lanes)

    def mat(self, v, lanes=None):
        """Materialise a Ramp as a vector, and broadcast a scalar to *lanes* if given."""
        if isinstance(v, Ramp):
            offsets = const_vector(I64, v.offsets)
            v = self.b.add(splat(self.b, v.base, v.lanes), offsets, name="lanes")
        if lanes and lanes_of(v) is None:
            v = splat(self.b, v, lanes)
        return v

    def unify(self, *vals):
        """Materialise, and broadcast scalars to the lane count of the vector operands."""
        vals = [self.mat(v) for v in vals]
        lanes = {lanes_of(v) for v in vals} - {None}
        if len(lanes) > 1:
            raise InternalError(f"codegen: mixing vectors of {sorted(lanes)} lanes")
        n = lanes.pop() if lanes else None
        return [self.mat(v, n) for v in vals]

    # leaves --------------------------------------------------------------------------------
    def _const(self, e):
        return const(scalar_type(e.dtype), e.value)

    def _var(self, e):
        v = self.vars.get(id(e))
        if v is None:
            raise InternalError(f"codegen: variable {e.name} is used outside the loop or let "
                                "statement that defines it")
        return v

    def _load(self, e):
        return self.load_index(e.buffer, self.expr(e.index), e.dtype)

    # arithmetic ----------------------------------------------------------------------------
    def _binary(self, e):
        x, y = self.expr(e.a), self.expr(e.b)
        if isinstance(x, Ramp) or isinstance(y, Ramp):
            r = self._ramp_arith(e.op, x, y)
            if r is not None:
                return r
        x, y = self.unify(x, y)
        return arith.binary(self.b, e.op, x, y, e.dtype)

    def _ramp_arith(self, op, x, y):
        """Keep ``ramp +- scalar``, ``ramp +- ramp``, ``ramp * constant`` symbolic, and
        ``ramp // c``, ``ramp % c`` (floor or truncating; the lowering proved a truncating one's
        dividend non-negative) when the constant ``c > 0`` divides the ramp's base.

        Without nsw, like all integer arithmetic: a ramp may be user data that wraps.
        """
        b = self.b
        if any(not isinstance(v, Ramp) and lanes_of(v) is not None for v in (x, y)):
            return None
        rx, ry = isinstance(x, Ramp), isinstance(y, Ramp)
        lanes = x.lanes if rx else y.lanes
        if op is BinOp.ADD or op is BinOp.SUB:
            xb, xo, xa = (x.base, x.offsets, x.align) if rx else (x, (0,) * lanes, None)
            yb, yo, ya = (y.base, y.offsets, y.align) if ry else (y, (0,) * lanes, None)
            sign = 1 if op is BinOp.ADD else -1
            base = b.add(xb, yb) if op is BinOp.ADD else b.sub(xb, yb)
            align = math.gcd(multiple_of(xb) if xa is None else xa,
                             multiple_of(yb) if ya is None else ya)
            return _lanes(b, base, [p + sign * q for p, q in zip(xo, yo)], align)
        if op is BinOp.MUL and rx != ry:
            ramp, k = (x, arith.const_int(y)) if rx else (y, arith.const_int(x))
            if k is not None:
                return _lanes(b, b.mul(ramp.base, const(I64, k)), [o * k for o in ramp.offsets],
                              ramp.align * abs(k))
        if op in _DIV_MOD and rx and not ry:
            c = arith.const_int(y)
            if c is not None and c > 0 and x.align % c == 0:
                if op in (BinOp.FLOORDIV, BinOp.TDIV):
                    base = x.base if c == 1 else b.sdiv(x.base, const(I64, c))
                    return _lanes(b, base, [o // c for o in x.offsets], x.align // c)
                return _lanes(b, const(I64, 0), [o % c for o in x.offsets], 0)
            start = arith.const_int(x.base)
            if c is not None and c > 0 and start is not None and start >= 0 \
                    and start % c + min(x.offsets) >= 0:
                # a constant base (a part of a vector loop split by powers of two starts at
                # 32, 48, ...): every lane is known, floor and truncation agree (non-negative)
                r = start % c
                if op in (BinOp.FLOORDIV, BinOp.TDIV):
                    # the base is its own divisor (0: it is zero)
                    return _lanes(b, const(I64, start // c), [(r + o) // c for o in x.offsets],
                                  start // c)
                return _lanes(b, const(I64, 0), [(r + o) % c for o in x.offsets], 0)
        return None

    def _compare(self, e):
        x, y = self.unify(self.expr(e.a), self.expr(e.b))
        return arith.compare(self.b, e.op, x, y, e.a.dtype)

    def _not(self, e):
        x = self.value(e.a)
        return self.b.xor(x, const(x.type, 1))

    def _cast(self, e):
        return arith.cast(self.b, self.value(e.value), e.value.dtype, e.dtype)

    def _call(self, e):
        args = self.unify(*[self.expr(a) for a in e.args])
        return mathlib.emit_call(self.b, e.name, args, e.dtype)

    # lazy operators ------------------------------------------------------------------------
    def _logical(self, e):
        x = self.value(e.a)
        if not self.k.an.may_trap(e.b):
            return arith.logical(self.b, e.op, *self.unify(x, self.expr(e.b)))
        is_and = e.op is LogicOp.AND
        if lanes_of(x) is None:
            short = const(I1, 0 if is_and else 1)
            rhs = lambda: self.value(e.b)     # noqa: E731
            return (self.branch_values(x, rhs, lambda: short, "and") if is_and else
                    self.branch_values(x, lambda: short, rhs, "or"))
        active = x if is_and else self.b.xor(x, const(x.type, 1))
        y = self.under_mask(self.and_mask(active), lambda: self.value(e.b))
        return arith.logical(self.b, e.op, *self.unify(x, y))

    def _select(self, e):
        c = self.value(e.cond)
        an = self.k.an
        t_lazy, f_lazy = an.may_trap(e.true_value), an.may_trap(e.false_value)
        if lanes_of(c) is None:
            if t_lazy or f_lazy:
                return self.branch_values(c, lambda: self.value(e.true_value),
                                          lambda: self.value(e.false_value), "select")
            t, f = self.unify(self.expr(e.true_value), self.expr(e.false_value))
            return self.b.select(c, t, f)
        t = (self.under_mask(self.and_mask(c), lambda: self.value(e.true_value)) if t_lazy
             else self.value(e.true_value))
        f = (self.under_mask(self.and_mask(self.b.xor(c, const(c.type, 1))),
                             lambda: self.value(e.false_value)) if f_lazy
             else self.value(e.false_value))
        t, f = self.mat(t, lanes_of(c)), self.mat(f, lanes_of(c))
        return self.b.select(c, t, f)

    def branch_values(self, cond, then_fn, else_fn, name):
        """``cond ? then_fn() : else_fn()`` with real branches and a phi (scalar *cond*)."""
        b = self.b
        then_bb = b.append_basic_block(f"{name}.true")
        else_bb = b.append_basic_block(f"{name}.false")
        merge_bb = b.append_basic_block(f"{name}.end")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv = self.mat(then_fn())
        then_end = b.block
        b.position_at_end(else_bb)
        fv = self.mat(else_fn())
        else_end = b.block
        lanes = lanes_of(tv) or lanes_of(fv)
        b.position_at_end(then_end)
        tv = self.mat(tv, lanes)
        b.branch(merge_bb)
        b.position_at_end(else_end)
        fv = self.mat(fv, lanes)
        b.branch(merge_bb)
        b.position_at_end(merge_bb)
        if tv.type != fv.type:
            raise BuildError(f"the branches of a select have different types: {tv.type} and "
                             f"{fv.type}")
        phi = b.phi(tv.type, name=name)
        phi.add_incoming(tv, then_end)
        phi.add_incoming(fv, else_end)
        return phi


_DIV_MOD = (BinOp.FLOORDIV, BinOp.TDIV, BinOp.MOD, BinOp.TMOD)


def _lanes(b, base, offsets, align):
    """``base + offsets[k]`` as a Ramp, or as a scalar when every lane has the same offset."""
    first = offsets[0]
    if all(o == first for o in offsets):
        return base if first == 0 else b.add(base, const(I64, first))
    return Ramp.of(base, offsets, align)


_DISPATCH = {
    E.Const: ExprMixin._const, E.Var: ExprMixin._var, E.ShapeVar: ExprMixin._var, L.Load: ExprMixin._load,
    E.Binary: ExprMixin._binary, E.Compare: ExprMixin._compare, E.Logical: ExprMixin._logical,
    E.Not: ExprMixin._not, E.Select: ExprMixin._select, E.Cast: ExprMixin._cast,
    E.Call: ExprMixin._call,
}
