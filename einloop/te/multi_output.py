"""Declaration checks of multi-output computes and tuple reductions.

``te.compute(shape, lambda i: (e0, e1))`` declares one operation with two outputs, computed in
one loop nest.  Its parts share the loops, so they must agree on them: either every part is a
reduction over the same axes, under the same ``where=`` (the components of one tuple
reduction such as argmax, or independent reducers such as a sum and a max of one row), or no
part is one at the top (a reduction nested in arithmetic is lifted into its own stage as for
one output).  A component of a tuple reduction only makes sense together with its siblings,
since each one's combine reads all of them: it is never used inside arithmetic or alone.
"""
from __future__ import annotations

from ..errors import TEError
from ..ir import expr as E
from ..ir.visit import structural_key, walk
from .tuple_reduce import ReducerPart, is_part


def check_parts_whole(name, body, top):
    """A TEError if *body* (an expression or a tuple) uses a component of a tuple reduction
    anywhere but as one of the whole parts *top*."""
    whole = set(map(id, top))
    for x in walk(body):
        if is_part(x) and id(x) not in whole:
            comb = x.reducer.combiner
            raise TEError(
                f"compute {name!r}: component {x.reducer.index} of the tuple reduction "
                f"{comb.name} is used inside an expression or alone; a tuple reduction's "
                f"values are computed together: return all {len(comb.dtypes)} of them from the "
                f"function (a, b = te.compute(shape, lambda i: {comb.name}(...))) and compute "
                "with those tensors in another compute")


def check_reduction_parts(name, parts):
    """A TEError unless the reduction *parts* of a multi-output compute can share one loop
    nest: all reductions, over the same axes and condition; the components of a tuple
    reduction all present, in order, and not mixed with other reducers."""
    kinds = ["a reduction" if isinstance(p, E.Reduce) else "not a reduction" for p in parts]
    if len(set(kinds)) > 1:
        j = kinds.index("not a reduction")
        raise TEError(
            f"compute {name!r}: output {j} is not a reduction but output "
            f"{kinds.index('a reduction')} is; the outputs of one compute share its loops, so "
            "either all are reductions over the same axes or none is: declare the "
            "non-reduction part as its own compute")
    first = parts[0]
    for j, p in enumerate(parts[1:], 1):
        if tuple(map(id, p.axes)) != tuple(map(id, first.axes)):
            raise TEError(
                f"compute {name!r}: output {j} reduces over ({_axes(p)}) but output 0 over "
                f"({_axes(first)}); the outputs of one compute share its loops: reduce every "
                "output over the same axes, or declare one compute per reduction")
        if not _same_condition(p.condition, first.condition):
            raise TEError(
                f"compute {name!r}: output {j} has the condition where={p.condition} but output "
                f"0 has where={first.condition}; the outputs of one compute reduce over the "
                "same points: give them the same where=")
    _check_tuple_parts(name, parts)


def _check_tuple_parts(name, parts):
    combiners = [p.reducer.combiner for p in parts if isinstance(p.reducer, ReducerPart)]
    if not combiners:
        return
    comb = combiners[0]
    n = len(comb.dtypes)
    whole = len(parts) == n and all(
        isinstance(p.reducer, ReducerPart) and p.reducer.combiner is comb and p.reducer.index == j
        for j, p in enumerate(parts))
    if not whole:
        raise TEError(
            f"compute {name!r}: its outputs must be exactly the {n} values of the tuple "
            f"reduction {comb.name}, in order (got {', '.join(_part_name(p) for p in parts)}); "
            "declare other reductions as computes of their own")


def _part_name(p):
    return p.reducer.name if isinstance(p, E.Reduce) else str(p)


def _axes(reduce):
    return ", ".join(a.name for a in reduce.axes)


def _same_condition(a, b):
    if a is None or b is None:
        return a is b
    return structural_key(a) == structural_key(b)
