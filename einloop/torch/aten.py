"""Core ATen operators lowered onto :mod:`einloop.nn` declarations: the table the
``torch.compile`` backend (:mod:`.backend`) reads.

Each entry maps an ATen overload to a function ``lower(out, *args, **kwargs)`` that returns the
te tensor (or tuple of them, for ATen's tuple results) computing the node: *out* is the node's
fake result (its shape and dtype, which PyTorch's type promotion decided), *args* the node's
arguments with every tensor replaced by a te tensor.  ``injective`` marks index maps and
elementwise operators, which the backend fuses into the kernel of their producer or consumer;
``accepts(node)`` rules out the uses a lowering does not cover (a transposed convolution, a
tuple result whose other parts are used), which then run in PyTorch.
"""
from __future__ import annotations

import functools
import math
import operator
from typing import Callable, NamedTuple, Optional

import torch

from .. import nn, te
from ..ir.expr import TensorRead, const
from ..te.tensor import ComputeOp
from .signature import DTYPES, TORCH_DTYPES
from . import symbolic

aten = torch.ops.aten


class Lowering(NamedTuple):
    lower: Callable
    injective: bool
    accepts: Optional[Callable]


#: ATen overload -> its lowering
LOWERINGS: dict = {}


def lowering(*overloads, injective=False, accepts=None):
    def register(fn):
        for o in overloads:
            LOWERINGS[o] = Lowering(fn, injective, accepts)
        return fn
    return register


def dtype_of(out) -> str:
    return DTYPES[out.dtype]


def shape_of(t) -> tuple:
    """A torch tensor's shape as einloop declares it: a 0-d tensor is of shape (1,) (einloop
    has no 0-d tensors; the backend views them so at a kernel's boundary).  Declared with
    symbolic sizes (:func:`.symbolic.declaring`), a size that is a symbol or an expression of
    symbols is a size variable (:class:`.symbolic.SizeTable`)."""
    table = symbolic.active()
    if table is not None:
        return table.shape(t)
    return tuple(int(d) for d in t.shape) or (1,)


def reshape_to(x, out):
    """*x* with the shape of the fake tensor *out* (a reshape: the same elements in row-major
    order), symbolic sizes included."""
    table = symbolic.active()
    if table is not None:
        return symbolic.reshape(x, out, table)
    return nn.reshape(x, shape_of(out))


def as_dtype(x, dtype):
    """A te tensor cast to *dtype* (itself if it has it), or a Python number as it is."""
    if isinstance(x, te.Tensor) and x.dtype != dtype:
        return nn.cast(x, dtype)
    return x


def only_first_used(node) -> bool:
    """A tuple-valued node whose users all take its first element."""
    return all(u.target is operator.getitem and u.args[1] == 0 for u in node.users)


# -- elementwise arithmetic: operands cast to the result dtype first, as PyTorch computes -----

def _arith(fn):
    def lower(out, a, b, alpha=1, **_):
        dtype = dtype_of(out)
        a, b = as_dtype(a, dtype), as_dtype(b, dtype)
        if alpha != 1:
            b = nn.multiply(b, alpha) if isinstance(b, te.Tensor) else b * alpha
        if not isinstance(a, te.Tensor):                  # scalar op tensor
            return nn.binary(b, a, lambda y, x: fn(x, y))
        return nn.binary(a, b, fn)
    return lower


lowering(aten.add.Tensor, aten.add.Scalar, injective=True)(_arith(lambda x, y: x + y))
lowering(aten.sub.Tensor, aten.sub.Scalar, injective=True)(_arith(lambda x, y: x - y))
lowering(aten.rsub.Scalar, aten.rsub.Tensor, injective=True)(_arith(lambda x, y: y - x))
lowering(aten.mul.Tensor, aten.mul.Scalar, injective=True)(_arith(lambda x, y: x * y))
lowering(aten.div.Tensor, aten.div.Scalar, injective=True)(_arith(lambda x, y: x / y))
lowering(aten.maximum.default, injective=True)(_arith(te.maximum))
lowering(aten.minimum.default, injective=True)(_arith(te.minimum))
#: the largest constant exponent of an integer power computed as repeated multiplication
INT_POW_MAX = 8


def _integer_power(node) -> bool:
    """An integer tensor to a constant exponent 0..INT_POW_MAX (PyTorch's integer ``**``)."""
    return node.target is aten.pow.Tensor_Scalar and isinstance(node.args[1], int) \
        and not isinstance(node.args[1], bool) and 0 <= node.args[1] <= INT_POW_MAX


def _accepts_power(node) -> bool:
    """Floats any power; integers the small constant exponents (te.power is for floats)."""
    return node.meta["val"].dtype.is_floating_point or _integer_power(node)


@lowering(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, injective=True, accepts=_accepts_power)
def _power(out, a, b):
    if out.dtype.is_floating_point:
        return _arith(te.power)(out, a, b)
    a = as_dtype(a, dtype_of(out))
    if b == 0:
        return nn.binary(a, 1, lambda x, one: x * 0 + one)
    return nn.binary(a, b, lambda x, _: functools.reduce(operator.mul, [x] * b))


def _compare(fn):
    """A comparison computed in the type PyTorch promotes its operands to; a bool result."""
    def lower(out, a, b):
        if isinstance(a, te.Tensor) and isinstance(b, te.Tensor) and a.dtype != b.dtype:
            wide = DTYPES[torch.promote_types(TORCH_DTYPES[a.dtype], TORCH_DTYPES[b.dtype])]
            a, b = as_dtype(a, wide), as_dtype(b, wide)
        tensor = a if isinstance(a, te.Tensor) else b
        scalar = b if tensor is a else a
        if isinstance(scalar, float) and not tensor.dtype.startswith("float"):
            tensor = as_dtype(tensor, DTYPES[torch.get_default_dtype()])
        if tensor is a or isinstance(a, te.Tensor):
            return nn.binary(tensor, scalar, fn)
        return nn.binary(tensor, scalar, lambda y, x: fn(x, y))
    return lower


for _name, _fn in (("gt", operator.gt), ("lt", operator.lt), ("ge", operator.ge),
                   ("le", operator.le), ("eq", operator.eq), ("ne", operator.ne)):
    _packet = getattr(aten, _name)
    lowering(_packet.Tensor, _packet.Scalar, injective=True)(_compare(_fn))


@lowering(aten.where.self, injective=True)
def _where(out, cond, a, b):
    dtype = dtype_of(out)
    return nn.where(cond, as_dtype(a, dtype), as_dtype(b, dtype))


# -- unary -------------------------------------------------------------------------------------

def _unary(fn):
    def lower(out, x, *rest, **kwargs):
        return fn(as_dtype(x, dtype_of(out)), *rest, **kwargs)
    return lower


for _op, _fn in ((aten.relu.default, nn.relu), (aten.silu.default, nn.silu),
                 (aten.sigmoid.default, nn.sigmoid), (aten.tanh.default, nn.tanh),
                 (aten.exp.default, nn.exp), (aten.log.default, nn.log),
                 (aten.sqrt.default, nn.sqrt), (aten.rsqrt.default, nn.rsqrt),
                 (aten.erf.default, nn.erf), (aten.neg.default, nn.neg),
                 (aten.abs.default, nn.abs)):
    lowering(_op, injective=True)(_unary(_fn))


@lowering(aten.gelu.default, injective=True)
def _gelu(out, x, approximate="none"):
    return nn.gelu(as_dtype(x, dtype_of(out)), approximate)


@lowering(aten.scalar_tensor.default, injective=True)
def _scalar_tensor(out, value, **_):
    return nn.full((1,), value, dtype_of(out), name="scalar")


@lowering(aten.logical_not.default, injective=True)
def _logical_not(out, x):
    false = const(False, "bool") if x.dtype == "bool" else const(0, x.dtype)
    return nn.unary(x, lambda v: v == false, "logical_not")


@lowering(aten.full_like.default, injective=True)
def _full_like(out, x, fill, **_):
    return nn.full(shape_of(out), fill, dtype_of(out))


@lowering(aten.any.dim, aten.any.dims, aten.any.default)
def _any(out, x, dims=None, keepdim=False):
    dims = [dims] if isinstance(dims, int) else dims
    hits = nn.amax(nn.cast(x, "int32") if x.dtype == "bool" else
                   nn.unary(x, lambda v: (v != const(0, x.dtype)).astype("int32")),
                   _dims(dims), keepdim)
    return nn.unary(hits, lambda v: v != const(0, "int32"), "any")


def _identity(out, x, *_, **__):
    return nn.cast(x, dtype_of(out), name="copy")


lowering(aten._to_copy.default, aten.clone.default, aten.alias.default, aten.detach.default,
         aten.lift_fresh_copy.default, injective=True)(_identity)


# -- layout: index maps -----------------------------------------------------------------------

@lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default, injective=True)
def _view(out, x, shape):
    return reshape_to(x, out)


@lowering(aten.permute.default, injective=True)
def _permute(out, x, dims):
    return nn.permute(x, dims)


@lowering(aten.t.default, injective=True)
def _t(out, x):
    return nn.transpose(x, 0, 1) if len(x.shape) == 2 else reshape_to(x, out)


@lowering(aten.transpose.int, injective=True)
def _transpose(out, x, a, b):
    return nn.transpose(x, a, b)


@lowering(aten.expand.default, injective=True)
def _expand(out, x, shape, implicit=False):
    return nn.broadcast_to(x, shape_of(out))


@lowering(aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
          injective=True)
def _resize(out, x, *_):
    return reshape_to(x, out)


@lowering(aten.slice.Tensor, injective=True)
def _slice(out, x, dim=0, start=None, end=None, step=1):
    if isinstance(x.shape[dim], int):
        n = int(x.shape[dim])
        start = 0 if start is None else start
        end = n if end is None else min(end, n)
        return nn.slice_axis(x, dim, start, end, step)
    return _slice_symbolic(out, x, dim, start, step)


def _slice_symbolic(out, x, dim, start, step):
    """A slice along a dimension of symbolic size: read from *start* (counted from the end
    when negative) every *step* th element, as many as the graph's output has."""
    shape = shape_of(out)
    dim %= len(shape)
    start = 0 if start is None else start
    if not isinstance(start, int) or not isinstance(step, int) or step < 1:
        raise NotImplementedError(f"a slice from {start} by {step} along a dimension of "
                                  "symbolic size")
    first = start + x.shape[dim] if start < 0 else start
    return te.compute(shape, lambda *i: x[i[:dim] + (first + i[dim] * step,) + i[dim + 1:]],
                      name="slice")


@lowering(aten.select.int, injective=True)
def _select(out, x, dim, index):
    n = int(x.shape[dim])
    index = index + n if index < 0 else index
    row = nn.slice_axis(x, dim, index, index + 1)
    return reshape_to(row, out) if symbolic.active() else nn.squeeze(row, dim)


@lowering(aten.cat.default, injective=True)
def _cat(out, tensors, dim=0):
    dtype = dtype_of(out)
    return nn.concatenate([as_dtype(t, dtype) for t in tensors], dim)


# -- reductions ---------------------------------------------------------------------------------

def _dims(dims):
    return None if dims is None or dims == [] else list(dims)


@lowering(aten.sum.dim_IntList, aten.sum.default)
def _sum(out, x, dims=None, keepdim=False, dtype=None):
    return nn.sum(as_dtype(x, dtype_of(out)), _dims(dims), keepdim)


@lowering(aten.mean.dim, aten.mean.default)
def _mean(out, x, dims=None, keepdim=False, dtype=None):
    return nn.mean(as_dtype(x, dtype_of(out)), _dims(dims), keepdim)


@lowering(aten.amax.default)
def _amax(out, x, dims=(), keepdim=False):
    return nn.amax(x, _dims(dims), keepdim)


@lowering(aten.amin.default)
def _amin(out, x, dims=(), keepdim=False):
    return nn.amin(x, _dims(dims), keepdim)


@lowering(aten.var.correction)
def _var(out, x, dims=None, correction=None, keepdim=False):
    return nn.var(x, _dims(dims), 1 if correction is None else correction, keepdim)


@lowering(aten._softmax.default)
def _softmax(out, x, dim, half_to_float=False):
    return nn.softmax(x, dim)


@lowering(aten._safe_softmax.default)
def _safe_softmax(out, x, dim, dtype=None):
    return nn.softmax(as_dtype(x, dtype_of(out)), dim, safe=True)


@lowering(aten._log_softmax.default)
def _log_softmax(out, x, dim, half_to_float=False):
    return nn.log_softmax(x, dim)


@lowering(aten.native_layer_norm.default)
def _layer_norm(out, x, shape, weight=None, bias=None, eps=1e-5):
    return nn.layer_norm(x, len(shape), weight, bias, eps, with_stats=True)


@lowering(aten._native_batch_norm_legit_no_training.default, injective=True,
          accepts=only_first_used)
def _batch_norm(out, x, weight, bias, mean, var, momentum, eps):
    """Inference batch norm (:func:`einloop.nn.batch_norm`: a per-channel multiply and add)."""
    return (nn.batch_norm(x, mean, var, weight, bias, eps),)


def _inference_batch_norm(node) -> bool:
    training = node.args[5] if len(node.args) > 5 else node.kwargs.get("training", False)
    return not training and only_first_used(node)


@lowering(aten.native_batch_norm.default, injective=True, accepts=_inference_batch_norm)
def _native_batch_norm(out, x, weight, bias, mean, var, training, momentum, eps):
    return _batch_norm(out, x, weight, bias, mean, var, momentum, eps)


# -- the gradients of elementwise and row operators (training graphs' backward) ------------------

def _grad_of(fn):
    """A backward lowering ``fn(grad, x)`` (elementwise), operands cast to the result dtype."""
    def lower(out, grad, x, *rest):
        dtype = dtype_of(out)
        return nn.binary(as_dtype(grad, dtype), as_dtype(x, dtype),
                         lambda g, v: fn(g, v, *rest), "backward")
    return lower


def _c(v, like):
    return const(v, like.dtype)


def _gelu_grad(g, x, approximate="none"):
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        inner = _c(k, x) * (x + _c(0.044715, x) * x * x * x)
        t = te.tanh(inner)
        d_inner = _c(k, x) * (_c(1.0, x) + _c(3 * 0.044715, x) * x * x)
        return g * (_c(0.5, x) * (_c(1.0, x) + t)
                    + _c(0.5, x) * x * (_c(1.0, x) - t * t) * d_inner)
    cdf = _c(0.5, x) * (_c(1.0, x) + te.erf(x * _c(math.sqrt(0.5), x)))
    pdf = te.exp(_c(-0.5, x) * x * x) * _c(1.0 / math.sqrt(2.0 * math.pi), x)
    return g * (cdf + x * pdf)


def _silu_grad(g, x):
    sig = te.sigmoid(x)
    return g * sig * (_c(1.0, x) + x * (_c(1.0, x) - sig))


lowering(aten.threshold_backward.default, injective=True)(_grad_of(
    lambda g, x, threshold: te.if_then_else(x <= _c(threshold, x), _c(0.0, g), g)))
lowering(aten.gelu_backward.default, injective=True)(_grad_of(_gelu_grad))
lowering(aten.silu_backward.default, injective=True)(_grad_of(_silu_grad))
lowering(aten.sigmoid_backward.default, injective=True)(_grad_of(
    lambda g, y: g * y * (_c(1.0, y) - y)))
lowering(aten.tanh_backward.default, injective=True)(_grad_of(
    lambda g, y: g * (_c(1.0, y) - y * y)))


@lowering(aten._softmax_backward_data.default)
def _softmax_backward(out, grad, y, dim, input_dtype):
    """``y * (grad - sum(grad * y))`` along *dim*."""
    gy = nn.multiply(grad, y)
    total = nn.sum(gy, [dim], keepdims=True)
    return nn.multiply(y, nn.subtract(grad, total))


@lowering(aten._log_softmax_backward_data.default)
def _log_softmax_backward(out, grad, y, dim, input_dtype):
    """``grad - exp(y) * sum(grad)`` along *dim*."""
    total = nn.sum(grad, [dim], keepdims=True)
    return nn.subtract(grad, nn.multiply(nn.exp(y), total))


# -- products, convolutions, pooling -----------------------------------------------------------

def transposed_source(b):
    """The matrix *b* is the transpose of (its stage reads that tensor at its two axes
    swapped, and nothing else), else None."""
    op = b.op
    if not isinstance(op, ComputeOp) or len(op.axis) != 2 or op.reduce_axis \
            or len(op.bodies) != 1 or not isinstance(op.body, TensorRead):
        return None
    i, j = (iv.var for iv in op.axis)
    read = op.body
    if len(read.indices) != 2 or read.indices[0] is not j or read.indices[1] is not i \
            or read.tensor.dtype != b.dtype:
        return None
    return read.tensor


def _product(a, b, dtype=None):
    """``a @ b``; where *b* is a matrix transposed (a linear layer's weight: ATen writes
    ``addmm(bias, x, permute(w, [1, 0]))``), read as ``a @ w.T`` from ``w`` itself, as
    :func:`einloop.nn.dense` does.  Through the transpose the product reads an operand that
    is no placeholder, so the auto-scheduler can only copy it transposed on every call (or
    gather along its columns); reading ``w`` it may pack ``w`` in blocks, as a BLAS does
    (three times faster per core on a 128 x 512 x 2048 layer's first schedules)."""
    w = transposed_source(b) if len(a.shape) == 2 and len(b.shape) == 2 else None
    if w is None:
        return nn.matmul(a, b, dtype=dtype)
    return nn.dense(a, w, name="matmul", dtype=dtype)


@lowering(aten.mm.default, aten.bmm.default)
def _mm(out, a, b):
    return _product(a, b)


@lowering(aten.matmul.default)
def _matmul(out, a, b):
    """``a @ b`` with leading (batch) dimensions: what the symbolic path folds ``bmm`` over
    flattened batch dimensions into (:func:`.symbolic.fold_batched_products`)."""
    return nn.matmul(a, b)


@lowering(aten.addmm.default)
def _addmm(out, bias, a, b, beta=1, alpha=1):
    """``beta * bias + alpha * (a @ b)`` in one epilogue over the product's sum, rounded once
    (a bfloat16 product's float32 sum is not rounded before the bias is added, as oneDNN's
    is not)."""
    dtype = dtype_of(out)
    prod = _product(a, b, dtype=nn.opmath(dtype))

    def epilogue(p, c):
        v = p if alpha == 1 else p * const(alpha, p.dtype)
        if beta != 0:
            v = v + (c if beta == 1 else c * const(beta, c.dtype))
        return v.astype(dtype)
    return nn.binary(prod, bias, epilogue, name="addmm")


def _plain_convolution(node) -> bool:
    transposed = node.args[6] if len(node.args) > 6 else node.kwargs.get("transposed", False)
    return not transposed and len(node.args[0].meta["val"].shape) in (3, 4, 5)


@lowering(aten.convolution.default, accepts=_plain_convolution)
def _convolution(out, x, w, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    return nn.conv(x, w, stride, padding, dilation, groups, bias)


def _pool2d_4d(node) -> bool:
    return len(node.args[0].meta["val"].shape) == 4


@lowering(aten.max_pool2d_with_indices.default,
          accepts=lambda n: only_first_used(n) and _pool2d_4d(n))
def _max_pool2d(out, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    return (nn.max_pool2d(x, kernel, stride or None, padding, dilation, ceil_mode),)


@lowering(aten.avg_pool2d.default, accepts=_pool2d_4d)
def _avg_pool2d(out, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    return nn.avg_pool2d(x, kernel, stride or None, padding, ceil_mode, count_include_pad,
                         divisor_override)


@lowering(aten._adaptive_avg_pool2d.default, accepts=_pool2d_4d)
def _adaptive_avg_pool2d(out, x, size):
    return nn.adaptive_avg_pool2d(x, size)


@lowering(aten.embedding.default)
def _embedding(out, weight, indices, padding_idx=-1, scale_grad=False, sparse=False):
    return nn.embedding(weight, indices)


def _no_scaling(node) -> bool:
    """An embedding's backward of ids with a dimension, without ``scale_grad_by_freq`` (the
    others are left to PyTorch)."""
    return len(node.args[1].meta["val"].shape) >= 1 and not (len(node.args) > 4 and node.args[4])


@lowering(aten.embedding_dense_backward.default, accepts=_no_scaling)
def _embedding_dense_backward(out, grad, indices, num_weights, padding_idx, scale_grad=False):
    """The table's gradient: a scatter of the rows of *grad* at *indices* (te.scatter)."""
    return te.embedding_backward(indices, grad, int(num_weights),
                                 int(padding_idx) if padding_idx >= 0 else None)


@lowering(aten.index_add.default, accepts=lambda n: len(n.args[2].meta["val"].shape) == 1)
def _index_add(out, x, dim, index, source, alpha=1):
    """``x`` with ``alpha * source`` added at rows *index* along *dim*: a scatter, then an add."""
    shape = shape_of(out)
    source = source if alpha == 1 else nn.multiply(source, alpha)
    return nn.add(x, te.scatter_add(shape, index, source, axis=dim % len(shape)))


def _getitem(out, value, index):
    return value[index]


LOWERINGS[operator.getitem] = Lowering(_getitem, True, None)

