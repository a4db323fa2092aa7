"""An operator library over ``te``: layers of neural networks as compute declarations.

Each function takes te tensors (and Python numbers) and returns a te tensor that declares what
the operator computes, as TVM's ``topi`` does: nothing is scheduled or built here.  The
PyTorch backend (:mod:`einloop.torch.backend`) lowers ATen operators onto these, and a user can
compose them into operators of their own:

    x = te.placeholder((16, 512), name="x")
    w = te.placeholder((2048, 512), name="w")
    y = nn.gelu(nn.dense(x, w))

Layout operators (``reshape``, ``permute``, ``expand``, ``slice``, ...) are index maps: a
consumer reads through them, and the schedule inlines them, so they copy nothing.  Shapes are
static integers; elementwise operators broadcast as NumPy does.
"""
from .elementwise import (broadcast_shape, broadcast_to, binary, unary, cast, where, full,
                          add, subtract, multiply, divide, maximum, minimum, power, opmath)
from .activation import relu, gelu, silu, sigmoid, tanh, exp, log, sqrt, rsqrt, erf, neg, abs
from .layout import (reshape, permute, transpose, unsqueeze, squeeze, slice_axis, concatenate,
                     flatten)
from .reduction import sum, mean, amax, amin, var          # noqa: A004
from .linalg import matmul, dense, batch_matmul
from .conv import conv, conv1d, conv2d
from .pool import max_pool2d, avg_pool2d, adaptive_avg_pool2d
from .norm import softmax, log_softmax, layer_norm, rms_norm, batch_norm
from .embedding import embedding

__all__ = ["broadcast_shape", "broadcast_to", "binary", "unary", "cast", "where", "full", "add",
           "subtract", "multiply", "divide", "maximum", "minimum", "power", "opmath", "relu",
           "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "erf", "neg", "abs",
           "reshape", "permute", "transpose", "unsqueeze", "squeeze", "slice_axis",
           "concatenate", "flatten", "sum", "mean", "amax", "amin", "var", "matmul", "dense",
           "batch_matmul", "conv", "conv1d", "conv2d", "max_pool2d", "avg_pool2d",
           "adaptive_avg_pool2d", "softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm",
           "embedding"]
