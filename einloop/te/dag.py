"""The compute DAG of an operator: its operations in post-order and what a scheduler asks of them.

Every pass over an operator's dataflow graph (building a schedule's stages, counting flops, the
auto-scheduler's rules) asks the same questions: which operations, in which order, who reads
whom, which are elementwise, which reduce, which reuse data.  :class:`ComputeDAG` answers them
once, from the tensor declarations alone (no schedule), after the definitions of Ansor's
``ComputeDAG``/``AccessAnalyzer`` and MetaSchedule's block analyses.

The DAG is immutable: it describes the operator as declared, not a schedule's later changes
(``cache_write`` and ``cache_read`` add stages to a schedule, never to its DAG).
"""
from __future__ import annotations

import math

from ..errors import TEError
from ..ir import expr as E
from ..ir.visit import children, free_vars, reads_of, structural_key, walk
from .deferred import raise_deferred
from .extern import ExternOp
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from .tuple_reduce import ReducerPart
from .scan import is_scan
from .scatter import is_scatter, unpack_update, update_text

#: Calls whose recomputation in every consumer costs much more than a load (Ansor refuses to
#: inline ``exp`` for that reason; the other transcendental functions are as dear).
EXPENSIVE_CALLS = frozenset({"exp", "log", "pow", "tanh", "sigmoid", "erf"})

#: Binary operators counted as one flop each (index and comparison work is not counted).
_FLOP_BINARY = frozenset({E.BinOp.ADD, E.BinOp.SUB, E.BinOp.MUL, E.BinOp.DIV, E.BinOp.MAX,
                          E.BinOp.MIN})


class ComputeDAG:
    """The operations that compute *outputs* (a tensor or a list of tensors), inputs first.

    ``ops`` is the post-order of a depth-first walk from the outputs in the order given, each
    operation's inputs in the order it first reads them: the order of a schedule's stages.
    Methods taking an operation also accept its tensor.
    """

    __slots__ = ("outputs", "ops", "inputs", "_index", "_producers", "_consumers", "_reads",
                 "_frozen")

    def __init__(self, outputs):
        if isinstance(outputs, Tensor):
            outputs = [outputs]
        try:
            outputs = tuple(outputs)
        except TypeError:
            raise TEError(f"ComputeDAG: expected a tensor or a list of tensors, got "
                          f"{outputs!r}") from None
        if not outputs or not all(isinstance(t, Tensor) for t in outputs):
            raise TEError(f"ComputeDAG: expected a tensor or a non-empty list of tensors, got "
                          f"{outputs!r}")
        producers = {}

        def inputs_of(op):
            got = producers.get(id(op))
            if got is None:
                got = producers[id(op)] = tuple(dict.fromkeys(t.op for t in op.input_tensors))
            return got

        order, seen = [], set()
        for t in outputs:                        # iterative depth-first post-order
            if id(t.op) in seen:
                continue
            seen.add(id(t.op))
            stack = [(t.op, iter(inputs_of(t.op)))]
            while stack:
                op, todo = stack[-1]
                for p in todo:
                    if id(p) not in seen:
                        seen.add(id(p))
                        stack.append((p, iter(inputs_of(p))))
                        break
                else:
                    stack.pop()
                    order.append(op)
        for op in order:        # a read before a placeholder's start that no scan accepted
            raise_deferred(op)
        consumers = {id(op): [] for op in order}
        for op in order:
            for p in producers[id(op)]:
                consumers[id(p)].append(op)
        set_ = object.__setattr__
        set_(self, "outputs", tuple(dict.fromkeys(outputs)))
        set_(self, "ops", tuple(order))
        set_(self, "inputs", tuple(op.output() for op in order if isinstance(op, PlaceholderOp)))
        set_(self, "_index", {id(op): n for n, op in enumerate(order)})
        set_(self, "_producers", producers)
        set_(self, "_consumers", {k: tuple(v) for k, v in consumers.items()})
        set_(self, "_reads", {})
        set_(self, "_frozen", True)

    def __setattr__(self, name, value):
        raise AttributeError(f"a ComputeDAG is immutable (tried to set {name!r})")

    # structure ----------------------------------------------------------------------------------
    def _op(self, x) -> Operation:
        op = x.op if isinstance(x, Tensor) else x
        if self._index.get(id(op)) is None or self.ops[self._index[id(op)]] is not op:
            raise TEError(f"{getattr(x, 'name', x)} is not an operation of this DAG (its "
                          f"operations are {', '.join(o.name for o in self.ops)})")
        return op

    @property
    def compute_ops(self) -> tuple:
        """The compute operations, in post-order."""
        return tuple(op for op in self.ops if isinstance(op, ComputeOp))

    def index(self, op) -> int:
        """Position of *op* in :attr:`ops`."""
        return self._index[id(self._op(op))]

    def producers(self, op) -> tuple:
        """The operations *op* reads, each once, in the order it first reads them."""
        return self._producers[id(self._op(op))]

    def consumers(self, op) -> tuple:
        """The operations that read *op*, in post-order."""
        return self._consumers[id(self._op(op))]

    def reads(self, op) -> tuple:
        """Every tensor read in *op*'s body (also those in a reduction's condition or nested in
        indices); empty for a placeholder."""
        op = self._op(op)
        got = self._reads.get(id(op))
        if got is None:
            got = self._reads[id(op)] = tuple(reads_of(op.body)) \
                if isinstance(op, ComputeOp) else ()
        return got

    # classifications ----------------------------------------------------------------------------
    def is_placeholder(self, op) -> bool:
        return isinstance(self._op(op), PlaceholderOp)

    def is_output(self, op) -> bool:
        op = self._op(op)
        return any(t.op is op for t in self.outputs)

    def is_reduction(self, op) -> bool:
        """A compute whose body is a reduction (it has reduce axes)."""
        op = self._op(op)
        return isinstance(op, ComputeOp) and (bool(op.reduce_axis) or isinstance(op.body, E.Reduce))

    def is_injective(self, op) -> bool:
        """A compute without reduction: each output point is one expression of reads (elementwise,
        broadcast, padding, transposes and other index maps, gathers)."""
        op = self._op(op)
        return isinstance(op, ComputeOp) and not self.is_reduction(op)

    def has_data_reuse(self, op) -> bool:
        """A reduction in which some read misses an output axis of extent > 1, so the data it
        reads is used for several outputs and tiling pays off (GEMM: ``A[i, k]`` misses ``j``;
        conv2d: the weights miss the spatial axes).  A row sum or a pooling window reads each
        element for one output only: no reuse.  (Ansor's NeedsMultiLevelTiling, MetaSchedule's
        "a spatial block var unused by some read", restricted to reductions.)"""
        op = self._op(op)
        if not self.is_reduction(op):
            return False
        axes = [iv.var for iv in op.axis if not isinstance(iv.extent, int) or iv.extent > 1]
        for r in self.reads(op):
            used = set().union(*(free_vars(ix) for ix in r.indices))
            if any(v not in used for v in axes):
                return True
        return False

    def is_inlinable(self, op) -> bool:
        """Whether ``compute_inline`` may substitute *op* into its consumers: an injective
        compute that is not an output, nor a scan (whose steps read its own buffer).  Inlining
        a reduction would recompute the whole reduction per use; as a te reduction is always
        the whole body of its compute, an injective body never holds one (checked anyway)."""
        op = self._op(op)
        return (self.is_injective(op) and not self.is_output(op) and not is_scan(op)
                and not any(isinstance(x, E.Reduce) for x in walk(op.body))
                and not self.feeds_extern(op))

    def is_extern(self, op) -> bool:
        """An external stage (``te.extern``): a C function computes it, no loops of ours."""
        return isinstance(self._op(op), ExternOp)

    def feeds_extern(self, op) -> bool:
        """Does an external stage read *op*?  Then *op* is materialized: the C function
        reads its whole buffer, so it can be neither inlined nor computed at a loop."""
        return any(isinstance(c, ExternOp) for c in self.consumers(op))

    def has_expensive_call(self, op) -> bool:
        """Does compute *op*'s body call a function of :data:`EXPENSIVE_CALLS` (exp, log,
        tanh, ...), whose work would multiply wherever the stage is recomputed?"""
        op = self._op(op)
        return any(isinstance(x, E.Call) and x.name in EXPENSIVE_CALLS for x in walk(op.body))

    def is_strictly_inlinable(self, op) -> bool:
        """Inlinable and cheap to recompute wherever it is read (Ansor's IsStrictlyInlineable):
        no branch (``if_then_else``/select), no expensive call (:data:`EXPENSIVE_CALLS`), and
        every read a simple access: each index an output axis plus a constant, or a constant,
        with the axes in order and none twice (elementwise and broadcast, not transpose)."""
        op = self._op(op)
        if not self.is_inlinable(op):
            return False
        for x in walk(op.body):
            if isinstance(x, E.Select) or (isinstance(x, E.Call) and x.name in EXPENSIVE_CALLS):
                return False
        axes = {iv.var: n for n, iv in enumerate(op.axis)}
        return all(_is_simple_read(r, axes) for r in self.reads(op))

    def elementwise_consumer(self, op):
        """The one consumer that reads *op* point for point (same shape, every read of *op* indexed
        by its own axes in order) and that does not reduce if *op* does; else None.  Such a
        consumer can be fused into *op*'s loop nest (Ansor's
        HasSingleElementwiseMatchedConsumer)."""
        op = self._op(op)
        users = self.consumers(op)
        if len(users) != 1:
            return None
        (c,) = users
        if not isinstance(c, ComputeOp) or c.shape != op.shape \
                or (self.is_reduction(c) and self.is_reduction(op)):
            return None
        axes = [iv.var for iv in c.axis]
        for r in self.reads(c):
            if r.tensor.op is op and (len(r.indices) != len(axes)
                                      or not all(ix is v for ix, v in zip(r.indices, axes))):
                return None
        return c

    # work ---------------------------------------------------------------------------------------
    def flop_count(self, op=None) -> int:
        """Floating-point work of *op*, or of the whole DAG when *op* is None, as Ansor counts it.

        Per output point: one flop per arithmetic operator on values (``+ - * / max min``) and
        per intrinsic call; a reduction adds one for its combine per reduction point, so a
        multiply-add counts 2.  Not counted: index arithmetic (integer expressions without a
        tensor read: subscripts, conditions on loop variables), comparisons, selects, casts,
        loads, a reduction's ``where=`` condition, and placeholders.  Symbolic extents have no
        count: a TEError says so (count a declaration at concrete sizes).
        """
        symbolic = [d for o in (self.ops if op is None else [self._op(op)])
                    for d in _extents(o) if not isinstance(d, int)]
        if symbolic:
            raise TEError(f"the work of an operator with symbolic extents "
                          f"({', '.join(sorted({d.name for d in symbolic}))}) depends on their "
                          "values; count a declaration at concrete sizes")
        if op is None:
            return sum(self.flop_count(o) for o in self.ops)
        op = self._op(op)
        if not isinstance(op, ComputeOp):
            return 0
        per_point = 0
        for body in op.bodies:          # one per output of a multi-output compute
            if isinstance(body, E.Reduce):
                source = unpack_update(body)[0] if is_scatter(op) else body.source
                steps = math.prod(iv.extent for iv in body.axes)
                per_point += steps * (_value_ops(source) + 1)
            else:
                per_point += _value_ops(body)
        return math.prod(iv.extent for iv in op.axis) * per_point   # a scatter's: its free axes

    # identity -----------------------------------------------------------------------------------
    def structural_hash(self) -> str:
        """A hex digest equal for two declarations of the same operator, whatever their tensor
        and axis names: per operation in :attr:`ops` order its kind, shape, dtype, loop domains
        and body (tensors by DAG position, axes by position, reducers by what they compute), and
        which operations are the outputs.  Tuning logs key their records by it."""
        import hashlib
        parts = [tuple(self.index(t.op) for t in self.outputs)]
        # symbolic extents by order of first appearance: names do not count, sharing does
        shape_vars = {}

        def ext(d):
            if isinstance(d, int):
                return d
            return ("sym", shape_vars.setdefault(id(d), (len(shape_vars), d.min_value)))

        for op in self.ops:
            if isinstance(op, PlaceholderOp):
                parts.append(("P", tuple(map(ext, op.shape)), op.dtype)
                             + (("constant",) if op.constant else ()))
                continue
            if isinstance(op, ExternOp):
                parts.append(("E", tuple(map(ext, op.shape)), op.dtype, op.symbol, op.library,
                              tuple(self.index(t.op) for t in op.inputs)))
                continue
            parts.append(("C", tuple(map(ext, op.shape)), op.dtype,
                          tuple((iv.start, ext(iv.extent)) for iv in op.axis),
                          tuple((iv.start, ext(iv.extent)) for iv in op.reduce_axis),
                          self._body_key(op, shape_vars))
                         + ((("init", op.init.value),) if is_scatter(op) else ()))
        return hashlib.sha256(repr(tuple(parts)).encode()).hexdigest()[:32]

    def _body_key(self, op, shape_vars=None):
        numbering = {id(o.output(v)): ("T", n) if v == 0 else ("T", n, v)
                     for n, o in enumerate(self.ops) for v in range(o.num_outputs)}
        numbering.update((k, ("sym",) + v) for k, v in (shape_vars or {}).items())
        numbering.update((id(iv.var), ("axis", n)) for n, iv in enumerate(op.axis))
        numbering.update((id(iv.var), ("raxis", n)) for n, iv in enumerate(op.reduce_axis))
        for x in walk(op.body):
            if isinstance(x, E.Reduce):
                numbering[id(x.reducer)] = _reducer_key(x.reducer, x.dtype)
        if isinstance(op.body, tuple):              # a multi-output compute
            return tuple(structural_key(b, numbering, names=False) for b in op.body)
        return structural_key(op.body, numbering, names=False)

    # text ---------------------------------------------------------------------------------------
    def kinds(self, op) -> tuple:
        """The classification words that hold for *op*, for printing."""
        op = self._op(op)
        strict = self.is_strictly_inlinable(op)
        checks = (("placeholder", self.is_placeholder), ("extern", self.is_extern),
                  ("injective", self.is_injective),
                  ("reduction", self.is_reduction), ("data reuse", self.has_data_reuse),
                  ("strictly inlinable", lambda o: strict),
                  ("inlinable", lambda o: not strict and self.is_inlinable(o)),
                  ("output", self.is_output), ("scan", is_scan))
        return tuple(word for word, check in checks if check(op))

    def __str__(self):
        lines = []
        for op in self.ops:
            shape = str(tuple(op.shape))
            if isinstance(op, PlaceholderOp):
                const = ", constant" if op.constant else ""
                lines.append(f"{op.name} = placeholder({shape}, {op.dtype}{const})")
                continue
            if isinstance(op, ExternOp):
                args = ", ".join(t.name for t in op.inputs)
                lines.append(f"{op.name} = extern {op.symbol}({args})    # {shape} {op.dtype}; "
                             f"{'; '.join(self.kinds(op))}")
                continue
            idx = ", ".join(iv.var.name for iv in op.axis)
            doms = "".join(f", {iv.var.name} in {_dom(iv)}" for iv in op.reduce_axis)
            note = "; ".join(w for w in self.kinds(op) if w != "placeholder")
            work = (f"{self.flop_count(op)} flop" if all(isinstance(d, int) for d in _extents(op))
                    else "flop depend on the symbolic extents")
            text = update_text(op) if is_scatter(op) else f"{op.name}[{idx}] = {op.body}"
            lines.append(f"{text}    # {shape} {op.dtype}{doms}; {note}; "
                         f"{work}")
        return "\n".join(lines)

    def __repr__(self):
        return (f"ComputeDAG({', '.join(t.name for t in self.outputs)}: {len(self.ops)} ops, "
                f"{len(self.inputs)} inputs)")


def _extents(op) -> tuple:
    """Every extent of *op*: its shape and, for a compute, its reduce axes."""
    return tuple(op.shape) + tuple(iv.extent for iv in getattr(op, "reduce_axis", ()))


def _reducer_key(reducer, dtype) -> tuple:
    """What a reducer computes on *dtype* (its combine on two fresh operands and its identity),
    not its name: the same custom reducer declared twice hashes the same."""
    if isinstance(reducer, ReducerPart):        # a component of a tuple reduction
        comb = reducer.combiner
        operands = {id(v): n for n, v in enumerate(comb.lhs + comb.rhs)}
        return ("part", reducer.index,
                tuple(structural_key(e, dict(operands), names=False) for e in comb.combined),
                tuple(structural_key(e, {}, names=False) for e in comb.identities))
    x, y = E.Var("x", dtype), E.Var("y", dtype)
    return ("reducer", structural_key(reducer.combine(x, y), {id(x): 0, id(y): 1}, names=False),
            structural_key(reducer.identity(dtype), {}, names=False))


def _dom(iv):
    return f"0..{iv.extent}" if iv.start == 0 else f"{iv.start}..{iv.start + iv.extent}"


def _value_ops(e) -> int:
    """Arithmetic operations on values in *e*; reads (with their subscripts) and index math are
    not work."""
    if isinstance(e, E.TensorRead) or _is_index_math(e):
        return 0
    own = 1 if (isinstance(e, E.Binary) and e.op in _FLOP_BINARY) or isinstance(e, E.Call) else 0
    return own + sum(_value_ops(c) for c in children(e))


def _is_index_math(e) -> bool:
    return e.dtype == "int64" and not any(isinstance(x, E.TensorRead) for x in walk(e))


_OFFSET = frozenset({E.BinOp.ADD, E.BinOp.SUB})


def _is_simple_read(read, axes) -> bool:
    """Each index ``axis``, ``axis + c``, ``axis - c`` or ``c``; the axes in increasing order."""
    last = -1
    for ix in read.indices:
        if isinstance(ix, E.Binary) and ix.op in _OFFSET and isinstance(ix.b, E.Const):
            ix = ix.a
        elif isinstance(ix, E.Binary) and ix.op is E.BinOp.ADD and isinstance(ix.a, E.Const):
            ix = ix.b
        if isinstance(ix, E.Const):
            continue
        pos = axes.get(ix) if isinstance(ix, E.Var) else None
        if pos is None or pos <= last:
            return False
        last = pos
    return True
