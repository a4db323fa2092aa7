"""The loop IR that lowering produces and codegen consumes.

Semantics, in brief:
- Buffers are flat, row-major arrays of one dtype.  ``Load``/``Store`` take a flat element index
  (an int64 expression).  Every index lowering emits is in bounds.
- ``For`` runs ``var`` over ``0 .. extent-1`` (``extent`` a positive Python int).  Its ``kind``
  says how: ``serial``; ``parallel`` (iterations are independent and run on several threads);
  ``vectorized`` (iterations are independent and become SIMD lanes; a loop of this kind has no
  loops inside it); ``unrolled`` (replicated by the unroll pass before codegen).
- ``Prefetch`` asks for ``extent`` elements of a buffer from ``index`` on to be brought into
  the cache: a hint with no effect on any value, so its addresses may lie outside the buffer.
- ``ExternCall`` calls an external C function with the data pointers of its input buffers, then
  its output buffer's, then ``extents`` (int64 values: every dimension of every buffer in that
  order); it writes the whole output buffer and nothing else.
- ``IntrinsicCall`` runs a tensor intrinsic (``s[T].tensorize``) on tiles: it calls the LLVM
  function ``symbol`` (defined by ``definition``) with a pointer to element ``indices[n]`` of
  each of ``buffers`` (the output tile first, which it reads and updates; then the inputs').
  The tiles' layouts were checked when lowering; the call touches only their elements.
- ``Allocate`` introduces a ``local`` buffer for its body: per thread when it sits inside a
  parallel loop.  ``temp`` buffers are whole-kernel intermediates provided by the caller;
  ``arg`` buffers are the kernel's arguments.
- Expressions are the nodes of :mod:`einloop.ir.expr` (with :class:`~einloop.ir.expr.Load`);
  tensor reads and reductions no longer appear after lowering.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import enum

from .expr import Buffer, Load, Scope, Var  # noqa: F401  (re-exported: the loop IR's vocabulary)


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"


class Stmt:
    __slots__ = ()

    def __str__(self):
        from .printer import stmt_str
        return stmt_str(self)


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    var: Var
    extent: int
    kind: ForKind
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Store(Stmt):
    """``buffer[index] = value``.  *nontemporal*: a streaming store (``s[T].nontemporal()``)
    that writes the line to memory around the caches instead of reading it in first; only
    where each element is stored once."""
    buffer: Buffer
    index: Expr
    value: Expr
    nontemporal: bool = False


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Seq(Stmt):
    stmts: tuple


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Prefetch(Stmt):
    """Bring ``buffer[index .. index + extent - 1]`` (flat elements) into the cache before it is
    read: memory latency overlapped with the work in between, where the hardware prefetchers do
    not look ahead (they stop at page boundaries and follow few streams)."""
    buffer: Buffer
    index: Expr
    extent: int


@dataclass(frozen=True, eq=False, repr=False)
class LetStmt(Stmt):
    """Bind ``var`` to ``value`` (evaluated once) within ``body``."""
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class ExternCall(Stmt):
    """``symbol(inputs..., output, extents...)``: an external function (``te.extern``) found
    in ``library`` (a path or a loader-searched name; None: already in the process)."""
    symbol: str
    library: str | None
    inputs: tuple        # Buffers it reads, in parameter order
    output: Buffer       # the buffer it writes, whole
    extents: tuple       # int64 Exprs: the dimensions of every buffer, inputs then output


@dataclass(frozen=True, eq=False, repr=False)
class IntrinsicCall(Stmt):
    """One call of a tensor intrinsic's implementation on tiles (``s[T].tensorize``).

    ``symbol`` names the LLVM function that ``definition`` (LLVM IR text) defines;
    ``declarations`` are the ``declare`` lines it needs (LLVM intrinsics); ``features`` are the
    target features it needs (``avx2``, ``avx512vnni``...), checked by codegen.  ``buffers[0]``
    is the output (accumulated into), the rest the inputs, each passed as a pointer to element
    ``indices[n]``; the call touches ``spans[n]`` elements from there (what analyses such as
    prefetching read as the tile's extent).  ``strides``: for a strided intrinsic, per buffer
    the strides (ints, elements) passed after its pointer; empty for dense tiles."""
    symbol: str
    definition: str
    declarations: tuple
    features: tuple
    buffers: tuple       # Buffers: the output tile's, then each input's
    indices: tuple       # int64 Exprs: the flat element index of each tile's first element
    spans: tuple = ()    # ints: the elements from each tile's first to its last (dense: its size)
    strides: tuple = ()  # per buffer a tuple of ints (a strided intrinsic's), else empty


def seq(*stmts) -> Stmt:
    """Flatten nested sequences and drop ``None``; a single statement is returned as is."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


@dataclass(frozen=True, eq=False)
class LoweredFunc:
    """A lowered kernel: its argument buffers (in call order), temp buffers and body, and the
    symbolic extents it takes after the buffers (each the value of one ShapeVar, which a call
    reads off its arguments' shapes)."""
    name: str
    args: tuple          # Buffers of scope ARG, in the order the kernel is called with
    temps: tuple         # Buffers of scope TEMP
    body: Stmt
    attrs: dict = field(default_factory=dict)
    vars: tuple = ()     # ShapeVars, in the order the kernel takes them

    def __str__(self):
        from .printer import func_str
        return func_str(self)
