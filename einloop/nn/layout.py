"""Layout operators as index maps: each output element reads one input element, so a consumer
reads through them once the schedule inlines the stage (nothing is copied)."""
from __future__ import annotations

import math

from .. import te
from ..errors import TEError
from .elementwise import axis_index, is_one, same_shape, shape_of


def _groups(src, dst):
    """Split *src* and *dst* (shapes of equal size) into consecutive runs of equal products:
    ``[(src dims, dst dims)]``, so that each run is reshaped on its own."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        a, b = [i], [j]
        pa = src[i] if i < len(src) else 1
        pb = dst[j] if j < len(dst) else 1
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                a.append(i)
                pa *= src[i]
                i += 1
            else:
                b.append(j)
                pb *= dst[j]
                j += 1
        groups.append(([k for k in a if k < len(src)], [k for k in b if k < len(dst)]))
    return groups


def reshape(x, shape, name="reshape"):
    """*x* with the same elements in row-major order and the new *shape* (one entry may be
    -1); dimensions that keep their run of sizes keep their index unchanged."""
    src = shape_of(x)
    shape = [int(d) for d in shape]
    total = math.prod(src)
    if any(d < 1 and d != -1 for d in shape):     # else -2, -3 could multiply up to the size
        raise TEError(f"{name}: {tuple(shape)} has the entry "
                      f"{next(d for d in shape if d < 1 and d != -1)}; give sizes of at least 1 "
                      f"and at most one -1")
    if shape.count(-1) > 1:
        raise TEError(f"{name}: at most one dimension may be -1, got {tuple(shape)}")
    if -1 in shape:
        rest = math.prod(d for d in shape if d != -1)
        if rest == 0 or total % rest:
            raise TEError(f"{name}: cannot infer the -1 of {tuple(shape)} from {src}")
        shape[shape.index(-1)] = total // rest
    if math.prod(shape) != total:
        raise TEError(f"{name}: {src} ({total} elements) cannot be viewed as {tuple(shape)}")
    if total == 0:
        raise TEError(f"{name}: reshaping an empty tensor {src}")
    return regroup(x, _groups([d for d in src], shape), src, shape, name)


def regroup(x, groups, source, target, name="reshape"):
    """*x* (of shape *source*) with the same elements in row-major order in the shape *target*,
    where *groups* pairs each run of source dimensions with the run of target dimensions of the
    same product (``[(source dims, target dims), ...]``): each run's flat index is computed from
    the target's extents and unravelled with the source's.  The extents may be symbolic."""
    def body(*idx):
        where = [0] * len(source)
        for a, b in groups:
            flat = 0
            for n, j in enumerate(b):                     # the run's flat index, row-major
                flat = idx[j] if n == 0 else flat * target[j] + idx[j]
            for k in reversed(a):                         # unravelled into the source's run
                if k == a[0]:
                    where[k] = flat
                else:
                    where[k] = flat % source[k]
                    flat = flat // source[k]
        return x[tuple(where)]
    return te.compute(tuple(target), body, name=name)


def flatten(x, start=0, end=-1, name="flatten"):
    """Dimensions *start* .. *end* (inclusive, as PyTorch's ``flatten``) merged into one."""
    shape = shape_of(x)
    s, e = axis_index(start, len(shape), name), axis_index(end, len(shape), name)
    if s > e:                   # else the reshape below would insert a dimension of size 1
        raise TEError(f"{name}: start {start} comes after end {end} in {len(shape)} dimensions")
    return reshape(x, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:], name)


def permute(x, axes, name="permute"):
    """Dimension ``k`` of the result is dimension ``axes[k]`` of *x*."""
    shape = shape_of(x)
    axes = [axis_index(a, len(shape), name) for a in axes]
    if sorted(axes) != list(range(len(shape))):
        raise TEError(f"{name}: {tuple(axes)} is not a permutation of {len(shape)} dimensions")

    def body(*idx):
        at = [None] * len(shape)
        for k, a in enumerate(axes):
            at[a] = idx[k]
        return x[tuple(at)]
    return te.compute(tuple(shape[a] for a in axes), body, name=name)


def transpose(x, a=-2, b=-1, name="transpose"):
    n = len(shape_of(x))
    axes = list(range(n))
    a, b = axis_index(a, n, name), axis_index(b, n, name)
    axes[a], axes[b] = axes[b], axes[a]
    return permute(x, axes, name)


def unsqueeze(x, axis, name="unsqueeze"):
    shape = list(shape_of(x))
    axis = axis_index(axis, len(shape) + 1, name)
    return reshape(x, shape[:axis] + [1] + shape[axis:], name)


def squeeze(x, axes=None, name="squeeze"):
    """*x* without the dimensions of size 1 among *axes* (all when None); a listed dimension of
    another size stays, as in PyTorch.  Squeezing every dimension leaves shape (1,), as einloop
    has no 0-d tensors."""
    shape = shape_of(x)
    if axes is None:
        axes = [k for k, d in enumerate(shape) if is_one(d)]
    axes = {axis_index(a, len(shape), name) for a in ([axes] if isinstance(axes, int) else axes)}
    kept = [d for k, d in enumerate(shape) if k not in axes or not is_one(d)]
    return reshape(x, kept or [1], name)


def slice_axis(x, axis, start=0, end=None, step=1, name="slice"):
    """``x[..., start:end:step, ...]`` along *axis* (Python's rules for negative and
    out-of-range bounds; *step* > 0)."""
    shape = shape_of(x)
    axis = axis_index(axis, len(shape), name)
    if step <= 0:
        raise TEError(f"{name}: step must be positive, got {step}")
    start, end, _ = slice(start, end, step).indices(shape[axis])
    n = max(0, -(-(end - start) // step))
    if n == 0:
        raise TEError(f"{name}: the slice {start}:{end}:{step} of dimension {axis} is empty")
    out = shape[:axis] + (n,) + shape[axis + 1:]
    return te.compute(out, lambda *i: x[i[:axis] + (start + i[axis] * step,) + i[axis + 1:]],
                      name=name)


def concatenate(tensors, axis=0, name="concatenate"):
    """The tensors one after another along *axis* (their other dimensions equal)."""
    tensors = list(tensors)
    if not tensors:
        raise TEError(f"{name}: nothing to concatenate")
    shapes = [shape_of(t) for t in tensors]
    axis = axis_index(axis, len(shapes[0]), name)
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or not same_shape(s[:axis] + s[axis + 1:],
                                                      shapes[0][:axis] + shapes[0][axis + 1:]):
            raise TEError(f"{name}: shapes {shapes} differ outside axis {axis}")
    offsets, at = [], 0
    for s in shapes:
        offsets.append(at)
        at += s[axis]
    out = shapes[0][:axis] + (at,) + shapes[0][axis + 1:]

    def body(*i):
        v = tensors[-1][i[:axis] + (i[axis] - offsets[-1],) + i[axis + 1:]]
        for t, off, s in reversed(list(zip(tensors[:-1], offsets[:-1], shapes[:-1]))):
            v = te.if_then_else(i[axis] < off + s[axis],
                                t[i[:axis] + (i[axis] - off,) + i[axis + 1:]], v)
        return v
    return te.compute(out, body, name=name)
