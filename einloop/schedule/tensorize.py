"""``s[T].tensorize(axis, intrin)``: run the loops of a stage from *axis* inwards as one call of a
tensor intrinsic (:class:`~einloop.te.tensor_intrin.TensorIntrin`).

The loops from *axis* inwards must compute exactly the intrinsic's reduction:

- *loops*: after dropping loops (and intrinsic axes) of extent 1, the data loops pair in order
  with the intrinsic's data axes and the reduction loops with its reduction axes, extent for
  extent; none of them is annotated, no loop outside is vectorized, no stage is computed
  inside, and no split inside leaves a partial tile;
- *body*: the stage is a ``te.sum`` reduction without ``where=``, whose expression has the
  intrinsic's shape node for node (operators, casts, constants, dtypes), an operand read where
  the intrinsic reads a tile;
- *layout*: each operand (and the output) moves, per step of each of those loops, by as many
  elements as the intrinsic's dense tile does along the paired axis; the first element of each
  tile is what the call is given.

:func:`mismatch` answers from the schedule alone, without raising (what the auto-scheduler asks);
the layout there is that of whole tensors (but for the output of a stage that is not an
output of the schedule, which may be computed at a loop, its buffer then its region's: checked
at lowering).  Lowering checks again on the real buffers (a stage
computed at a loop has a buffer of its region's shape) and emits the
:class:`~einloop.ir.stmt.IntrinsicCall` (:func:`tensorized_nest`); the reduction's
initialisation stays ordinary code, unless the intrinsic has a reset form: then each tile's first
call (on the first iteration of the reduction loops outside it) is the reset form, and there is
no initialisation.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arith import simplify, substitute
from ..arith.linear import affine_in
from ..errors import ScheduleError
from ..ir import expr as E
from ..ir.stmt import ForKind, IfThenElse, IntrinsicCall
from ..ir.visit import children, free_vars
from ..te.reduce import sum as te_sum
from ..te.tensor import ComputeOp, IterKind
from ..te.tensor_intrin import TensorIntrin, operand_index
from .bound import pass_up, split_guards
from .stage import AttachKind


@dataclass(frozen=True, eq=False)
class Tensorized:
    """A stage's tensorize directive: the loop where the intrinsic's tile starts."""
    axis: object          # IterVar: a leaf loop of the stage
    intrin: TensorIntrin


class Mismatch(Exception):
    """Why a loop nest does not compute an intrinsic (internal: turned into a message)."""


def mismatch(stage, axis, intrin) -> str | None:
    """Why the loops of *stage* from leaf loop *axis* inwards do not compute *intrin* (a
    sentence saying what differs and what would fit), or None when they do, judged on the
    schedule as it stands (operands laid out as whole tensors).  Never raises for a mismatch."""
    try:
        _check_schedule(stage, axis, intrin)
    except Mismatch as e:
        return str(e)
    return None


def _check_schedule(stage, axis, intrin):
    if not isinstance(intrin, TensorIntrin):
        raise Mismatch(f"expected a te.TensorIntrin, got {intrin!r}")
    if not isinstance(stage.op, ComputeOp) or stage.op.num_outputs != 1:
        raise Mismatch(f"stage {stage.name} is not a single-output compute")
    pos = next((n for n, iv in enumerate(stage.leaf_iter_vars) if iv is axis), None)
    if pos is None:
        raise Mismatch(f"{getattr(axis, 'name', axis)!r} is not a current loop of stage "
                       f"{stage.name} (its loops: "
                       f"{', '.join(iv.name for iv in stage.leaf_iter_vars)})")
    pairs = body_pairs(stage, stage.op.body, intrin)
    ext = {iv: iv.extent for iv in stage.all_iter_vars}
    pairing = loop_pairing(stage, pos, intrin, ext)
    leaves = stage.leaf_iter_vars
    vals = pass_up(stage, {iv: iv.var for iv in leaves}, ext)
    inner = {iv.var for iv in leaves[pos:]}
    whole_tile_condition([g for g in split_guards(stage, vals, ext) if free_vars(g) & inner],
                         {iv.var: ext[iv] for iv in leaves[pos:]})
    ranges = {iv.var: (0, ext[iv] - 1) for iv in leaves if isinstance(ext[iv], int)}
    axes = {iv.var: vals[iv] for iv in tuple(stage.op.axis) + tuple(stage.op.reduce_axis)}
    out = E.TensorRead(stage.op.output(), tuple(iv.var for iv in stage.op.axis),
                       stage.op.output_dtype())
    # a stage computed at a loop (an accumulator) has a buffer of its region's shape, known
    # once bounds are inferred: lowering checks its tile then; so for any stage that is not
    # an output (it may be computed at a loop later); an output's buffer is the tensor
    tiles = [] if stage.attach is AttachKind.AT or not stage.is_output else [
        (stage.name, operand_index(substitute(out, axes), ranges), None)]
    tiles += [(r.tensor.name, operand_index(substitute(r, axes), ranges), q) for r, q in pairs]
    tile_layouts(tiles, pairing, intrin, ranges)


def loop_pairing(stage, pos, intrin, ext) -> dict:
    """``{intrinsic axis var: the stage's leaf loop}`` for the loops from *pos* inwards
    (intrinsic axes of extent 1 map to None); raises Mismatch."""
    leaves = stage.leaf_iter_vars
    for iv in leaves[:pos]:
        if stage.annotations.get(iv) is ForKind.VECTORIZED:
            raise Mismatch(f"loop {leaves[pos].name} is nested in the vectorized loop "
                           f"{iv.name}; the intrinsic works on whole tiles, not lanes: "
                           f"vectorize a loop inside the tile's loops' outside, or none")
    for iv in leaves[pos:]:
        kind = stage.annotations.get(iv)
        if kind is not None:
            raise Mismatch(f"loop {iv.name} is {kind.value}, but the intrinsic replaces it; "
                           "annotate only loops outside the tensorized ones")
        if any(p.axis is iv for p in stage.prefetches):
            raise Mismatch(f"loop {iv.name} prefetches, but the intrinsic replaces it; "
                           "prefetch at a loop outside the tensorized ones")
    out = {}
    for kind, axes in ((IterKind.DATA, intrin.op.axis), (IterKind.REDUCE, intrin.op.reduce_axis)):
        mine = [iv for iv in leaves[pos:] if iv.kind is kind and ext[iv] != 1]
        theirs = [iv for iv in axes if iv.extent != 1]
        what = "data" if kind is IterKind.DATA else "reduction"
        if len(mine) != len(theirs):
            raise Mismatch(
                f"the loops from {leaves[pos].name} inwards have {len(mine)} {what} loop(s) "
                f"({', '.join(f'{iv.name}:{ext[iv]}' for iv in mine) or 'none'}), the "
                f"intrinsic {intrin.name} has {len(theirs)} "
                f"({', '.join(f'{iv.name}:{iv.extent}' for iv in theirs) or 'none'}); split and "
                "reorder so that exactly the tile's loops are innermost")
        for a, b in zip(mine, theirs):
            if ext[a] != b.extent:
                raise Mismatch(f"loop {a.name} has extent {ext[a]}, the intrinsic {intrin.name}'s "
                               f"{what} axis {b.name} has {b.extent}; split by {b.extent}")
            out[b.var] = a
        out.update((iv.var, None) for iv in axes if iv.extent == 1)
    return out


def body_pairs(stage, body, intrin) -> list:
    """``[(stage read, intrinsic read)]`` when *body* (the stage's) has the intrinsic's
    reduction's shape node for node; raises Mismatch saying where it differs."""
    red = intrin.reduce
    if type(body) is not E.Reduce:
        raise Mismatch(f"stage {stage.name} is not a reduction; the intrinsic {intrin.name} "
                       f"accumulates a te.sum ({intrin.signature()})")
    if body.reducer is not te_sum:
        raise Mismatch(f"stage {stage.name} is a te.{body.reducer.name} reduction; the "
                       f"intrinsic {intrin.name} accumulates a te.sum")
    if body.condition is not None:
        raise Mismatch(f"stage {stage.name}'s reduction has a where= condition; the intrinsic "
                       "computes every element of its tile")
    if body.dtype != red.dtype:
        raise Mismatch(f"stage {stage.name} accumulates {body.dtype}, the intrinsic "
                       f"{intrin.name} {red.dtype}")
    pairs = []
    _same(body.source, red.source, pairs, stage, intrin)
    return pairs


def _same(a, b, pairs, stage, intrin):
    if type(b) is E.TensorRead:
        if type(a) is not E.TensorRead:
            raise Mismatch(f"stage {stage.name} computes {a} where the intrinsic {intrin.name} "
                           f"reads its operand {b.tensor.name}")
        if a.dtype != b.dtype:
            raise Mismatch(f"operand {a.tensor.name} of stage {stage.name} is {a.dtype}, the "
                           f"intrinsic {intrin.name}'s {b.tensor.name} is {b.dtype} "
                           f"({intrin.signature()})")
        pairs.append((a, b))
        return
    same = type(a) is type(b) and a.dtype == b.dtype and getattr(a, "op", None) is getattr(
        b, "op", None) and getattr(a, "name", None) == getattr(b, "name", None)
    if same and type(a) is E.Const:
        same = a.value == b.value
    if not same:
        raise Mismatch(f"stage {stage.name} computes {a} ({a.dtype}) where the intrinsic "
                       f"{intrin.name} computes {b} ({b.dtype}): {intrin.signature()}")
    for x, y in zip(children(a), children(b)):
        _same(x, y, pairs, stage, intrin)


def tile_layouts(tiles, pairing, intrin, ranges) -> list:
    """``(flat index of its first element, strides)`` of each tile, the strides (elements,
    one per dimension of the intrinsic's operand but the last) those of a strided intrinsic,
    else ``()``; *tiles* are ``(name, flat index in the stage's loops, intrinsic read or None
    for the output)``.  Raises Mismatch where a tile's elements are not laid out as the
    intrinsic's."""
    zero = {leaf.var: E.const(0, "int64") for leaf in pairing.values() if leaf is not None}
    out = []
    for name, flat, q in tiles:
        if q is None:
            want = E.TensorRead(intrin.op.output(), tuple(iv.var for iv in intrin.op.axis),
                                intrin.op.output_dtype())
        else:
            want = q
        strides = _strides(name, flat, q, want, pairing, intrin) if intrin.strided else (
            _dense(name, flat, q, want, pairing, intrin))
        out.append((simplify(substitute(flat, zero), ranges), strides))
    return out


def _dense(name, flat, q, want, pairing, intrin):
    """Check that tile *name* (flat index *flat*) moves along each loop as the intrinsic's
    dense tile *want* does; returns ``()``."""
    theirs = operand_index(want)
    for ax, leaf in pairing.items():
        if leaf is None:
            continue
        need = affine_in(theirs, ax)[0]
        got = affine_in(flat, leaf.var)
        if got is None:
            raise Mismatch(f"{_what(q, name)} is read at an index that is not affine in loop "
                           f"{leaf.name} ({flat}); the intrinsic needs a stride of {need}")
        if got[0] != need:
            raise Mismatch(
                f"{_what(q, name)} moves by {got[0]} element(s) per step of loop {leaf.name}, "
                f"the intrinsic {intrin.name}'s tile {want.tensor.name}"
                f"{list(want.tensor.shape)} by {need} (along its axis {_axis_name(intrin, ax)})"
                f"; lay {name} out as the tile: pack it (s.pack, or a te.compute copy in the "
                "tile's layout) so that the tile is dense")
    return ()


def _strides(name, flat, q, want, pairing, intrin) -> tuple:
    """The strides of tile *name* (flat index *flat*) along the dimensions of the strided
    intrinsic's operand *want* but the last: each loop paired with an axis moves the tile by
    a multiple of that axis's coefficient in the one dimension it indexes; the last dimension
    contiguous."""
    shape = want.tensor.shape
    strides = [None] * len(shape)
    for ax, leaf in pairing.items():
        if leaf is None:
            continue
        got = affine_in(flat, leaf.var)
        if got is None:
            raise Mismatch(f"{_what(q, name)} is read at an index that is not affine in loop "
                           f"{leaf.name} ({flat})")
        coefs = [(affine_in(ix, ax) or (None,))[0] for ix in want.indices]
        dims = [(d, c) for d, c in enumerate(coefs) if c]      # the declaration checked: one
        if not dims:
            if got[0] != 0:
                raise Mismatch(f"{_what(q, name)} moves by {got[0]} element(s) per step of loop "
                               f"{leaf.name}, but the intrinsic {intrin.name}'s tile "
                               f"{want.tensor.name} does not depend on its axis "
                               f"{_axis_name(intrin, ax)}")
            continue
        (d, coef), = dims
        step, rest = divmod(got[0], coef)
        if rest or step < 0 or strides[d] not in (None, step):
            raise Mismatch(
                f"{_what(q, name)} moves by {got[0]} element(s) per step of loop {leaf.name}, "
                f"which is not a stride of dimension {d} of the intrinsic {intrin.name}'s tile "
                f"{want.tensor.name}{list(shape)} (indexed {want.indices[d]}"
                f"{'' if strides[d] is None else f', stride {strides[d] * coef} along another loop'}"
                f"); lay {name} out so that each dimension of the tile has one stride")
        strides[d] = step
    if strides[-1] not in (None, 1):
        raise Mismatch(f"{_what(q, name)} moves by {strides[-1]} elements along the last "
                       f"dimension of the intrinsic {intrin.name}'s tile {want.tensor.name}"
                       f"{list(shape)}, whose elements it reads contiguously; pack {name} (s.pack) "
                       "so that the tile's rows are contiguous")
    return tuple(0 if x is None else x for x in strides[:-1])


def whole_tile_condition(guards, inner):
    """The condition under which *guards* (those of the tile's loops: non-dividing splits, rows
    past a symbolic extent) hold on every iteration of the tile, *inner* mapping its loop
    variables to their extents: each guard is ``e < n`` with ``e`` affine and non-decreasing
    in those loops, so it holds on the whole tile when it holds on the last iteration.  None
    when there is no guard.  A partial tile runs the loops as they are instead of the call
    (:func:`tensorized_nest`).  Raises Mismatch for a guard of another form."""
    last = {v: E.const(n - 1, "int64") for v, n in inner.items() if isinstance(n, int)}
    out = None
    for g in guards:
        ok = type(g) is E.Compare and g.op is E.CmpOp.LT and not (free_vars(g.b) & set(inner))
        steps = [affine_in(g.a, v) for v in inner] if ok else []
        if not ok or len(last) != len(inner) or any(s is None or s[0] < 0 for s in steps):
            raise Mismatch(f"the tile's loops are guarded by {g}, which einloop cannot check "
                           "once per tile; split by factors that divide the extents")
        whole = E.Compare(E.CmpOp.LT, simplify(substitute(g.a, last)), g.b)
        out = whole if out is None else E.Logical(E.LogicOp.AND, out, whole)
    return out


def _what(q, name):
    return f"the output {name}" if q is None else f"operand {name}"


def _axis_name(intrin, var):
    return next(iv.name for iv in tuple(intrin.op.axis) + tuple(intrin.op.reduce_axis)
                if iv.var is var)


def check_tensorize(stage, axis, intrin):
    """Raise a ScheduleError unless :func:`mismatch` finds none (``s[T].tensorize``)."""
    why = mismatch(stage, axis, intrin)
    if why is not None:
        raise ScheduleError(f"tensorize on stage {stage.name} at loop "
                            f"{getattr(axis, 'name', axis)} with {getattr(intrin, 'name', intrin)}"
                            f": {why}")


# lowering -----------------------------------------------------------------------------------------

def tensorized_nest(builder, stage, loops, pos, plain, reset=False):
    """What replaces loops *pos* inwards of *stage* (a NestBuilder's :class:`_StageLoops`
    *loops*): the intrinsic's call, checked on the real buffers, or where the last tile of a
    non-dividing split is partial, ``if whole tile: call else: plain()`` (the loops as they
    are, for the partial tiles).  *reset*: call the intrinsic's reset form (which stores the
    tile's reduction rather than adding to it).  Raises ScheduleError when the loops do not
    fit."""
    intrin = stage.tensorized.intrin
    try:
        call, whole = _call(builder, stage, loops, pos, intrin, reset)
    except Mismatch as e:
        raise ScheduleError(f"tensorize on stage {stage.name} at loop {loops.leaves[pos].name} "
                            f"with {intrin.name}: {e}") from None
    return call if whole is None else IfThenElse(whole, call, plain())


def resets(stage) -> bool:
    """Does *stage*'s tensorize directive have an intrinsic with a reset form?"""
    return stage.tensorized is not None and stage.tensorized.intrin.reset_body is not None


def _call(builder, stage, loops, pos, intrin, reset):
    pairs = body_pairs(stage, builder.bodies[stage], intrin)
    pairing = loop_pairing(stage, pos, intrin, loops.ext)
    inner = {iv.var for iv in loops.leaves[pos:]}
    whole = whole_tile_condition([g for g, lv in loops.guards
                                  if lv >= pos or free_vars(g) & inner],
                                 {iv.var: loops.ext[iv] for iv in loops.leaves[pos:]})
    for iv in loops.leaves[pos:]:
        if builder.attached.get(id(iv)):
            raise Mismatch(f"stage {builder.attached[id(iv)][0].name} is computed at loop "
                           f"{iv.name}, inside the tile; compute it outside")
    ranges = {iv.var: (0, loops.ext[iv] - 1) for iv in loops.leaves
              if isinstance(loops.ext[iv], int)}
    op = stage.origin_op
    out_buf = builder.buffers[id(op)]
    tiles, bufs = [], [out_buf]
    tiles.append((stage.name, simplify(builder.output_index(stage, loops), ranges), None))
    by_tile = {id(q.tensor.op): r for r, q in pairs}
    for t in intrin.inputs:
        r = by_tile[id(t.op)]
        q = next(q for _, q in pairs if q.tensor.op is t.op)
        ld = builder._loads(substitute(r, loops.absolute))
        if type(ld) is not E.Load:
            raise Mismatch(f"operand {r.tensor.name} is not read from memory as {r.dtype} "
                           "(it is stored narrowed); tensorize reads tiles from buffers")
        bufs.append(ld.buffer)
        tiles.append((r.tensor.name, simplify(ld.index, ranges), q))
    layouts = tile_layouts(tiles, pairing, intrin, ranges)
    shapes = (intrin.shape,) + tuple(x.shape for x in intrin.inputs)
    spans = tuple(_span(shape, strides) for shape, (_, strides) in zip(shapes, layouts))
    symbol, definition = ((intrin.reset_symbol, intrin.reset_definition) if reset
                          else (intrin.symbol, intrin.definition))
    return IntrinsicCall(symbol, definition, intrin.declarations, intrin.features, tuple(bufs),
                         tuple(base for base, _ in layouts), spans,
                         tuple(strides for _, strides in layouts) if intrin.strided else ()), whole


def _span(shape, strides):
    """The elements from a tile's first to its last: its size when dense (*strides* empty)."""
    if not strides:
        n = 1
        for d in shape:
            n *= d
        return n
    return 1 + (shape[-1] - 1) + sum((d - 1) * s for d, s in zip(shape, strides))
