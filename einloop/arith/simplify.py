"""Expression simplification: constant folding with each dtype's run-time semantics, linear-form
canonicalisation of int64 index arithmetic (folding fused div/mod pairs back), and range-based
rewriting of //, %, comparisons, min and max.

Only rewrites that hold for every value are made; ``ranges`` (Var -> (lo, hi), or None when
nothing is known) supplies the facts known about loop variables.
"""
import math

from ..ir import dtypes
from ..ir import expr as E
from ..ir.expr import BinOp, LogicOp
from . import fold
from .bounds import const_bounds, prove
from .linear import Terms, from_linear, recombine, split_multiple, terms_of
from ..ir.visit import transform

ADD, SUB, MUL, MAX, MIN = BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MAX, BinOp.MIN
FLOORDIV, MOD, TDIV, TMOD = BinOp.FLOORDIV, BinOp.MOD, BinOp.TDIV, BinOp.TMOD
_DIVMOD = frozenset((FLOORDIV, MOD, TDIV, TMOD))
_LINEAR = frozenset((ADD, SUB, MUL))
_FLOOR_OF = {TDIV: FLOORDIV, TMOD: MOD, FLOORDIV: FLOORDIV, MOD: MOD}


def _fold(e, ranges):
    if isinstance(e, E.Binary):
        return _binary(e, ranges)
    if type(e) is E.Var:                # a variable with one possible value (a loop of one)
        r = ranges.get(e) if ranges else None
        if r is not None and r[0] == r[1] and type(r[0]) is int:
            return E.Const(r[0], e.dtype)
        return None
    if isinstance(e, E.Compare):
        if isinstance(e.a, E.Const) and isinstance(e.b, E.Const):
            return E.const(fold.COMPARE[e.op](e.a.value, e.b.value))
        if not dtypes.is_float(e.a.dtype):
            p = prove(e, ranges)
            if p is not None:
                return E.const(p)
        return None
    if isinstance(e, E.Logical):
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(x, E.Const):
                if e.op is LogicOp.AND:
                    return y if x.value else E.const(False)
                return E.const(True) if x.value else y
        return None
    if isinstance(e, E.Not) and isinstance(e.a, E.Const):
        return E.const(not e.a.value)
    if isinstance(e, E.Select) and isinstance(e.cond, E.Const):
        return e.true_value if e.cond.value else e.false_value
    if isinstance(e, E.Cast) and isinstance(e.value, E.Const):
        v = fold.cast(e.value.value, e.value.dtype, e.dtype)
        return None if v is None else E.Const(v, e.dtype)
    return None


def _binary(e, ranges):
    a, b = e.a, e.b
    ca, cb = isinstance(a, E.Const), isinstance(b, E.Const)
    isint = dtypes.is_int(e.dtype)
    if ca and cb:
        v = fold.binary(e.op, a.value, b.value, e.dtype)
        if v is not None:
            return E.Const(v, e.dtype)
    op = e.op
    if e.dtype == dtypes.INDEX and op in _LINEAR:
        return _canonical(e, ranges)
    if isint and op in _DIVMOD and cb and b.value > 0:
        nested = _nested_div(e)
        if nested is None:
            return _divmod(e, ranges)
        # the merged division may fall to the ranges where neither part did: f // 56 // 56
        # with 0 <= f < 3136 is 0 (a fused axis whose outermost part has extent 1)
        merged = _divmod(nested, ranges)
        return nested if merged is None else merged
    if (op is MAX or op is MIN) and isint:
        ba, bb = const_bounds(a, ranges), const_bounds(b, ranges)
        if ba and bb:
            if ba[1] <= bb[0]:
                return b if op is MAX else a
            if bb[1] <= ba[0]:
                return a if op is MAX else b
    if isint or op is MUL:
        if op is MUL and _is(a, 1):
            return b
        if (op is MUL or op is FLOORDIV or op is TDIV) and _is(b, 1):
            return a
    if isint and (op is ADD or op is SUB) and _is(b, 0):
        return a
    return None


def _is(e, v):
    return isinstance(e, E.Const) and e.value == v


def _canonical(e, ranges):
    terms = terms_of(e)
    recombine(terms, lambda atom: _floor_view(atom, ranges),
              lambda y, c: _mod(y, E.Const(c, dtypes.INDEX), ranges))
    return from_linear(terms)


def _mod(y, c, ranges):
    m = E.Binary(MOD, y, c, dtypes.INDEX)
    folded = _fold(m, ranges)
    return m if folded is None else folded


def _floor_view(atom, ranges):
    """``(op, y, c)`` if *atom* is ``y // c`` or ``y % c`` with floor semantics and ``c > 0``
    (``op``: ``BinOp.FLOORDIV`` or ``BinOp.MOD``)."""
    if not (isinstance(atom, E.Binary) and atom.op in _DIVMOD and isinstance(atom.b, E.Const)
            and atom.b.value > 0 and atom.dtype == dtypes.INDEX):
        return None
    op = _FLOOR_OF[atom.op]
    if op is not atom.op:                     # truncating: the same as floor for y >= 0 only
        b = const_bounds(atom.a, ranges)
        if b is None or b[0] < 0:
            return None
    return (op, atom.a, atom.b.value)


def _nested_div(e):
    """``(y // a) // b -> y // (a*b)`` (also for tdiv), when ``a*b`` fits the dtype."""
    a = e.a
    if not (e.op is FLOORDIV or e.op is TDIV) or not (
            isinstance(a, E.Binary) and a.op is e.op and isinstance(a.b, E.Const)
            and a.b.value > 0):
        return None
    c = a.b.value * e.b.value
    if c > dtypes.int_range(e.dtype)[1]:
        return None
    return E.Binary(e.op, a.a, E.Const(c, e.dtype), e.dtype)


def _divmod(e, ranges):
    """Rewrite (c*q + r) // c -> q + r // c and (c*q + r) % c -> r % c, dropping r where 0 <= r < c."""
    c = e.b.value
    floor = e.op is FLOORDIV or e.op is MOD
    a = e.a
    if ranges is not None and not floor:
        ba = const_bounds(a, ranges)
        if ba is None or ba[0] < 0:
            return None
        floor = True          # non-negative dividend: trunc and floor agree
    if not floor or e.dtype != dtypes.INDEX:
        return None
    q, r = split_multiple(a, c)
    br = const_bounds(r, ranges)
    small = br is not None and 0 <= br[0] and br[1] < c
    kept = None if small or ranges is None else _without_small_terms(a, c, ranges)
    if kept is not None:                # (R + S) // c == R // c, (R + S) % c == R % c + S
        rest, small_part = kept
        div = E.Binary(e.op, rest, e.b, e.dtype)
        again = _divmod(div, ranges)
        div = div if again is None else again
        if e.op is FLOORDIV or e.op is TDIV:
            return div
        return _canonical(E.Binary(ADD, div, small_part, e.dtype), ranges)
    if e.op is FLOORDIV or e.op is TDIV:
        if small:
            return q
        if _is(q, 0):
            return None
        return _canonical(E.Binary(ADD, q, E.Binary(FLOORDIV, r, e.b, e.dtype), e.dtype), ranges)
    if small:
        return r
    if _is(q, 0):
        return None
    return E.Binary(MOD, r, e.b, e.dtype)


def _without_small_terms(a, c, ranges):
    """``(R, S)`` with ``a == R + S`` where dividing by *c* cannot tell ``a`` from ``R``: every
    coefficient of ``R`` (and its constant) is a multiple of ``g = gcd(c, ...)``, and the terms
    ``S`` (with the constant or without) are non-negative and below ``g`` together.  ``R mod c`` is then a multiple of ``g`` at
    most ``c - g``, so adding ``S`` never reaches the next multiple of *c*: a vector lane (or an
    inner loop) ``0 <= l < 16`` beside a multiple of 16 divided by 784 keeps the quotient of
    the multiple in every lane (a load that is the same in all lanes, not a gather).  None when
    no such split exists (or S would be empty)."""
    terms = terms_of(a)
    const = terms.pop(None, 0)
    atoms = []
    for atom, k in terms.items():
        if k == 0:
            continue
        b = const_bounds(atom, ranges)
        if b is None:
            atoms.append((abs(k), atom, k, None))
            continue
        lo, hi = (k * b[0], k * b[1]) if k > 0 else (k * b[1], k * b[0])
        atoms.append((abs(k), atom, k, (lo, hi)))
    atoms.sort(key=lambda t: t[0])
    for m in range(1, len(atoms)):
        small, rest = atoms[:m], atoms[m:]
        if any(t[3] is None for t in small):
            return None                 # the small part must have known bounds
        low, high = sum(t[3][0] for t in small), sum(t[3][1] for t in small)
        for const_is_small in (False, True):
            k0 = const if const_is_small else 0
            g = math.gcd(c, const - k0, *(t[2] for t in rest))
            if 0 <= low + k0 and high + k0 < g:
                keep, drop = Terms(), Terms()
                keep.add(None, const - k0)
                drop.add(None, k0)
                for t in rest:
                    keep.add(t[1], t[2])
                for t in small:
                    drop.add(t[1], t[2])
                return from_linear(keep), from_linear(drop)
    return None


def simplify(e, ranges=None, memo=None):
    """Simplify *e*; ``ranges`` (Var -> (lo, hi)) enables range-based rewrites.

    *memo*: see :func:`~einloop.ir.visit.transform`; valid while ``ranges`` does not change.
    """
    return transform(e, lambda x: _fold(x, ranges), memo)
