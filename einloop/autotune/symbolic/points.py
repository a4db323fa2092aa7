"""Size points of an operator with symbolic extents, and the questions asked of their records.

A symbolic operator is tuned at *size points* (``{extent name: int}``): bound there
(``te.symbolic.bind_sizes``: the same names, ints for the extents) it is an ordinary static
operator with a task of its own, created with a :class:`~..task.size_point.SizePoint` that its
records carry (``record.size_point``: the symbolic operator's key, the sizes, and for a cross-size
measurement its round).  The searches (:mod:`.tune`), the cross-size round (:mod:`.cross_sizes`)
and the dispatch (:mod:`.dispatch`) all ask a record database the questions below.
"""
from __future__ import annotations

import itertools
import numbers

from ...errors import TuningError
from ...te.dag import ComputeDAG
from ...te.bind import bind_sizes, shape_vars_of
from ..log.database import Order
from ..task.auto import AutoTask
from ..task.base import outputs_of
from ..task.size_point import SizePoint

#: sizes tuned when the user names none (per symbolic extent)
DEFAULT_HINTS = (1, 16, 256, 2048)
#: at most this many size points (the product over extents) are tuned
MAX_POINTS = 16


def has_symbolic_extents(tensors) -> bool:
    """Does the operator of *tensors* have a symbolic extent?"""
    return bool(shape_vars_of(tensors))


def extent_names(tensors) -> list:
    """The names of the operator's symbolic extents, in order."""
    return [v.name for v in shape_vars_of(tensors)]


def symbolic_key(tensors) -> str:
    """The symbolic operator's structural hash: what its records are grouped by."""
    return ComputeDAG(outputs_of(tensors)).structural_hash()


def hint_points(tensors, shape_hints=None) -> list:
    """The size points to tune: ``[{name: int}]``, every combination of each extent's hints
    (``shape_hints``: ``{name: [sizes]}``; unnamed extents get DEFAULT_HINTS)."""
    svars = shape_vars_of(tensors)
    names = [v.name for v in svars]
    hints = {} if shape_hints is None else shape_hints
    if not isinstance(hints, dict):
        raise TuningError(f"shape_hints must be a dict {{extent name: [sizes]}}, got {hints!r}")
    unknown = sorted(set(hints) - set(names))
    if unknown:
        raise TuningError(f"shape_hints names {', '.join(map(repr, unknown))}, which the operator "
                          f"has no symbolic extent of; its extents are {', '.join(names)}")
    per = []
    for v in svars:
        sizes = hints.get(v.name, DEFAULT_HINTS)
        if isinstance(sizes, numbers.Integral):
            sizes = [sizes]
        try:
            sizes = sorted(set(sizes))
        except TypeError:
            raise TuningError(f"shape_hints[{v.name!r}] must be a list of sizes, got "
                              f"{sizes!r}") from None
        low = max(1, v.min_value)
        bad = [x for x in sizes if isinstance(x, bool) or not isinstance(x, numbers.Integral)
               or x < low]
        if not sizes or bad:
            raise TuningError(f"shape_hints[{v.name!r}] must be a non-empty list of ints >= "
                              f"{low}, got {hints.get(v.name)!r}")
        per.append([int(x) for x in sizes])
    points = [dict(zip(names, combo)) for combo in itertools.product(*per)]
    if len(points) > MAX_POINTS:
        raise TuningError(f"shape_hints give {len(points)} size combinations ("
                          f"{' x '.join(str(len(p)) for p in per)}); tune at most {MAX_POINTS}: "
                          "name fewer sizes per extent")
    return points


def bound_task(tensors, sizes, target, key=None, round_id=None, deployed=False) -> AutoTask:
    """The AutoTask of the operator bound at *sizes*, a point of the symbolic one (its
    :class:`SizePoint`: *key*, default the operator's; *round_id* of a cross-size round;
    *deployed*: build candidates on the symbolic declaration, as the dispatch deploys them)."""
    point = SizePoint(key or symbolic_key(tensors),
                      tuple((name, int(sizes[name])) for name in extent_names(tensors)),
                      round_id, tuple(tensors) if deployed else None)
    return AutoTask.of_tensors(bind_sizes(tensors, sizes), target, point=point)


# what the records of a symbolic operator say -----------------------------------------------
def size_of(record, names):
    """The sizes a record of a symbolic operator was measured at, as a tuple in *names*'
    order (None if it does not size them all)."""
    values = [int(v) for _, v in record.size_point.get("sizes", [])]
    return tuple(values) if len(values) == len(names) else None


def round_of(record):
    """The cross-size round that measured *record* (None for a search's)."""
    return record.size_point.get("round")


def searched(record) -> bool:
    """Was *record* measured by a search (not by a cross-size round)?"""
    return "round" not in record.size_point


def point_records(db, key, target, ok_only=True, order=Order.FASTEST) -> list:
    """The records of the symbolic operator *key* on *target* in the store *db*."""
    return db.query(symbolic_key=key, target=target, ok_only=ok_only, order=order)


def latest_round(db, key, target):
    """The id of the newest cross-size round of the operator *key* on *target* in *db* (None if
    none)."""
    rounds = [round_of(r) for r in point_records(db, key, target, ok_only=False,
                                                 order=Order.WRITTEN)
              if isinstance(round_of(r), int)]
    return max(rounds, default=None)
