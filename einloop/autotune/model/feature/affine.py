"""Approximate affine forms of access indices, for the tuner's stride and footprint features.

Not :mod:`einloop.arith.linear` (the exact analysis the compiler relies on): a feature needs a
number for every index, so this one guesses where an exact form does not exist, in floats, and
says so.  ``x // k`` scales the coefficients by ``1/k``, ``x % k`` keeps those below ``k``,
``min``/``max`` take the side with more variables, a ``select`` its true value, a product of two
variables is linearised around zero; let-bound variables are followed.  Any guess (or an opaque
node such as an indirect load) clears the ``exact`` flag.  The features' values depend on these
guesses, so they must not change without changing the cost model's schema.
"""
from __future__ import annotations

import math

from ....ir.expr import BinOp
from ....ir.visit import ExprVisitor

_OPAQUE = ({}, 0.0, False)


class ApproxAffine(ExprVisitor):
    """``visit(e)`` -> ``(coefs, const, exact)`` with ``coefs``: id of a loop variable -> float.

    *lets* maps the id of a let variable to its value.  Results are memoised by node identity
    (the IR is immutable), so one instance serves all the accesses of a function."""

    def __init__(self, lets):
        self.lets = lets
        self.memo = {}

    def visit(self, e):
        got = self.memo.get(id(e))
        if got is None:
            got = super().visit(e)
            self.memo[id(e)] = got
        return got

    def visit_Const(self, e):
        v = e.value
        return ({}, float(v), True) if isinstance(v, (int, float)) else _OPAQUE

    def visit_Var(self, e):
        bound = self.lets.get(id(e))
        if bound is not None:
            return self.visit(bound)
        return ({id(e): 1.0}, 0.0, True)

    def visit_Binary(self, e):
        op = e.op
        ca, ka, xa = self.visit(e.a)
        cb, kb, xb = self.visit(e.b)
        if op is BinOp.ADD or op is BinOp.SUB:
            s = 1.0 if op is BinOp.ADD else -1.0
            c = dict(ca)
            for v, x in cb.items():
                c[v] = c.get(v, 0.0) + s * x
            return (c, ka + s * kb, xa and xb)
        if op is BinOp.MUL:
            if not cb:
                return ({v: x * kb for v, x in ca.items()}, ka * kb, xa and xb)
            if not ca:
                return ({v: x * ka for v, x in cb.items()}, ka * kb, xa and xb)
            c = {v: x * kb for v, x in ca.items()}     # product of variables: linearise at 0
            for v, x in cb.items():
                c[v] = c.get(v, 0.0) + x * ka
            return (c, ka * kb, False)
        if (op is BinOp.FLOORDIV or op is BinOp.TDIV) and not cb and kb > 0:
            return ({v: x / kb for v, x in ca.items()}, ka / kb, False)
        if (op is BinOp.MOD or op is BinOp.TMOD) and not cb and kb > 0:
            return ({v: x for v, x in ca.items() if abs(x) < kb}, math.fmod(ka, kb), False)
        if op is BinOp.MIN or op is BinOp.MAX:
            return (ca, ka, False) if len(ca) >= len(cb) else (cb, kb, False)
        return _OPAQUE

    def visit_Cast(self, e):
        return self.visit(e.value)

    def visit_Select(self, e):
        c, k, _ = self.visit(e.true_value)
        return (c, k, False)

    def _opaque(self, e):
        return _OPAQUE

    visit_Compare = visit_Logical = visit_Not = visit_Call = visit_Load = _opaque
    visit_TensorRead = visit_Reduce = _opaque
