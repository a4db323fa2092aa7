"""The walk behind the tuner's features: every store with its chain of loops and the shape of its
value, and the whole-kernel statement counts.

Counts are those of the IR with unrolled loops expanded, whichever IR this is, so a nest lowered
with ``expand_unroll=False`` is counted like its expansion.
"""
from __future__ import annotations

from ....ir.expr import BinOp
from ....ir.stmt import ForKind
from ....ir.visit import ExprVisitor, StmtVisitor


def elem_bytes(dtype: str) -> int:
    """Bytes of one element (``bool``: 1; unknown widths: 4)."""
    if dtype == "bool":
        return 1
    digits = "".join(c for c in dtype if c.isdigit())
    return max(1, int(digits) // 8) if digits else 4


_FLOAT_OPS = frozenset((BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV, BinOp.MAX, BinOp.MIN))


class Loop:
    """One loop of extent > 1 around a store (or the virtual loop of unroll replicas)."""
    __slots__ = ("key", "var", "extent", "kind")

    def __init__(self, key, var, extent, kind):
        self.key = key          # identity of the For node (None for the virtual loop)
        self.var = var          # id of the loop variable (None for the virtual loop)
        self.extent = extent
        self.kind = kind        # a ForKind, or feature_layout._VIRTUAL


class StoreRec:
    """One store: where it is (loop chain, enclosing ifs) and what its value does."""
    __slots__ = ("buffer", "index", "chain", "n_if", "flops", "intr", "sel", "loads", "sig")

    def __init__(self, store, chain, n_if):
        self.buffer, self.index, self.chain, self.n_if = store.buffer, store.index, chain, n_if
        self.flops = self.intr = self.sel = 0
        self.loads = []
        scan = _ValueScan(self)
        scan.visit(store.value)
        self.sig = tuple(scan.sig)      # the value's shape: equal in unroll replicas


class _ValueScan(ExprVisitor):
    """Count float ops, intrinsic calls and selects of a stored value, collect its loads (not
    looking into their indices), and write the shape signature (constants and variables as
    placeholders, so replicas of one unrolled body agree)."""

    def __init__(self, rec):
        self.rec = rec
        self.sig = []

    def visit_Binary(self, e):
        self.sig.append(e.op.value)
        if e.op in _FLOAT_OPS and e.dtype.startswith("float"):
            self.rec.flops += 1
        self.visit(e.a)
        self.visit(e.b)

    def visit_Load(self, e):
        self.sig.append(("L", id(e.buffer)))
        self.rec.loads.append(e)

    def visit_Const(self, e):
        self.sig.append("c")

    def visit_Var(self, e):
        self.sig.append("v")

    def visit_Call(self, e):
        self.sig.append(("C", e.name))
        self.rec.flops += 1
        self.rec.intr += 1
        for a in e.args:
            self.visit(a)

    def visit_Select(self, e):
        self.sig.append("S")
        self.rec.sel += 1
        self.visit(e.cond)
        self.visit(e.true_value)
        self.visit(e.false_value)

    def visit_Cast(self, e):
        self.sig.append(("T", e.dtype))
        self.visit(e.value)

    def visit_Compare(self, e):
        self.sig.append(e.op.value)
        self.visit(e.a)
        self.visit(e.b)

    visit_Logical = visit_Compare

    def visit_Not(self, e):
        self.sig.append("!")
        self.visit(e.a)

    def _not_lowered(self, e):
        raise TypeError(f"unexpected expression node {type(e).__name__} in a lowered store")

    visit_TensorRead = visit_Reduce = _not_lowered


class NestScan(StmtVisitor):
    """One walk over a function body: ``stores`` (a :class:`StoreRec` each, in program order),
    ``lets`` (id of a let variable -> its value) and the whole-kernel counts."""

    def __init__(self):
        self.stores = []
        self.lets = {}
        self.chain = []
        self.depth = 0
        self.n_if = 0               # ifs around the current statement
        self.mult = 1               # product of the extents of the enclosing unrolled loops
        self.n_loops = 0
        self.max_depth = 0
        self.n_par = 0
        self.n_vec = 0
        self.max_lanes = 1
        self.n_store_stmts = 0
        self.n_alloc = 0
        self.local_bytes = 0
        self.local_max = 0
        self.n_ifs = 0
        self.n_lets = 0

    def visit_For(self, s):
        ext = s.extent
        if isinstance(ext, bool) or not isinstance(ext, int) or ext < 1:
            raise ValueError(f"loop {s.var} has extent {ext!r}")
        kind = s.kind
        if not isinstance(kind, ForKind):
            raise ValueError(f"loop {s.var} has kind {kind!r}")
        mult, depth = self.mult, self.depth
        if kind is ForKind.UNROLLED:
            self.mult = mult * ext
        else:
            self.n_loops += mult
            self.depth = depth + 1
            self.max_depth = max(self.max_depth, self.depth)
            if kind is ForKind.PARALLEL:
                self.n_par += mult
            elif kind is ForKind.VECTORIZED:
                self.n_vec += mult
                self.max_lanes = max(self.max_lanes, ext)
        if ext > 1:
            self.chain.append(Loop(id(s), id(s.var), ext, kind))
            self.visit(s.body)
            self.chain.pop()
        else:
            self.visit(s.body)
        self.mult, self.depth = mult, depth

    def visit_Store(self, s):
        self.stores.append(StoreRec(s, tuple(self.chain), self.n_if))
        self.n_store_stmts += self.mult

    def visit_IfThenElse(self, s):
        self.n_ifs += self.mult
        self.n_if += 1
        self.visit(s.then_case)
        if s.else_case is not None:
            self.visit(s.else_case)
        self.n_if -= 1

    def visit_Allocate(self, s):
        b = s.buffer
        nbytes = b.size * elem_bytes(b.dtype)
        self.n_alloc += self.mult
        self.local_bytes += nbytes * self.mult
        self.local_max = max(self.local_max, nbytes)
        self.visit(s.body)

    def visit_LetStmt(self, s):
        self.n_lets += self.mult
        self.lets[id(s.var)] = s.value
        self.visit(s.body)
