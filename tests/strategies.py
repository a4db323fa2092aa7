"""Generic, non-trivial schedules that apply to any operator of the zoo.

Each strategy takes the output tensors and returns a schedule; together they exercise
non-dividing splits, reorders, fuse, compute_at, inline, cache_write, vectorize, parallel and
unroll.  Every one must compute exactly what the default schedule computes.
"""
from einloop import create_schedule
from einloop.te.tensor import ComputeOp


def _compute_stages(s, outputs):
    outs = {id(t.op) for t in outputs}
    inner = [st for st in s.stages if isinstance(st.op, ComputeOp) and id(st.origin_op) not in outs]
    return [s[t] for t in outputs], inner


def default(outputs):
    return create_schedule(outputs)


def tile_vectorize_parallel(outputs):
    """Split every data axis by a non-dividing 4, outer loops first, reductions in between."""
    s = create_schedule(outputs)
    for st in _compute_stages(s, outputs)[0]:
        outer, inner = [], []
        for iv in st.op.axis:
            o, i = st.split(iv, factor=4)
            outer.append(o)
            inner.append(i)
        red = []
        for iv in st.op.reduce_axis:
            ro, ri = st.split(iv, factor=3)
            red += [ro, ri]
        st.reorder(*outer, *red, *inner)
        st.vectorize(inner[-1])
        st.parallel(outer[0])
    return s


def inline_intermediates(outputs):
    """Inline every intermediate that is not a reduction; vectorize the outputs' last axis."""
    s = create_schedule(outputs)
    outs, inner = _compute_stages(s, outputs)
    for st in inner:
        if not st.op.reduce_axis:
            st.compute_inline()
    for st in outs:
        if not st.op.reduce_axis:
            st.vectorize(st.op.axis[-1])
    return s


def compute_at_outer(outputs):
    """Compute every intermediate at the outermost loop of the (first) output that uses it."""
    s = create_schedule(outputs)
    outs, inner = _compute_stages(s, outputs)
    for out in outs:
        first = out.op.axis[0]
        fo, fi = out.split(first, factor=2)
        for st in inner:
            if st.attach == "root" and s._depends_on(out, st):
                st.compute_at(out, fo)
        out.parallel(fo)
    return s


def cache_write_tiles(outputs):
    """Accumulate reductions in a cache stage computed at the output tile; unroll and vectorize."""
    s = create_schedule(outputs)
    outs, _ = _compute_stages(s, outputs)
    for out in outs:
        tensor = out.origin_op.output()
        if not out.op.reduce_axis:
            continue
        cache = s.cache_write(tensor, "local")
        st = s[tensor]
        axes = list(st.op.axis)
        lo, li = st.split(axes[-1], factor=8)
        st.reorder(*axes[:-1], lo, li)
        st.vectorize(li)
        cst = s[cache]
        cst.compute_at(st, lo)
        caxes, cred = list(cst.op.axis), list(cst.op.reduce_axis)
        ro, ri = cst.split(cred[0], factor=2)
        cst.reorder(*caxes[:-1], *cred[1:], ro, ri, caxes[-1])
        cst.unroll(ri)
        cst.vectorize(caxes[-1])
    return s


def fuse_split_parallel(outputs):
    """Fuse all data axes, split by a non-dividing 5: parallel outside, vector inside."""
    s = create_schedule(outputs)
    for st in _compute_stages(s, outputs)[0]:
        fused = st.fuse(*st.op.axis)
        fo, fi = st.split(fused, factor=5)
        st.parallel(fo)
        if st.op.reduce_axis:
            st.reorder(fo, *st.op.reduce_axis, fi)
        st.vectorize(fi)
    return s


def unroll_inner(outputs):
    """Unroll a non-dividing inner split of the last data axis and of the first reduction."""
    s = create_schedule(outputs)
    for st in s.stages:
        if not isinstance(st.op, ComputeOp):
            continue
        o, i = st.split(st.op.axis[-1], factor=3)
        st.unroll(i)
        if st.op.reduce_axis:
            ro, ri = st.split(st.op.reduce_axis[0], factor=2)
            st.unroll(ri)
    return s


ALL = [default, tile_vectorize_parallel, inline_intermediates, compute_at_outer,
       cache_write_tiles, fuse_split_parallel, unroll_inner]
