"""Tensor expressions: declare what an operator computes, in Einstein notation."""
from ..ir.expr import Expr, Var, const
from .tensor import Tensor, IterVar, placeholder, reduce_axis
from .symbolic import var, size_var
from .compute import compute
from .reduce import sum, max, min, prod, comm_reducer, CommReducer     # noqa: A004
from .intrin import (exp, log, sqrt, tanh, sigmoid, erf, floor, ceil, abs, power, pow,  # noqa: A004
                     maximum, minimum, if_then_else, all, any)
from .einsum import einsum
from .gradient import gradient
from .tuple_builtins import argmax, argmin, welford, min_value, max_value
from .scan import scan, scan_state, cumsum, cumprod
from .scatter import scatter_reduce, scatter_add, histogram, embedding_backward
from .extern import extern, ExternOp
from .tensor_intrin import TensorIntrin

__all__ = ["Expr", "Var", "const", "var", "size_var", "Tensor", "IterVar", "placeholder", "reduce_axis", "compute",
           "sum", "max", "min", "prod", "comm_reducer", "CommReducer", "exp", "log", "sqrt",
           "tanh", "sigmoid", "erf", "floor", "ceil", "abs", "power", "pow", "maximum", "minimum",
           "if_then_else", "all", "any", "einsum", "gradient", "argmax", "argmin", "welford",
           "min_value", "max_value", "scan", "scan_state", "cumsum", "cumprod",
           "scatter_reduce", "scatter_add", "histogram", "embedding_backward", "extern", "ExternOp",
           "TensorIntrin"]
