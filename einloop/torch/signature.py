"""What one call of a custom operator is compiled for: each input's shape and einloop dtype.

A :class:`Signature` is read from the call's tensors (real or fake); it keys the operator's
declarations and kernels.  The checks here are the ones a user can fail: something that is not a
tensor, a dtype einloop has no kernels for, a rank other than the operator's first call had, and
(at the real implementation) memory that is not on the CPU.

An operator registered with ``dynamic=`` has dimensions that are not part of the signature:
:class:`DynamicDims` names them, and a signature holds the name of the size variable there
instead of a value, so one signature (and one kernel) serves every value.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..errors import ArgumentError, CustomOpError
from ..ir.expr import ShapeVar

#: torch dtype -> einloop dtype: the dtypes custom operators take (no complex)
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32",
          torch.float64: "float64",
          torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
          torch.uint8: "uint8", torch.bool: "bool"}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}
FLOAT_DTYPES = ("bfloat16", "float16", "float32", "float64")


class Signature(NamedTuple):
    """The shapes and einloop dtypes of a call's inputs, in parameter order; a dynamic
    dimension (:class:`DynamicDims`) is the name of its size variable, not a value."""
    shapes: tuple
    dtypes: tuple

    def text(self, params) -> str:
        """``x: float32[8, 16], w: float32[16]``, for messages."""
        return ", ".join(f"{p}: {d}[{', '.join(map(str, s))}]"
                         for p, s, d in zip(params, self.shapes, self.dtypes))


def signature_of(op_name: str, params, args, ranks=None, dynamic=None) -> Signature:
    """The signature of *args* (one tensor per name in *params*).  *ranks*: the input ranks of
    the operator's first call, which every later call must have (None: no call yet).
    *dynamic*: the operator's :class:`DynamicDims` (None: none).

    A symbolic extent (a ``SymInt`` of a dynamic-shape trace) of a static dimension is made
    concrete: einloop compiles one kernel per static shape, so torch.compile specialises the
    graph on it.  A dynamic dimension is the name of its size variable, its value not read."""
    if len(args) != len(params):
        raise ArgumentError(f"{op_name} takes {len(params)} tensor(s) ({', '.join(params)}), "
                            f"got {len(args)}")
    shapes, dtypes = [], []
    for i, (p, a) in enumerate(zip(params, args)):
        if not isinstance(a, torch.Tensor):
            raise ArgumentError(f"{op_name}: argument {p!r} must be a torch.Tensor, got "
                                f"{type(a).__name__}")
        if a.dtype not in DTYPES:
            raise ArgumentError(f"{op_name}: argument {p!r} has dtype {a.dtype}; einloop custom "
                                f"operators take {', '.join(str(d) for d in DTYPES)}")
        if a.layout is not torch.strided:
            raise ArgumentError(f"{op_name}: argument {p!r} has layout {a.layout}; einloop "
                                "kernels read dense (strided) tensors (pass tensor.to_dense())")
        if a.device != args[0].device:
            raise ArgumentError(f"{op_name}: argument {p!r} is on {a.device} and "
                                f"{params[0]!r} on {args[0].device}; pass every tensor on the "
                                "same device (the CPU)")
        if ranks is not None and a.dim() != ranks[i]:
            raise ArgumentError(f"{op_name}: argument {p!r} has rank {a.dim()}, but the operator "
                                f"was declared for rank {ranks[i]} (its first call); declare "
                                "another operator for inputs of another rank")
        names = {} if dynamic is None else dynamic.of_input(i, a.dim())
        shapes.append(tuple(names[k] if k in names else int(d) for k, d in enumerate(a.shape)))
        dtypes.append(DTYPES[a.dtype])
    return Signature(tuple(shapes), tuple(dtypes))


class DynamicDims:
    """Which input dimensions of an operator registered with ``dynamic=`` are symbolic: each is
    declared as a ``te.size_var`` (a value of at least 1), so that one kernel serves every value
    of it.  Parsed from the ``dynamic`` option of :func:`~.op.custom_op`:

    - ``False`` (or ``None``, ``{}``): none; one kernel per shape.
    - ``True``: dimension 0 of the *first* input, the variable ``<name>_0`` (``x_0`` for a first
      parameter ``x``).  The batch of a declaration ``f(x, *weights)``: rmsnorm's ``x[n, d]``
      and not ``w[d]``; a linear layer's ``x[n, k]`` and not ``w[k, m]``, whose rank is the
      same.  A rule read from ranks or from equal sizes would take ``w``'s ``k`` for a batch
      (as torch.compile's duck sizing does, at the price of a recompilation), so the rule
      names a position.
    - ``{"x": 0}``, ``{"x": (0, 1)}``: those dimensions of those inputs, each a variable of its
      own, ``<input>_<dim>``.
    - ``{"q": {0: "b"}, "k": {0: "b"}, "v": {0: "b"}}``: named variables, as torch.export's
      ``dynamic_shapes`` share a ``Dim``: dimensions that name the same variable are one size,
      which every call must give them alike (an ``ArgumentError`` otherwise).  Inputs read
      along one index (attention's batch) should share it: then a mismatch is refused, not
      read through a clamped index.

    A dimension not named stays static: a call with another value of it gets a kernel of its
    own, as without ``dynamic``.  Negative dims count from the end, as in PyTorch.
    """

    def __init__(self, op_name, params, dynamic):
        self.op_name, self.params = op_name, tuple(params)
        spec = self._spec(dynamic)
        self.dims = {}      # (input index, dim as given) -> variable name
        for param, dims in spec.items():
            if param not in self.params:
                raise CustomOpError(f"custom_op {op_name!r}: dynamic names {param!r}, which is "
                                    f"not a parameter ({', '.join(self.params)})")
            for dim, var in self._dims(param, dims).items():
                self.dims[(self.params.index(param), dim)] = var
        clash = sorted(set(self.dims.values()) & set(self.params))
        if clash:
            raise CustomOpError(f"custom_op {op_name!r}: the size variable {clash[0]!r} is also "
                                "a parameter's name; name it otherwise")
        #: the size variables, in order of first appearance
        self.names = tuple(dict.fromkeys(self.dims[k] for k in sorted(self.dims)))

    def _spec(self, dynamic):
        if dynamic is None or dynamic is False:
            return {}
        if dynamic is True:
            return {self.params[0]: 0}
        if isinstance(dynamic, dict):
            return dynamic
        raise CustomOpError(f"custom_op {self.op_name!r}: dynamic must be True, False or a dict "
                            f"{{input: dim, dims or {{dim: name}}}}, got {dynamic!r}")

    def _dims(self, param, dims) -> dict:
        """``{dim: variable name}`` of one input's entry."""
        if isinstance(dims, int) and not isinstance(dims, bool):
            dims = (dims,)
        if isinstance(dims, (tuple, list)):
            dims = {d: None for d in dims}
        if not isinstance(dims, dict) or not dims:
            raise CustomOpError(f"custom_op {self.op_name!r}: dynamic[{param!r}] must be a dim, "
                                f"a tuple of dims or a dict {{dim: name}}, got {dims!r}")
        out = {}
        for d, var in dims.items():
            if isinstance(d, bool) or not isinstance(d, int):
                raise CustomOpError(f"custom_op {self.op_name!r}: dynamic[{param!r}] names the "
                                    f"dimension {d!r}; a dimension is an int")
            var = f"{param}_{d}" if var is None and d >= 0 else \
                f"{param}_last{-d}" if var is None else var
            if not isinstance(var, str) or not var.isidentifier():
                raise CustomOpError(f"custom_op {self.op_name!r}: dynamic[{param!r}][{d}] names "
                                    f"the size variable {var!r}; a name is an identifier")
            out[d] = var
        return out

    def __bool__(self):
        return bool(self.dims)

    def __repr__(self):
        return "DynamicDims(" + ", ".join(f"{self.params[i]}[{d}]={v}"
                                          for (i, d), v in sorted(self.dims.items())) + ")"

    def of_input(self, index, rank) -> dict:
        """``{dim (non-negative): variable name}`` of input *index* at *rank* (ArgumentError if
        a dynamic dimension is not there)."""
        out = {}
        for (i, d), var in self.dims.items():
            if i != index:
                continue
            if not -rank <= d < rank:
                raise ArgumentError(f"{self.op_name}: dynamic dimension {d} of "
                                    f"{self.params[i]!r} ({var}), which has rank {rank}")
            if d % rank in out:
                raise ArgumentError(f"{self.op_name}: dynamic names dimension {d % rank} of "
                                    f"{self.params[i]!r} twice ({out[d % rank]}, {var})")
            out[d % rank] = var
        return out

    def sizes(self, args) -> dict:
        """``{variable name: value}`` of a call (ints, or SymInts of a dynamic-shape trace);
        ArgumentError where two dimensions of one variable differ."""
        out, where = {}, {}
        for (i, d), var in sorted(self.dims.items()):
            value = args[i].shape[d]
            if var not in out:
                out[var], where[var] = value, (i, d)
            elif value != out[var]:          # a SymInt comparison guards on the outcome
                j, e = where[var]
                raise ArgumentError(f"{self.op_name}: {self.params[i]!r} has {value} along "
                                    f"dimension {d} and {self.params[j]!r} {out[var]} along "
                                    f"dimension {e}, but both are the size {var}")
        return out


def concrete_shape(shape, sizes) -> tuple:
    """A te shape with each size variable replaced by its value in *sizes* ({name: value})."""
    return tuple(sizes[d.name] if isinstance(d, ShapeVar) else int(d) for d in shape)


def sizes_of(placeholders, tensors) -> dict:
    """``{size variable name: value}`` that *tensors* give the te *placeholders* (each
    variable's first dimension)."""
    out = {}
    for p, t in zip(placeholders, tensors):
        for d, v in zip(p.shape, t.shape):
            if isinstance(d, ShapeVar):
                out.setdefault(d.name, v)
    return out


def check_on_cpu(op_name: str, params, args) -> None:
    """einloop's kernels run on the CPU: refuse meta, CUDA and every other device's tensors."""
    for p, a in zip(params, args):
        if a.device.type != "cpu":
            raise ArgumentError(f"{op_name}: argument {p!r} is on device {a.device}; einloop "
                                "kernels run on the CPU (pass tensor.cpu(); meta tensors are "
                                "for tracing, which the operator's fake implementation serves)")


def empty_like_te(t, sizes, device="cpu") -> torch.Tensor:
    """An uninitialised torch tensor shaped like the te tensor *t* at the dynamic *sizes*
    ({size variable: int or SymInt}; empty for a static operator), of its dtype."""
    return torch.empty(concrete_shape(t.shape, sizes), dtype=TORCH_DTYPES[t.dtype], device=device)


def as_array(t: torch.Tensor):
    """The NumPy array over contiguous CPU tensor *t*'s memory (no copy), for a kernel's own
    call.  torch has no NumPy form of bfloat16: its bits are viewed as ``ml_dtypes.bfloat16``,
    the array type einloop's bfloat16 kernels take."""
    if t.dtype is torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()
