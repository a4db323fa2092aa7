"""What one call of a custom operator is compiled for: each input's shape and einloop dtype.

A :class:`Signature` is read from the call's tensors (real or fake); it keys the operator's
declarations and kernels.  The checks here are the ones a user can fail: something that is not a
tensor, a dtype einloop has no kernels for, a rank other than the operator's first call had, and
(at the real implementation) memory that is not on the CPU.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..errors import ArgumentError

#: torch dtype -> einloop dtype: the dtypes einloop compiles for (no bfloat16, no complex)
DTYPES = {torch.float16: "float16", torch.float32: "float32", torch.float64: "float64",
          torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
          torch.uint8: "uint8", torch.bool: "bool"}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}
FLOAT_DTYPES = ("float16", "float32", "float64")


class Signature(NamedTuple):
    """The shapes and einloop dtypes of a call's inputs, in parameter order."""
    shapes: tuple
    dtypes: tuple

    def text(self, params) -> str:
        """``x: float32[8, 16], w: float32[16]``, for messages."""
        return ", ".join(f"{p}: {d}[{', '.join(map(str, s))}]"
                         for p, s, d in zip(params, self.shapes, self.dtypes))


def signature_of(op_name: str, params, args, ranks=None) -> Signature:
    """The signature of *args* (one tensor per name in *params*).  *ranks*: the input ranks of
    the operator's first call, which every later call must have (None: no call yet).

    A symbolic extent (a ``SymInt`` of a dynamic-shape trace) is made concrete: einloop
    compiles one kernel per shape, so torch.compile specialises the graph on it."""
    if len(args) != len(params):
        raise ArgumentError(f"{op_name} takes {len(params)} tensor(s) ({', '.join(params)}), "
                            f"got {len(args)}")
    shapes, dtypes = [], []
    for i, (p, a) in enumerate(zip(params, args)):
        if not isinstance(a, torch.Tensor):
            raise ArgumentError(f"{op_name}: argument {p!r} must be a torch.Tensor, got "
                                f"{type(a).__name__}")
        if a.dtype not in DTYPES:
            raise ArgumentError(f"{op_name}: argument {p!r} has dtype {a.dtype}; einloop kernels "
                                f"take {', '.join(str(d) for d in DTYPES)}")
        if ranks is not None and a.dim() != ranks[i]:
            raise ArgumentError(f"{op_name}: argument {p!r} has rank {a.dim()}, but the operator "
                                f"was declared for rank {ranks[i]} (its first call); declare "
                                "another operator for inputs of another rank")
        shapes.append(tuple(int(d) for d in a.shape))
        dtypes.append(DTYPES[a.dtype])
    return Signature(tuple(shapes), tuple(dtypes))


def check_on_cpu(op_name: str, params, args) -> None:
    """einloop's kernels run on the CPU: refuse meta, CUDA and every other device's tensors."""
    for p, a in zip(params, args):
        if a.device.type != "cpu":
            raise ArgumentError(f"{op_name}: argument {p!r} is on device {a.device}; einloop "
                                "kernels run on the CPU (pass tensor.cpu(); meta tensors are "
                                "for tracing, which the operator's fake implementation serves)")
