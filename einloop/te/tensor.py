"""Tensors and the operations that produce them: placeholders (inputs) and computes."""
from __future__ import annotations

from dataclasses import dataclass
import enum
import numbers
import weakref

from ..errors import TEError
from ..ir import dtypes
from ..ir.expr import Var, TensorRead, as_expr
from .symbolic import check_extent


class IterKind(enum.Enum):
    DATA = "data"
    REDUCE = "reduce"


@dataclass(frozen=True, eq=False)
class IterVar:
    """A loop of an operation: ``var`` runs over ``[start, start + extent)``."""
    var: Var
    start: int
    extent: int
    kind: IterKind

    @property
    def name(self):
        return self.var.name

    def __repr__(self):
        return f"IterVar({self.var.name}, {self.start}..{self.start + self.extent}, {self.kind.value})"

    # An IterVar can stand wherever an expression is expected, as in TVM.
    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __truediv__(self, o): return self.var / o
    def __rtruediv__(self, o): return o / self.var
    def __floordiv__(self, o): return self.var // o
    def __rfloordiv__(self, o): return o // self.var
    def __mod__(self, o): return self.var % o
    def __rmod__(self, o): return o % self.var
    def __neg__(self): return -self.var
    def __lt__(self, o): return self.var < o
    def __le__(self, o): return self.var <= o
    def __gt__(self, o): return self.var > o
    def __ge__(self, o): return self.var >= o
    def __eq__(self, o): return self.var == o        # builds a comparison, as on expressions
    def __ne__(self, o): return self.var != o
    __hash__ = object.__hash__

    def astype(self, dtype):
        return self.var.astype(dtype)


def check_shape(shape, where):
    """Normalise a shape to a tuple of positive Python ints, or raise TEError."""
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TEError(f"{where}: shape must be a tuple of positive integers, got {shape!r}") from None
    if not shape:
        raise TEError(f"{where}: shape is empty; einloop tensors have at least one dimension "
                      "(use shape (1,) for a scalar)")
    out = []
    for d in shape:
        symbolic = check_extent(d, f"{where}: shape {shape!r}")
        if symbolic is not None:
            out.append(symbolic)
            continue
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or int(d) <= 0:
            raise TEError(f"{where}: shape {shape!r} has the entry {d!r}; every dimension must be "
                          "a positive integer or a symbolic extent (te.var / te.size_var)")
        out.append(int(d))
    return tuple(out)


class Operation:
    """Base of the operations that define a tensor (one, or several for a multi-output compute)."""
    name: str
    shape: tuple
    dtype: str

    @property
    def num_outputs(self) -> int:
        return 1

    def output(self, index=0) -> Tensor:
        if index != 0:
            _no_such_output(self, index)
        return self._output

    def output_dtype(self, index=0) -> str:
        """The dtype of output *index* (all outputs share the shape)."""
        return self.dtype

    @property
    def input_tensors(self):
        return ()


def _no_such_output(op, index):
    raise TEError(f"{op.name} has {op.num_outputs} output(s); output({index!r}) does not exist "
                  f"(valid indices 0..{op.num_outputs - 1})")


class PlaceholderOp(Operation):
    """An input.  *constant*: its values stay the same from one call of the kernel to the
    next (a model's weight), so work that depends on it alone, such as packing it into the
    layout a register tile reads, may be done once instead of on every call (see
    :func:`placeholder`)."""

    def __init__(self, name, shape, dtype, constant=False):
        self.name, self.shape, self.dtype = name, shape, dtype
        self.constant = bool(constant)
        self._output = Tensor(self)

    def __repr__(self):
        const = ", constant" if self.constant else ""
        return f"placeholder({self.name}, {self.shape}, {self.dtype}{const})"


class ComputeOp(Operation):
    """``body`` evaluated at every point of ``axis``; ``body`` may be a top-level Reduce.

    A multi-output compute (``te.compute(shape, lambda i: (e0, e1))``) has a tuple ``body``,
    one expression per output, all computed in one loop nest; ``bodies`` is always that tuple
    (of one expression for a single output), so code that maps ``op.body`` through
    :func:`~einloop.ir.visit.transform` and rebuilds the op keeps every output.  Its parts are
    all reductions over the same axes (one tuple reduction such as argmax, or independent
    reducers) or none is.
    """

    #: reads of placeholders before their start, held for ``te.scan`` (:mod:`.deferred`)
    deferred = ()

    def __init__(self, name, axis, body, reduce_axis=(), attrs=None):
        self.name = name
        self.axis = tuple(axis)
        parts = tuple(body) if isinstance(body, (tuple, list)) else (body,)
        self.body = parts if len(parts) > 1 else parts[0]
        self.reduce_axis = tuple(reduce_axis)
        self.shape = tuple(iv.extent for iv in self.axis)
        self.dtype = self.bodies[0].dtype
        self.attrs = dict(attrs or {})
        self._outputs = tuple(Tensor(self, n) for n in range(len(self.bodies)))
        self._output = self._outputs[0]

    @property
    def bodies(self) -> tuple:
        """One expression per output (derived from ``body``, so a subclass that sets its body
        after construction, as a scan does, keeps the two in step)."""
        return self.body if isinstance(self.body, tuple) else (self.body,)

    @property
    def num_outputs(self) -> int:
        return len(self.bodies)

    def output(self, index=0) -> Tensor:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral) \
                or not 0 <= index < len(self._outputs):
            _no_such_output(self, index)
        return self._outputs[index]

    def output_dtype(self, index=0) -> str:
        return self.bodies[index].dtype

    @property
    def input_tensors(self):
        from ..arith import reads_of
        seen = []
        for r in reads_of(self.bodies):
            if r.tensor not in seen:
                seen.append(r.tensor)
        return tuple(seen)

    def __repr__(self):
        return f"compute({self.name}, {self.shape}, {self.dtype})"


class Tensor:
    """Output ``value_index`` of an operation (TVM's ``Tensor(op, value_index)``); index it
    (``A[i, j]``) to read it in another compute.

    The outputs of a multi-output compute ``T`` are named ``T.v0``, ``T.v1``, ...; a single
    output has its operation's name.
    """

    __slots__ = ("op", "value_index")

    def __init__(self, op, value_index=0):
        self.op = op
        self.value_index = value_index

    @property
    def name(self):
        op = self.op
        return op.name if getattr(op, "num_outputs", 1) == 1 else f"{op.name}.v{self.value_index}"

    @property
    def dtype(self):
        op = self.op
        return op.dtype if self.value_index == 0 else op.output_dtype(self.value_index)

    shape = property(lambda self: self.op.shape)
    ndim = property(lambda self: len(self.op.shape))

    def __getitem__(self, indices):
        held = getattr(self.op, "deferred", ())
        if held:            # a read before the start of a placeholder only a scan may accept
            raise held[0][1]
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise TEError(f"{self.name} has {self.ndim} dimension(s) {self.shape} but was indexed "
                          f"with {len(indices)} index(es); write {self.name}[{', '.join('ijklmn'[:self.ndim])}]")
        out = []
        for axis, ix in enumerate(indices):
            if isinstance(ix, IterVar):
                ix = ix.var
            if isinstance(ix, slice) or ix is Ellipsis:
                raise TEError(f"{self.name}[...]: slices are not supported in a compute; index "
                              "each dimension with an expression")
            ix = as_expr(ix)
            if not dtypes.is_int(ix.dtype):
                raise TEError(f"index {ix} of {self.name} along axis {axis} has dtype {ix.dtype}; "
                              "indices must be integers (cast with .astype('int64'))")
            if ix.dtype != dtypes.INDEX:
                ix = ix.astype(dtypes.INDEX)
            v = getattr(ix, "value", None)
            n = self.shape[axis]
            if isinstance(v, int) and not (0 <= v < n if isinstance(n, int) else 0 <= v):
                raise TEError(f"constant index {v} of {self.name} along axis {axis} is outside "
                              f"0..{n - 1}")
            out.append(ix)
        return TensorRead(self, tuple(out), self.dtype)

    def __repr__(self):
        return f"Tensor({self.name}, shape={self.shape}, dtype={self.dtype})"

    def __bool__(self):
        return True

    def _no_arith(self, *_):
        raise TEError(f"arithmetic on the tensor {self.name} itself is not defined; index it "
                      f"inside te.compute, e.g. te.compute(shape, lambda i, j: {self.name}[i, j] + 1)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _no_arith


def placeholder(shape, dtype="float32", name="placeholder", constant=False) -> Tensor:
    """An input tensor of *shape* (ints and symbolic extents) and *dtype* (float32 by default).

    ``constant=True`` declares that its values stay the same from call to call, as a model's
    weights do: the auto-scheduler then packs it once, at the root, and measures candidates
    with that packing done ahead of the call (Ansor's layout rewrite of constant weights);
    the PyTorch backend runs such a pack again only when the tensor changes.  A kernel built
    with ``einloop.build`` still computes everything on every call.  It is part of the
    operator's identity: tuning logs keep the schedules of the two declarations apart."""
    shape = check_shape(shape, f"placeholder {name!r}")
    dtype = dtypes.canonical(dtype, f"placeholder {name!r}")
    if not isinstance(constant, bool):
        raise TEError(f"placeholder {name!r}: constant must be True or False, got {constant!r}")
    return PlaceholderOp(str(name), shape, dtype, constant).output()


def constant_positions(tensors) -> frozenset:
    """The positions of the constant placeholders among a kernel's argument *tensors*."""
    return frozenset(n for n, t in enumerate(tensors)
                     if isinstance(t.op, PlaceholderOp) and t.op.constant)


_counter = [0]


def reduce_axis(dom, name=None) -> IterVar:
    """A reduction axis over ``dom`` = (start, stop) or an extent."""
    if isinstance(dom, (numbers.Integral, Var)):
        dom = (0, dom)
    try:
        start, stop = dom
    except (TypeError, ValueError):
        raise TEError(f"reduce_axis: domain must be (start, stop) or an extent, got {dom!r}") from None
    if name is None:
        _counter[0] += 1
        name = f"rv{_counter[0]}"
    if check_extent(stop, f"reduce_axis {name}: domain {dom!r}") is not None:
        if not (isinstance(start, numbers.Integral) and int(start) == 0):
            raise TEError(f"reduce_axis {name}: a symbolic domain starts at 0, got {dom!r}; "
                          "shift the index instead (k runs over 0..n, read A[k + start])")
        extent = stop
    elif not all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                 for x in (start, stop)) or stop <= start:
        raise TEError(f"reduce_axis: domain {dom!r} must be two integers with start < stop, or "
                      "(0, n) with n a symbolic extent (te.var / te.size_var)")
    else:
        start, extent = int(start), int(stop - start)
    iv = IterVar(Var(str(name)), int(start), extent, IterKind.REDUCE)
    _REDUCE_AXES[id(iv.var)] = iv
    return iv


#: id(Var) -> IterVar of every reduce axis alive (keyed by identity: Expr '==' builds nodes).
_REDUCE_AXES: "weakref.WeakValueDictionary[int, IterVar]" = weakref.WeakValueDictionary()


def reduce_axis_of(var):
    """The reduce-axis IterVar owning *var*, or None."""
    iv = _REDUCE_AXES.get(id(var))
    return iv if iv is not None and iv.var is var else None
