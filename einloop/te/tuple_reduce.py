"""Tuple reductions: a commutative reducer over several values at once (argmax, Welford).

``reducer((idx, val), axis=k)`` with a :func:`~einloop.te.reduce.comm_reducer` whose
``fcombine`` takes two tuples and returns one, and whose ``fidentity`` takes one dtype per
component, builds one :class:`~einloop.ir.expr.Reduce` per component.  Each has a
:class:`ReducerPart` as its reducer; the parts of one call share a :class:`TupleCombiner`,
which holds the combine as expressions of two tuples of variables (the accumulated values
``x`` and the new ones ``y``) and the identities.  The parts are returned together as a
:class:`ReduceTuple`, which ``te.compute`` turns into a multi-output stage computing every
component in one loop nest.

The combine of a tuple reads every component of both tuples, so lowering computes all the new
values from the old accumulators before storing any of them (see
:mod:`einloop.schedule.nest`).  Being expressions, the combiner pickles without the user's
functions, so an operator with a user-declared tuple reducer can go to build workers.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InternalError, TEError
from ..ir import dtypes
from ..ir.expr import Expr, Reduce, Var, as_expr, const
from ..ir.visit import substitute, transform


@dataclass(frozen=True, eq=False)
class TupleCombiner:
    """A tuple reducer's combine and identity, as expressions: ``combined[j]`` is component
    *j* of ``fcombine(lhs, rhs)``; ``identities[j]`` that of ``fidentity(*dtypes)``."""
    name: str
    dtypes: tuple
    lhs: tuple
    rhs: tuple
    combined: tuple
    identities: tuple

    def retyped(self, fn) -> TupleCombiner:
        """This combiner with every expression rewritten by *fn* (a :func:`transform`
        function, e.g. one that widens float32 to float64), its operand variables with them."""
        memo = {}
        again = [tuple(transform(e, fn, memo) for e in group)
                 for group in (self.lhs, self.rhs, self.combined, self.identities)]
        kinds = tuple(v.dtype for v in again[0])
        return TupleCombiner(self.name, kinds, *again)

    def combine(self, accumulated, values) -> tuple:
        """Every component of ``fcombine(accumulated, values)``, each computed from the values
        given (none sees another's result)."""
        kinds = tuple(e.dtype for e in accumulated)
        if kinds != self.dtypes:
            raise InternalError(f"tuple reducer {self.name} of {self.dtypes} combines values of "
                                f"{kinds}; a pass that changes dtypes must retype it")
        mapping = dict(zip(self.lhs, accumulated))
        mapping.update(zip(self.rhs, values))
        return tuple(substitute(e, mapping) for e in self.combined)


@dataclass(frozen=True, eq=False)
class ReducerPart:
    """The reducer of component *index* of a tuple reduction: it combines only together with
    its siblings (the other components of the same :class:`TupleCombiner`)."""
    combiner: TupleCombiner
    index: int

    @property
    def name(self) -> str:
        return f"{self.combiner.name}.{self.index}"

    def identity(self, dtype) -> Expr:
        return self.combiner.identities[self.index]

    def combine(self, x, y):
        raise InternalError(f"reducer {self.name} is one component of a tuple reduction; "
                            "combine all its components with its TupleCombiner")

    def __repr__(self):
        return f"ReducerPart({self.name})"


class ReduceTuple(tuple):
    """The components of one tuple reduction, as ``te.compute``'s function returns them.
    Arithmetic on it is an error: it is several values, each an output of the compute."""

    def _no_arith(self, *_):
        name = self[0].reducer.combiner.name if self else "reduce"
        raise TEError(f"the tuple reduction {name}(...) gives {len(self)} values and cannot be "
                      f"used in arithmetic; return it whole from te.compute (one output per "
                      f"value: idx, val = te.compute(shape, lambda i: {name}(...))) and compute "
                      "with its outputs in another compute")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arith
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _no_arith
    __neg__ = __pos__ = __lt__ = __le__ = __gt__ = __ge__ = _no_arith


def is_part(reduce) -> bool:
    """Is *reduce* one component of a tuple reduction?"""
    return isinstance(reduce, Reduce) and isinstance(reduce.reducer, ReducerPart)


def tuple_reduce(reducer, sources, axes, where) -> ReduceTuple:
    """The Reduce nodes of *reducer* (a CommReducer with tuple functions) over *sources*."""
    name = reducer.name
    sources = tuple(as_expr(s) for s in sources)
    if not sources:
        raise TEError(f"reducer {name}: the tuple of values to reduce is empty")
    for s in sources:
        if s.dtype == dtypes.BOOL:
            raise TEError(f"reducer {name}: cannot reduce a boolean expression {s}; cast it "
                          "with .astype('int32') first")
    kinds = tuple(s.dtype for s in sources)
    combiner = _combiner(reducer, kinds)
    return ReduceTuple(Reduce(ReducerPart(combiner, j), s, tuple(axes), where, s.dtype)
                       for j, s in enumerate(sources))


def _combiner(reducer, kinds) -> TupleCombiner:
    """Call the user's functions once on symbolic operands and check what they return."""
    n, name = len(kinds), reducer.name
    lhs = tuple(Var(f"x{j}", dt) for j, dt in enumerate(kinds))
    rhs = tuple(Var(f"y{j}", dt) for j, dt in enumerate(kinds))
    combined = _call(name, "fcombine(x, y)", lambda: reducer._combine(lhs, rhs))
    combined = _check_values(name, "fcombine", combined, kinds,
                             f"it takes two {n}-tuples and must return one")
    identities = _call(name, f"fidentity({', '.join(kinds)})", lambda: reducer._identity(*kinds))
    identities = _check_values(name, "fidentity", identities, kinds,
                               f"it takes the {n} dtypes and must return one identity per "
                               "component")
    return TupleCombiner(name, kinds, lhs, rhs, combined, identities)


def _call(name, what, fn):
    try:
        return fn()
    except TEError as exc:          # a declaration error inside the user's function: say where
        raise TEError(f"reducer {name}: in {what} of a tuple reduction: {exc}") from None
    except Exception as exc:        # the user's function failed: say which, on what
        raise TEError(f"reducer {name}: {what} failed for a tuple reduction: "
                      f"{type(exc).__name__}: {exc}; fcombine takes two tuples (x, y) and "
                      "returns a tuple, fidentity takes one dtype per component") from None


def _check_values(name, fn, values, kinds, rule):
    """*values* (what *fn* returned) as expressions of the component dtypes *kinds*."""
    if not isinstance(values, (tuple, list)) or len(values) != len(kinds):
        got = f"{len(values)} value(s)" if isinstance(values, (tuple, list)) else \
            f"the single value {values!r}"
        raise TEError(f"reducer {name}: {fn} returned {got} for a reduction of {len(kinds)} "
                      f"values; {rule}")
    out = []
    for j, (v, dt) in enumerate(zip(values, kinds)):
        e = v if isinstance(v, Expr) else const(v, dt) if _is_number(v) else as_expr(v)
        if e.dtype != dt:
            raise TEError(f"reducer {name}: component {j} of {fn} has dtype {e.dtype} but the "
                          f"value reduced there has dtype {dt}; each component keeps its "
                          f"dtype (cast with .astype('{dt}'))")
        out.append(e)
    return tuple(out)


def _is_number(v):
    import numbers
    return isinstance(v, numbers.Number) and not isinstance(v, bool)
