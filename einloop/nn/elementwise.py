"""Elementwise operators with NumPy broadcasting, and the helpers the other modules share."""
from __future__ import annotations

from ..errors import TEError
from ..ir.expr import Expr, ShapeVar, const
from .. import te


def is_tensor(x) -> bool:
    return isinstance(x, te.Tensor)


def shape_of(t) -> tuple:
    """*t*'s shape: ints, and the symbolic extents (``te.size_var``) as they are."""
    return tuple(d if isinstance(d, ShapeVar) else int(d) for d in t.shape)


def same_dim(a, b) -> bool:
    """Are extents *a* and *b* the same (equal ints, or one symbolic extent)?  A symbolic
    extent is equal only to itself: ``==`` on it builds an expression, not a bool."""
    if isinstance(a, Expr) or isinstance(b, Expr):
        return a is b
    return a == b


def same_shape(a, b) -> bool:
    """Are shapes *a* and *b* the same, extent by extent (:func:`same_dim`)?"""
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


def is_one(d) -> bool:
    """Is extent *d* the static size 1 (a symbolic extent is never taken for it)?"""
    return isinstance(d, int) and d == 1


def element_count(dims, dtype) -> Expr:
    """The product of extents *dims* as a value of *dtype* (a mean's divisor): a constant, or
    an expression of the symbolic extents among them."""
    static = 1
    for d in dims:
        static *= d if isinstance(d, int) else 1
    symbolic = [d for d in dims if not isinstance(d, int)]
    if not symbolic:
        return const(static, dtype)
    n = symbolic[0]
    for d in symbolic[1:]:
        n = n * d
    return (n * static if static != 1 else n).astype(dtype)


def axis_index(axis: int, ndim: int, where: str) -> int:
    """*axis* (negative counts from the end) as an index into *ndim* dimensions."""
    if not -ndim <= axis < max(ndim, 1):
        raise TEError(f"{where}: axis {axis} is out of range for {ndim} dimensions "
                      f"(give -{ndim} .. {ndim - 1})")
    return axis % ndim if ndim else 0


def broadcast_shape(*shapes) -> tuple:
    """The NumPy broadcast of *shapes*; a ``TEError`` naming both sizes where they clash."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        sizes = []
        for s in shapes:
            d = s[len(s) - ndim + k] if len(s) - ndim + k >= 0 else 1
            if not is_one(d) and not any(same_dim(d, e) for e in sizes):
                sizes.append(d)
        if len(sizes) > 1:
            raise TEError(f"shapes {' and '.join(map(str, shapes))} do not broadcast: "
                          f"dimension {k} has sizes {', '.join(map(str, sizes))}")
        out.append(sizes[0] if sizes else 1)
    return tuple(out)


def read_broadcast(t, idx):
    """*t* read at the index *idx* of a broadcast result (its dimensions aligned at the right;
    a dimension of size 1 reads index 0)."""
    shape = shape_of(t)
    lead = len(idx) - len(shape)
    return t[tuple(0 if is_one(n) else idx[lead + k] for k, n in enumerate(shape))] if shape \
        else t[()]


def value(x, idx, dtype):
    """The value of operand *x* (a te tensor or a number) at broadcast index *idx*."""
    if is_tensor(x):
        return read_broadcast(x, idx)
    if isinstance(x, Expr):
        return x
    return const(x, dtype)


def result_dtype(*operands) -> str:
    """The dtype an elementwise result of *operands* takes: the tensors' (the first tensor's
    where they differ, as the operands are cast to it), a Python number following them."""
    for x in operands:
        if is_tensor(x):
            return x.dtype
    raise TEError("an elementwise operator needs at least one te tensor operand")


def binary(a, b, fn, name="binary"):
    """``fn(a[i], b[i])`` over the broadcast of *a* and *b* (te tensors or numbers); tensors of
    other dtypes are cast to the first tensor's."""
    dtype = result_dtype(a, b)
    shape = broadcast_shape(*[shape_of(x) for x in (a, b) if is_tensor(x)])

    def body(*idx):
        x, y = value(a, idx, dtype), value(b, idx, dtype)
        if is_tensor(a) and is_tensor(b) and a.dtype != b.dtype:
            y = y.astype(a.dtype)
        return fn(x, y)
    return te.compute(shape, body, name=name)


def unary(x, fn, name="unary"):
    """``fn(x[i])`` over *x*'s shape."""
    return te.compute(shape_of(x), lambda *i: fn(x[i]), name=name)


def cast(x, dtype, name="cast"):
    return unary(x, lambda v: v.astype(dtype), name)


#: storage floats: their values are rounded to them, but computed in float32
NARROW_FLOATS = ("float16", "bfloat16")


def opmath(dtype: str) -> str:
    """The dtype a reduction or a composite function of *dtype* values computes in: float32
    for float16 and bfloat16, else *dtype* itself.  PyTorch's CPU kernels do the same (its
    "opmath" type): a sum accumulated in bfloat16 stops growing once the sum is 256 times
    the addends, and every step of a composite (a GELU, a normalisation) rounded to 8 bits
    would add its own error, where one rounding of the result is what users compare with."""
    return "float32" if dtype in NARROW_FLOATS else dtype


def wide(v):
    """Expression *v* in its :func:`opmath` dtype."""
    return v.astype(opmath(v.dtype))


def narrow(v, dtype: str):
    """Expression *v* rounded to *dtype* (itself if it has it)."""
    return v if v.dtype == dtype else v.astype(dtype)


def rounded_to(t, dtype: str, name: str):
    """Tensor *t* as *dtype*: *t* itself if it has it, else a stage named after *name* and
    the dtype that rounds it (an elementwise epilogue the schedule fuses into *t*)."""
    if t.dtype == dtype:
        return t
    return te.compute(shape_of(t), lambda *i: t[i].astype(dtype), name=f"{name}_{dtype}")


def full(shape, fill, dtype="float32", name="full"):
    return te.compute(tuple(shape), lambda *i: const(fill, dtype), name=name)


def broadcast_to(x, shape, name="broadcast_to"):
    """*x* read as the larger *shape* (``expand``): an index map, no copy once inlined."""
    shape = tuple(d if isinstance(d, ShapeVar) else int(d) for d in shape)
    if not same_shape(broadcast_shape(shape_of(x), shape), shape):
        raise TEError(f"{name}: {shape_of(x)} cannot be broadcast to {shape}")
    return te.compute(shape, lambda *i: read_broadcast(x, i), name=name)


def where(cond, a, b, name="where"):
    """``a`` where *cond* holds, else ``b`` (each a tensor or a number), broadcast."""
    dtype = result_dtype(a, b) if (is_tensor(a) or is_tensor(b)) else "float32"
    shape = broadcast_shape(*[shape_of(x) for x in (cond, a, b) if is_tensor(x)])

    def body(*idx):
        c = value(cond, idx, "bool")
        if c.dtype != "bool":
            c = c != const(0, c.dtype)
        x, y = value(a, idx, dtype), value(b, idx, dtype)
        if x.dtype != dtype:
            x = x.astype(dtype)
        if y.dtype != dtype:
            y = y.astype(dtype)
        return te.if_then_else(c, x, y)
    return te.compute(shape, body, name=name)


def add(a, b, name="add"):
    return binary(a, b, lambda x, y: x + y, name)


def subtract(a, b, name="subtract"):
    return binary(a, b, lambda x, y: x - y, name)


def multiply(a, b, name="multiply"):
    return binary(a, b, lambda x, y: x * y, name)


def divide(a, b, name="divide"):
    return binary(a, b, lambda x, y: x / y, name)


def maximum(a, b, name="maximum"):
    return binary(a, b, te.maximum, name)


def minimum(a, b, name="minimum"):
    return binary(a, b, te.minimum, name)


def power(a, b, name="power"):
    return binary(a, b, te.power, name)
