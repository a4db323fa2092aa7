"""``te.TensorIntrin``: a hardware instruction (or a short sequence) declared by what it computes.

An intrinsic is a small reduction over dense tiles, written with ``te.compute`` on placeholders
(its *semantics*), plus its *implementation*: the body of an LLVM function that does the same
on the tiles.  ``s[T].tensorize(axis, intrin)`` (:mod:`einloop.schedule.tensorize`) checks that
the loops of stage ``T`` from ``axis`` inwards compute exactly the intrinsic's reduction, on
operands laid out as its tiles, and lowering replaces those loops by one call.  TVM's
``te.decl_tensor_intrin`` is the model; the implementation here is LLVM IR text, so that the
declaration layer needs no compiler.

The implementation contract.  The function einloop defines is::

    define internal void @<symbol>(ptr noalias %out, ptr noalias %in0, ptr noalias %in1, ...)

``%out`` points at the first element of the output tile, ``%inN`` at the first element of the
Nth input tile (inputs in the order ``inputs`` lists them, by default the order of the
compute's placeholders as it reads them); each tile is laid out densely, row-major in its
placeholder's shape.  The body *accumulates*: it adds the reduction over the tile to what
``%out`` holds (einloop initialises the accumulator itself) and returns ``void``.

A *strided* intrinsic (``strides=True``) takes operands that need not be dense: after each
pointer, the function gets one ``i64`` per dimension of that operand's placeholder but the last
(``%out.s0, %out.s1, ...``, ``%in0.s0, ...``): the distance, in elements, between consecutive
indices along that dimension.  The last dimension's elements are contiguous.  Each of the
compute's axes indexes at most one dimension of each operand, so that the strides are defined;
tensorize derives them from the operands' real layouts (constants), and the intrinsic reads
rows where they lie instead of needing a copy in its own layout (a hardware tile load with a
row stride, say).

An intrinsic may also have a *reset* form: a second body, with the same parameters, that
*stores* the reduction over the tile into ``%out`` whatever it held.  Where a tensorized tile's
reduction starts (the first iteration of the reduction loops outside the tile, or the whole
reduction inside it), einloop calls the reset form in place of the initialisation and the
accumulating call: an accumulator kept in registers (AMX's tiles) is zeroed there instead of
loaded from zeros just stored to memory.  LLVM
intrinsics it calls are listed, as ``declare`` lines, in *declarations*.  *features* are the
target features the code needs (``"avx2"``, ``"avx512vnni"``, ...): building for a target that
is not known to have them is refused (a :class:`~einloop.errors.BuildError`), since LLVM would
abort the process on an instruction it cannot select.

Intrinsics are registered by name when declared, so that a schedule step (which names the
intrinsic) can be replayed from a tuning log; declaring another intrinsic under a taken name is
a :class:`~einloop.errors.TEError`.
"""
from __future__ import annotations

import re
import threading

from ..errors import TEError
from ..ir import dtypes
from ..ir import expr as E
from ..ir.visit import walk
from ..arith.linear import affine_in
from ..arith.simplify import simplify
from .reduce import sum as te_sum
from .tensor import ComputeOp, PlaceholderOp, Tensor

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_DECLARE = re.compile(r"^\s*declare\b[^@]*@(\"[^\"]+\"|[A-Za-z0-9_.$-]+)")

_lock = threading.Lock()
_registry: dict = {}


class TensorIntrin:
    """A tensor intrinsic: its semantics (*compute*, the output of a ``te.compute`` reduction
    over placeholders), its LLVM implementation and the target features that needs.

    Parameters
    ----------
    name : str
        Unique name (letters, digits, ``_`` and ``.``): what schedule logs record.
    compute : Tensor
        ``te.compute(shape, lambda ...: te.sum(..., axis=...))`` reading placeholders of
        static shape, each once, at indices affine in the compute's axes.
    body : str
        The LLVM IR instructions of the function described in the module docstring (from its
        first instruction to ``ret void``).
    declarations : str
        ``declare`` lines of the LLVM intrinsics *body* calls.
    features : tuple of str
        Target features the body needs (LLVM names, without ``+``).
    inputs : list of Tensor, optional
        The placeholders in the order of the ``%in0, %in1, ...`` parameters.
    reset_body : str, optional
        The reset form described in the module docstring (LLVM IR as *body*): stores the
        reduction into ``%out`` instead of adding to it.
    strides : bool
        The function takes each operand's strides (the module docstring); else every operand
        is a dense tile.
    """

    def __init__(self, name, compute, body, declarations="", features=(), inputs=None,
                 reset_body=None, strides=False):
        if not isinstance(name, str) or not _NAME.match(name):
            raise TEError(f"TensorIntrin: name must be letters, digits, '_' and '.', starting "
                          f"with a letter or '_', got {name!r}")
        self.name = name
        where = f"TensorIntrin {name}"
        self.op = _check_compute(where, compute)
        self.reduce = self.op.body
        self.inputs = _check_inputs(where, self.op, inputs)
        if not isinstance(strides, bool):
            raise TEError(f"{where}: strides must be True or False, got {strides!r}")
        self.strided = strides
        if strides:
            _check_strided(where, self.op)
        for what, text in (("body", body), ("reset_body", reset_body)):
            if (text is not None or what == "body") and (
                    not isinstance(text, str) or "ret void" not in text):
                raise TEError(f"{where}: {what} must be LLVM IR text (str) that ends with "
                              f"'ret void', got {text!r}")
        if not isinstance(declarations, str):
            raise TEError(f"{where}: declarations must be LLVM 'declare' lines (str), got "
                          f"{declarations!r}")
        self.declarations = _check_declarations(where, declarations)
        if isinstance(features, str) or not all(isinstance(f, str) and f for f in features):
            raise TEError(f"{where}: features must be a tuple of LLVM feature names such as "
                          f"('avx2',), got {features!r}")
        self.features = tuple(f.lstrip("+") for f in features)
        self.body = body
        self.symbol = "einloop.tensorize." + name
        self.definition = self._definition(self.symbol, body)
        self.reset_body = reset_body
        #: the reset form's function (None without one)
        self.reset_symbol = None if reset_body is None else self.symbol + ".reset"
        self.reset_definition = None if reset_body is None else self._definition(
            self.reset_symbol, reset_body)
        _register(self)

    def _definition(self, symbol, body) -> str:
        params = []
        for name, shape in [("out", self.op.shape)] + [
                (f"in{n}", t.shape) for n, t in enumerate(self.inputs)]:
            params.append(f"ptr noalias %{name}")
            if self.strided:
                params += [f"i64 %{name}.s{d}" for d in range(len(shape) - 1)]
        params = ", ".join(params)
        return (f'define internal void @"{symbol}"({params}) alwaysinline nounwind {{\n'
                f"{body.strip()}\n}}\n")

    @property
    def shape(self) -> tuple:
        """The output tile's shape."""
        return tuple(self.op.shape)

    def signature(self) -> str:
        """One line naming the semantics (shapes and dtypes), for messages."""
        ins = ", ".join(f"{t.name}{list(t.shape)}:{t.dtype}" for t in self.inputs)
        red = ", ".join(f"{iv.name}:{iv.extent}" for iv in self.op.reduce_axis)
        return (f"{self.op.name}{list(self.op.shape)}:{self.op.output_dtype()} += sum over "
                f"({red}) of f({ins})")

    def __repr__(self):
        return f"TensorIntrin({self.name}: {self.signature()})"


def _check_compute(where, compute) -> ComputeOp:
    op = compute.op if isinstance(compute, Tensor) else None
    if not isinstance(op, ComputeOp) or type(op.body) is not E.Reduce or op.num_outputs != 1:
        raise TEError(f"{where}: the semantics must be one te.compute whose body is a "
                      f"te.sum(..., axis=...) reduction, got {compute!r}")
    red = op.body
    if red.reducer is not te_sum:
        raise TEError(f"{where}: the reduction is te.{red.reducer.name}; tensor intrinsics "
                      "accumulate sums (te.sum)")
    if red.condition is not None:
        raise TEError(f"{where}: the reduction has a where= condition; an intrinsic computes "
                      "every element of its tile")
    for iv in tuple(op.axis) + tuple(op.reduce_axis):
        if not isinstance(iv.extent, int) or not isinstance(iv.start, int) or iv.start != 0:
            raise TEError(f"{where}: axis {iv.name} must run over a constant range from 0, got "
                          f"[{iv.start}, {iv.extent})")
    return op


def _check_inputs(where, op, inputs) -> tuple:
    reads = [x for x in walk(op.body.source) if type(x) is E.TensorRead]
    seen = []
    for r in reads:
        if not isinstance(r.tensor.op, PlaceholderOp):
            raise TEError(f"{where}: it reads {r.tensor.name}, which is not a placeholder; an "
                          "intrinsic's operands are te.placeholder tiles")
        if any(not isinstance(d, int) for d in r.tensor.shape):
            raise TEError(f"{where}: operand {r.tensor.name} has a symbolic shape "
                          f"{r.tensor.shape}; tiles have constant shapes")
        if any(r.tensor.op is t.op for t in seen):
            raise TEError(f"{where}: operand {r.tensor.name} is read twice; each operand tile is "
                          "read once (declare a second placeholder)")
        seen.append(r.tensor)
        axes = {iv.var: (0, iv.extent - 1) for iv in tuple(op.axis) + tuple(op.reduce_axis)}
        flat = operand_index(r, axes)
        for iv in tuple(op.axis) + tuple(op.reduce_axis):
            if affine_in(flat, iv.var) is None:
                raise TEError(f"{where}: operand {r.tensor.name} is read at {list(r.indices)}, "
                              f"not affine in {iv.name}; tiles are read at affine indices")
    if inputs is None:
        return tuple(seen)
    inputs = list(inputs)
    if sorted(id(t.op) for t in inputs) != sorted(id(t.op) for t in seen):
        raise TEError(f"{where}: inputs must list each placeholder the compute reads once "
                      f"({', '.join(t.name for t in seen)}), got "
                      f"{', '.join(getattr(t, 'name', repr(t)) for t in inputs)}")
    return tuple(next(t for t in seen if t.op is x.op) for x in inputs)


def _check_strided(where, op):
    """A strided intrinsic: each axis indexes at most one dimension of each operand."""
    reads = [x for x in walk(op.body.source) if type(x) is E.TensorRead]
    for r in reads:
        for iv in tuple(op.axis) + tuple(op.reduce_axis):
            dims = [d for d, ix in enumerate(r.indices)
                    if (affine_in(ix, iv.var) or (1,))[0] != 0]
            if len(dims) > 1:
                raise TEError(f"{where}: axis {iv.name} indexes dimensions {dims} of operand "
                              f"{r.tensor.name} ({list(r.indices)}); a strided intrinsic "
                              "indexes each dimension by axes of its own, so that each "
                              "dimension has one stride")


def operand_index(read, ranges=None):
    """The flat, row-major element index of tensor read *read* in its tensor, simplified."""
    flat = None
    for d, ix in zip(read.tensor.shape, read.indices):
        flat = ix if flat is None else flat * E.as_expr(d) + ix
    return simplify(flat if flat is not None else E.const(0, dtypes.INDEX), ranges)


def _check_declarations(where, text) -> tuple:
    lines = tuple(x.strip() for x in text.splitlines() if x.strip())
    for line in lines:
        if not _DECLARE.match(line):
            raise TEError(f"{where}: declarations must be LLVM 'declare' lines, one per line; "
                          f"got {line!r}")
    return lines


def declared_name(line) -> str:
    """The function a ``declare`` line declares (as written, without ``@``)."""
    return _DECLARE.match(line).group(1)


def _register(intrin):
    key = (intrin.definition, intrin.reset_definition, intrin.declarations, intrin.features,
           intrin.strided, intrin.signature())
    with _lock:
        old = _registry.get(intrin.name)
        if old is not None and old[0] != key:
            raise TEError(f"TensorIntrin {intrin.name}: another intrinsic of that name is "
                          "declared already (schedule logs name intrinsics, so a name means "
                          "one intrinsic); choose another name")
        _registry[intrin.name] = (key, intrin)


def lookup(name) -> TensorIntrin:
    """The intrinsic declared as *name* (for replaying a schedule step)."""
    with _lock:
        got = _registry.get(name)
        known = sorted(_registry)
    if got is None:
        raise TEError(f"no tensor intrinsic is declared as {name!r}; declare it (te.TensorIntrin) "
                      "before replaying a schedule that uses it (import einloop.codegen.intrinsics "
                      f"for einloop's own); declared: {', '.join(known) or 'none'}")
    return got[1]


def registered() -> tuple:
    """All declared intrinsics, by name."""
    with _lock:
        return tuple(v[1] for _, v in sorted(_registry.items()))
