"""``s.pack(T, axis, factor)``: read tensor *T* through a copy in a blocked layout.

The copy ``T.pack`` has *T*'s shape with dimension *axis* (extent ``n``) split by *factor*: the
outer part ``ceil(n / factor)`` moves to the front, the inner part ``factor`` to the end, so
``B[K, N]`` packed on axis 1 by 32 becomes ``B.pack[ceil(N/32), K, 32]`` with
``B.pack[x, k, z] = B[k, 32x + z]`` (0 past the end of *N*).  A consumer whose inner tile runs
along *axis* then reads ``factor`` contiguous elements per step instead of a strided column:
the B panel of a GEMM, the output-channel block of conv2d weights (``examples/gemm.py`` and
``examples/conv2d.py`` declare such copies by hand).

Every stage reading *T* is rewritten to read ``T.pack[e // f, ..., e % f]`` for an index ``e``
on *axis*; lowering folds these to ``[jo, ..., ji]`` when ``e`` is a loop split by the same
factor.  The copy is an ordinary stage (parallel, vectorize, compute_at).

Rules.  *T* may be an input or an intermediate compute computed at the root or inlined, not an
output (its layout is the caller's).  A factor larger than the extent is clamped to it, as
``split`` clamps (the copy then has one block, never unused padding).  The readers' loops are
unaffected (only their bodies change), so pack may come before or after primitives on the
readers; a compute *T* must be packed before it is computed at a loop.
"""
from __future__ import annotations

import numbers

from ..errors import ScheduleError
from ..arith import transform
from ..ir import dtypes
from ..ir import expr as E
from ..te.tensor import ComputeOp, IterKind, IterVar
from .stage import AttachKind
from .scan import refuse_self_copy


def pack(s, tensor, axis, factor, readers=None):
    """Add the packed copy of *tensor* to schedule *s*, redirect *readers* (stages; default all
    that read it) to it; return the copy."""
    stage = s[tensor]
    src = stage.origin_op.output()
    _check(s, stage, src, axis, factor)
    if readers is not None:
        readers = list(readers)
        if not readers:
            raise ScheduleError(f"pack of {stage.name}: readers is empty; give the stages that "
                                "should read the packed copy, or leave readers out for all")
        for r in readers:
            r._not_extern_reader("pack", stage)
            if not r.is_compute or not any(t.op is stage.origin_op for t in r.op.input_tensors):
                raise ScheduleError(f"pack of {stage.name}: stage {r.name} does not read "
                                    f"{stage.name}; its readers are "
                                    f"{', '.join(x.name for x in _readers(s, stage))}")
    n = src.shape[axis]
    f = min(int(factor), n) if isinstance(n, int) else int(factor)
    copy_op = _packed_op(stage, src, int(axis), f)
    copy = copy_op.output()
    readers = _readers(s, stage) if readers is None else readers
    refuse_self_copy(stage, readers, "pack")
    for r in readers:
        r.op = _redirect(r.op, stage.origin_op, copy, int(axis), f)
    s._insert_stage(copy_op, before=min(readers, key=s.stages.index))
    return copy


def _check(s, stage, src, axis, factor):
    where = f"pack of {stage.name}"
    if stage.is_output:
        raise ScheduleError(f"{where}: {stage.name} is an output of the schedule; its layout is "
                            "the caller's. Pack a tensor the schedule reads (an input or an "
                            "intermediate stage)")
    ndim = len(src.shape)
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not 0 <= axis < ndim:
        raise ScheduleError(f"{where}: axis must be a dimension index in 0..{ndim - 1} "
                            f"({stage.name} has shape {src.shape}), got {axis!r}")
    if isinstance(factor, bool) or not isinstance(factor, numbers.Integral) or factor < 1:
        raise ScheduleError(f"{where}: factor must be a positive integer (the inner block "
                            f"length along axis {axis}), got {factor!r}")
    if stage.is_compute and stage.attach == AttachKind.AT:
        raise ScheduleError(f"{where}: {stage.name} is computed at a loop of "
                            f"{stage.attach_stage.name}, which would then read it through "
                            f"{stage.name}.pack; pack {stage.name} before calling compute_at, "
                            f"then compute {stage.name} at a loop of {stage.name}.pack")
    if not _readers(s, stage):
        raise ScheduleError(f"{where}: no stage of this schedule reads {stage.name}; nothing "
                            "would read the packed copy")


def _readers(s, stage):
    return [r for r in s.stages if r.is_compute
            and any(t.op is stage.origin_op for t in r.op.input_tensors)]


def _axis_names(stage, ndim):
    """A name per dimension: the compute's axes', else (an input, or a scatter, whose loops
    are not its dimensions) ``ax0, ax1, ...``."""
    axes = stage.origin_op.axis if stage.is_compute else ()
    if len(axes) == ndim:
        return [iv.name for iv in axes]
    return ["ax%d" % d for d in range(ndim)]


def _packed_op(stage, src, axis, f):
    """``<name>.pack[outer, rest..., inner] = src[..., outer * f + inner, ...]``, zero-padded
    when *f* does not divide the extent."""
    n = src.shape[axis]
    names = _axis_names(stage, len(src.shape))
    outer = IterVar(E.Var(names[axis] + ".outer"), 0,
                    -(-n // f) if isinstance(n, int) else (n + (f - 1)) // f, IterKind.DATA)
    inner = IterVar(E.Var(names[axis] + ".inner"), 0, f, IterKind.DATA)
    rest = [IterVar(E.Var(nm), 0, ext, IterKind.DATA)
            for d, (nm, ext) in enumerate(zip(names, src.shape)) if d != axis]
    e = outer.var * f + inner.var
    idx = [iv.var for iv in rest]
    idx.insert(axis, e)
    body = src[tuple(idx)]
    if not isinstance(n, int) or n % f:          # a symbolic extent: padded unless f == 1
        if not isinstance(n, int) and f == 1:
            return ComputeOp(f"{stage.name}.pack", [outer] + rest + [inner], body, ())
        zero = E.const(False if src.dtype == dtypes.BOOL else 0, src.dtype)
        body = E.Select(e < n, body, zero, src.dtype)
    return ComputeOp(f"{stage.name}.pack", [outer] + rest + [inner], body, ())


def _redirect(op, src_op, copy, axis, f):
    """*op* with every read ``src[..., e, ...]`` made ``copy[e // f, ..., e % f]``."""
    def fn(x):
        if isinstance(x, E.TensorRead) and x.tensor.op is src_op:
            idx = list(x.indices)
            e = idx.pop(axis)
            return E.TensorRead(copy, (e // f, *idx, e % f), x.dtype)
        return None
    return ComputeOp(op.name, op.axis, transform(op.body, fn), op.reduce_axis, op.attrs)
