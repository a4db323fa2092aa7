"""Linear forms of int64 index expressions: ``sum(k * atom) + c``; the one affine analysis.

Index arithmetic is canonicalised through these forms, so equal sums print and compare equal.
Coefficients live in the ring of int64 (mod 2**64), where every rewrite here holds.  The
floor-division pairs that ``fuse`` and ``split`` leave behind are folded back
(``k*c*(y // c) + k*(y % c) -> k*y`` and ``k*a*((y // a) % b) + k*(y % a) -> k*(y % (a*b))``),
so an index over fused loops is affine again and vector loops get contiguous accesses.

A linear form splits ``+``, ``-`` and multiplication by a constant; anything else (a variable, a
product of variables, a division, a load, ...) is an *atom*.  The questions other passes ask:

- :func:`terms_of` / :func:`from_linear`: the whole form, and back to an expression;
- :func:`affine_in`: ``e == k*var + rest`` with ``var`` not in ``rest`` (the stride of a loop);
- :func:`stride_in`: how far ``e`` moves when several variables step together (vector lanes);
- :func:`is_affine`: every atom is a variable.
"""
from ..ir import dtypes
from ..ir import expr as E
from ..ir.expr import BinOp
from ..ir.visit import free_vars, structural_key


def _const(v):
    return E.Const(dtypes.wrap(v, dtypes.INDEX), dtypes.INDEX)


class Terms(dict):
    """atom -> coefficient, where structurally equal atoms share one entry (key None: constant)."""

    def __init__(self):
        super().__init__()
        self._canon = {}

    def add(self, atom, k):
        if atom is not None:
            atom = self._canon.setdefault(structural_key(atom), atom)
        self[atom] = dtypes.wrap(self.get(atom, 0) + k, dtypes.INDEX)


def linear(e, out, scale):
    """Accumulate int64 *e* * scale into ``out`` (a Terms)."""
    if isinstance(e, E.Const):
        out.add(None, e.value * scale)
    elif isinstance(e, E.Binary) and (e.op is BinOp.ADD or e.op is BinOp.SUB):
        linear(e.a, out, scale)
        linear(e.b, out, scale if e.op is BinOp.ADD else -scale)
    elif isinstance(e, E.Binary) and e.op is BinOp.MUL and isinstance(e.b, E.Const):
        linear(e.a, out, scale * e.b.value)
    elif isinstance(e, E.Binary) and e.op is BinOp.MUL and isinstance(e.a, E.Const):
        linear(e.b, out, scale * e.a.value)
    else:
        out.add(e, scale)


def terms_of(e):
    """The linear form of int64 *e*: a :class:`Terms` (atom -> coefficient, None -> constant).
    Atoms whose coefficients cancel stay in it with coefficient 0."""
    terms = Terms()
    linear(e, terms, 1)
    return terms


def affine_in(e, var):
    """``(k, rest)`` with int64 ``e == k * var + rest`` and *var* not in ``rest``; None when *e*
    is not int64 or *var* occurs in it other than linearly (``var // 2``, ``var * j``, ``A[var]``).

    ``k`` is 0 when *var* does not occur; ``rest`` is rebuilt in canonical linear form.
    """
    if e.dtype != dtypes.INDEX:
        return None
    terms = terms_of(e)
    k = terms.pop(var, 0)
    if any(a is not None and var in free_vars(a) for a in terms):
        return None
    return k, from_linear(terms)


def stride_in(e, steps):
    """How far int64 *e* moves when each variable ``v`` of *steps* moves by ``steps[v]``
    (the others fixed): an int, 0 when *e* does not depend on them, or None when it is not
    affine in them.

    ``steps[v]`` may be None for a variable that varies, but not affinely (a let bound to a
    gather): *e* is then affine only where ``v`` does not occur.  As the vector emitter, an atom
    that contains a stepping variable makes *e* non-affine even when its coefficient cancels.
    """
    if e.dtype != dtypes.INDEX:
        return None if any(v in steps for v in free_vars(e)) else 0
    total = 0
    for atom, k in terms_of(e).items():
        if atom is None:
            continue
        if type(atom) is E.Var and atom in steps:
            step = steps[atom]
            if step is None:
                return None
            total += k * step
        elif any(v in steps for v in free_vars(atom)):
            return None
    return dtypes.wrap(total, dtypes.INDEX)


def is_affine(e):
    """Whether int64 *e* is ``sum(k * var) + c``: every atom of its linear form a variable."""
    return e.dtype == dtypes.INDEX and all(a is None or type(a) is E.Var for a in terms_of(e))


def from_linear(terms):
    """The expression of a linear form (consumes its constant)."""
    const = terms.pop(None, 0)
    result = None
    for atom, c in terms.items():
        if c == 0:
            continue
        term = atom if c in (1, -1) else E.Binary(BinOp.MUL, atom, _const(abs(c)), dtypes.INDEX)
        if result is None:
            result = term if c > 0 else E.Binary(BinOp.MUL, atom, _const(c), dtypes.INDEX) \
                if c != -1 else E.Binary(BinOp.SUB, _const(0), atom, dtypes.INDEX)
        else:
            result = E.Binary(BinOp.ADD if c > 0 else BinOp.SUB, result, term, dtypes.INDEX)
    if result is None:
        return _const(const)
    if const:
        result = E.Binary(BinOp.ADD if const > 0 else BinOp.SUB, result, _const(abs(const)),
                          dtypes.INDEX)
    return result


def split_multiple(e, c):
    """Write int64 *e* as ``c * q + r``: returns (q, r) with q built from terms divisible by c."""
    q, r = Terms(), Terms()
    for atom, k in terms_of(e).items():
        if k % c == 0:
            q.add(atom, k // c)
        else:
            r.add(atom, k)
    return from_linear(q), from_linear(r)


def recombine(terms, floor_view, make_mod):
    """Fold the div/mod pairs of a fused index back into their dividend, in place.

    ``floor_view(atom)`` is ``(op, y, c)`` when *atom* is ``y // c`` or ``y % c`` (op
    ``BinOp.FLOORDIV`` or ``BinOp.MOD``: floor semantics, constant ``c > 0``), else None;
    ``make_mod(y, c)`` builds ``y % c``.
    """
    while _recombine_once(terms, floor_view, make_mod):
        pass


def _recombine_once(terms, floor_view, make_mod):
    mods = [(m, km) for m, km in terms.items()
            if isinstance(m, E.Binary) and (m.op is BinOp.MOD or m.op is BinOp.TMOD) and km != 0]
    if not mods:
        return False
    views = {a: floor_view(a) for a in terms if a is not None}
    for m, km in mods:
        vm = views[m]
        if vm is None:
            continue
        _, y, c = vm
        key = structural_key(y)
        for d, kd in terms.items():
            vd = views.get(d)
            if d is m or vd is None or kd != km * c:
                continue
            if vd[0] is BinOp.FLOORDIV and vd[2] == c and structural_key(vd[1]) == key:
                del terms[m], terms[d]                     # k*c*(y // c) + k*(y % c) = k*y
                linear(y, terms, km)
                return True
            inner = floor_view(vd[1]) if vd[0] is BinOp.MOD else None
            if inner is not None and inner[0] is BinOp.FLOORDIV and inner[2] == c \
                    and structural_key(inner[1]) == key:
                del terms[m], terms[d]         # k*c*((y // c) % b) + k*(y % c) = k*(y % (c*b))
                linear(make_mod(y, c * vd[2]), terms, km)
                return True
    return False
