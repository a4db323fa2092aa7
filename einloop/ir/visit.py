"""The one traversal of the IR: visitors and mutators for expressions and statements.

A pass subclasses :class:`ExprVisitor`/:class:`ExprMutator` (or the statement ones) and overrides
only the ``visit_<Node>`` methods of the nodes it touches; the defaults walk into every child.
A mutator returns unchanged subtrees as the same object, so identity tells "nothing changed".
A node class the visitor does not know is an :class:`InternalError`, never a silent
pass-through: adding a node means adding it here, once.

The functions below the classes (``children``, ``rebuild``, ``transform``, ``substitute``,
``walk``, ``walk_stmt``, ``map_stmt``, ``structural_key``) are the small conveniences every
analysis uses, all built on the same per-node tables.
"""
from __future__ import annotations

from ..errors import InternalError
from . import expr as E
from . import stmt as S


# per-node structure -----------------------------------------------------------------------------

def _expr_children(e):
    """The child expressions of an expression node, in a fixed order."""
    t = type(e)
    if t is E.Binary or t is E.Compare or t is E.Logical:
        return (e.a, e.b)
    if t is E.Var or t is E.Const or t is E.ShapeVar:
        return ()
    if t is E.Not:
        return (e.a,)
    if t is E.Select:
        return (e.cond, e.true_value, e.false_value)
    if t is E.Cast:
        return (e.value,)
    if t is E.Call:
        return e.args
    if t is E.Load:
        return (e.index,)
    if t is E.TensorRead:
        return e.indices
    if t is E.Reduce:
        return (e.source,) if e.condition is None else (e.source, e.condition)
    raise InternalError(f"unknown expression node {t.__name__} ({e!r}): add it to einloop.ir.visit")


def _expr_rebuild(e, kids):
    t = type(e)
    if t is E.Binary:
        return E.Binary(e.op, kids[0], kids[1], e.dtype)
    if t is E.Compare:
        return E.Compare(e.op, kids[0], kids[1])
    if t is E.Logical:
        return E.Logical(e.op, kids[0], kids[1])
    if t is E.Not:
        return E.Not(kids[0])
    if t is E.Select:
        return E.Select(kids[0], kids[1], kids[2], e.dtype)
    if t is E.Cast:
        return E.Cast(e.dtype, kids[0])
    if t is E.Call:
        return E.Call(e.name, tuple(kids), e.dtype)
    if t is E.Load:
        return E.Load(e.buffer, kids[0], e.dtype)
    if t is E.TensorRead:
        return E.TensorRead(e.tensor, tuple(kids), e.dtype)
    if t is E.Reduce:
        return E.Reduce(e.reducer, kids[0], e.axes, kids[1] if len(kids) > 1 else None, e.dtype)
    raise InternalError(f"cannot rebuild expression node {t.__name__}: add it to einloop.ir.visit")


def stmt_exprs(s):
    """The expressions a statement holds directly (not those of its body)."""
    t = type(s)
    if t is S.Store:
        return (s.index, s.value)
    if t is S.IfThenElse:
        return (s.cond,)
    if t is S.LetStmt:
        return (s.value,)
    if t is S.Prefetch:
        return (s.index,)
    if t is S.ExternCall:
        return s.extents
    if t is S.IntrinsicCall:
        return s.indices
    if t is S.For:                      # a symbolic extent is an expression the loop holds
        return () if isinstance(s.extent, int) else (s.extent,)
    if t is S.Seq or t is S.Allocate:
        return ()
    raise InternalError(f"unknown statement node {t.__name__}: add it to einloop.ir.visit")


def stmt_children(s):
    """The statements nested directly in *s* (an absent else branch is left out)."""
    t = type(s)
    if t is S.Seq:
        return s.stmts
    if t is S.For or t is S.Allocate or t is S.LetStmt:
        return (s.body,)
    if t is S.IfThenElse:
        return (s.then_case,) if s.else_case is None else (s.then_case, s.else_case)
    if t is S.Store or t is S.Prefetch or t is S.ExternCall or t is S.IntrinsicCall:
        return ()
    raise InternalError(f"unknown statement node {t.__name__}: add it to einloop.ir.visit")


# visitors ------------------------------------------------------------------------------------------

class _Dispatch:
    """Dispatch ``visit(node)`` to ``visit_<ClassName>``, looked up once per class."""

    _table: dict

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls._table = {}

    def visit(self, node):
        method = self._table.get(type(node))
        if method is None:
            # a subclass node (ShapeVar) is visited as its base (Var) unless named itself
            method = next((m for m in (getattr(type(self), "visit_" + c.__name__, None)
                                       for c in type(node).__mro__) if m is not None), None)
            if method is None:
                raise InternalError(f"{type(self).__name__} does not know the IR node "
                                    f"{type(node).__name__}: add a visit_{type(node).__name__}")
            self._table[type(node)] = method
        return method(self, node)


class ExprVisitor(_Dispatch):
    """Walk an expression; override ``visit_<Node>`` for the nodes of interest.  Each default
    visits the children.  Results are not collected: keep state on ``self``."""

    def generic_visit(self, e):
        for c in _expr_children(e):
            self.visit(c)

    visit_Const = visit_Var = lambda self, e: None
    visit_Binary = visit_Compare = visit_Logical = visit_Not = generic_visit
    visit_Select = visit_Cast = visit_Call = visit_Load = generic_visit
    visit_TensorRead = visit_Reduce = generic_visit


class ExprMutator(_Dispatch):
    """Rebuild an expression bottom-up; a ``visit_<Node>`` override returns the replacement.
    Shared subtrees are rewritten once (memoised by identity), unchanged ones are kept."""

    def __init__(self):
        self._memo = {}

    def visit(self, e):
        got = self._memo.get(id(e))
        if got is None:
            got = super().visit(e)
            self._memo[id(e)] = got
            self._memo[id(got)] = got  # a result met again is not rewritten twice
        return got

    def generic_visit(self, e):
        kids = _expr_children(e)
        new = [self.visit(c) for c in kids]
        if all(n is c for n, c in zip(new, kids)):
            return e
        return _expr_rebuild(e, new)

    visit_Const = visit_Var = lambda self, e: e
    visit_Binary = visit_Compare = visit_Logical = visit_Not = generic_visit
    visit_Select = visit_Cast = visit_Call = visit_Load = generic_visit
    visit_TensorRead = visit_Reduce = generic_visit


class StmtVisitor(_Dispatch):
    """Walk a statement tree; ``visit_expr`` is called on every expression a statement holds
    (does nothing by default)."""

    def visit_expr(self, e):
        pass

    def generic_visit(self, s):
        for e in stmt_exprs(s):
            self.visit_expr(e)
        for c in stmt_children(s):
            self.visit(c)

    visit_For = visit_Store = visit_IfThenElse = visit_Seq = generic_visit
    visit_Allocate = visit_LetStmt = visit_Prefetch = visit_ExternCall = generic_visit
    visit_IntrinsicCall = generic_visit


class StmtMutator(_Dispatch):
    """Rebuild a statement tree bottom-up; ``visit_expr`` rewrites each expression a statement
    holds (identity by default).  Unchanged statements come back as the same object."""

    def visit_expr(self, e):
        return e

    def visit_Seq(self, s):
        new = tuple(self.visit(c) for c in s.stmts)
        return s if all(n is c for n, c in zip(new, s.stmts)) else S.Seq(new)

    def visit_For(self, s):
        extent = s.extent if isinstance(s.extent, int) else self.visit_expr(s.extent)
        body = self.visit(s.body)
        if body is s.body and extent is s.extent:
            return s
        return S.For(s.var, extent, s.kind, body)

    def visit_Store(self, s):
        index, value = self.visit_expr(s.index), self.visit_expr(s.value)
        return s if index is s.index and value is s.value \
            else S.Store(s.buffer, index, value, s.nontemporal)

    def visit_IfThenElse(self, s):
        cond, then = self.visit_expr(s.cond), self.visit(s.then_case)
        other = None if s.else_case is None else self.visit(s.else_case)
        if cond is s.cond and then is s.then_case and other is s.else_case:
            return s
        return S.IfThenElse(cond, then, other)

    def visit_Allocate(self, s):
        body = self.visit(s.body)
        return s if body is s.body else S.Allocate(s.buffer, body)

    def visit_LetStmt(self, s):
        value, body = self.visit_expr(s.value), self.visit(s.body)
        return s if value is s.value and body is s.body else S.LetStmt(s.var, value, body)

    def visit_Prefetch(self, s):
        index = self.visit_expr(s.index)
        return s if index is s.index else S.Prefetch(s.buffer, index, s.extent)

    def visit_ExternCall(self, s):
        extents = tuple(self.visit_expr(e) for e in s.extents)
        if all(n is o for n, o in zip(extents, s.extents)):
            return s
        return S.ExternCall(s.symbol, s.library, s.inputs, s.output, extents)

    def visit_IntrinsicCall(self, s):
        indices = tuple(self.visit_expr(e) for e in s.indices)
        if all(n is o for n, o in zip(indices, s.indices)):
            return s
        return S.IntrinsicCall(s.symbol, s.definition, s.declarations, s.features, s.buffers,
                               indices, s.spans, s.strides)


# functional conveniences ---------------------------------------------------------------------------

def children(e):
    """The child expressions of *e*."""
    return _expr_children(e)


def rebuild(e, kids):
    """A copy of *e* with new children *kids* (same order as :func:`children`); *e* itself when
    nothing changed."""
    if all(k is c for k, c in zip(kids, _expr_children(e))):
        return e
    return _expr_rebuild(e, kids)


class _FnMutator(ExprMutator):
    """``transform``'s mutator: every node is rebuilt from its children, then offered to *fn*.

    ``visit`` is the ExprMutator's memoised bottom-up rebuild written out in one method (the
    simplifier runs it on every node of every kernel, so the dispatch layers cost real time).
    """

    def __init__(self, fn, memo=None):
        super().__init__()
        self.fn = fn
        if memo is not None:
            self._memo = memo

    def visit(self, e):
        memo = self._memo
        got = memo.get(id(e))
        if got is not None and got[0] is e:     # the node itself is kept: its id is not reused
            return got[1]
        kids = _expr_children(e)
        y = e
        if kids:
            new = [self.visit(c) for c in kids]
            for n, c in zip(new, kids):
                if n is not c:
                    y = _expr_rebuild(e, new)
                    break
        r = self.fn(y)
        got = y if r is None else r
        memo[id(e)] = (e, got)
        memo[id(got)] = (got, got)  # a result met again is not rewritten twice
        return got


def transform(e, fn, memo=None):
    """Rebuild *e* bottom-up; ``fn(node)`` returns a replacement or None to keep the node.

    *memo* (a dict, empty at first) carries the rewrites over to later calls with the same
    *fn*, so that subtrees shared between expressions are rewritten once; the caller starts a
    new one whenever what *fn* decides may have changed.  A tuple of expressions (the body of a
    multi-output compute) is rebuilt part by part, into a tuple.
    """
    mutator = _FnMutator(fn, memo)
    if type(e) is tuple:
        return tuple(mutator.visit(x) for x in e)
    return mutator.visit(e)


def substitute(e, mapping):
    """Replace variables by expressions (``mapping``: Var -> Expr)."""
    if not mapping:
        return e
    return transform(e, lambda x: mapping.get(x) if type(x) is E.Var else None)


def _preorder(root, kids):
    stack = [root]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(kids(x)))


def walk(e):
    """Yield every node of *e* (an expression, or a tuple of them: a multi-output compute's
    body), parents before children."""
    if type(e) is tuple:
        return (x for part in e for x in _preorder(part, _expr_children))
    return _preorder(e, _expr_children)


def walk_stmt(s):
    """Yield every statement of *s*, parents before children."""
    return _preorder(s, stmt_children)


def free_vars(e):
    """The set of Vars in *e*."""
    return {x for x in walk(e) if type(x) is E.Var}


def reads_of(e):
    """All TensorRead nodes in *e*."""
    return [x for x in walk(e) if type(x) is E.TensorRead]


class _FnStmtMutator(StmtMutator):
    def __init__(self, stmt_fn, expr_fn):
        self.stmt_fn, self.expr_fn = stmt_fn, expr_fn

    def visit(self, s):
        y = super().visit(s)
        if self.stmt_fn is not None:
            r = self.stmt_fn(y)
            return y if r is None else r
        return y

    def visit_expr(self, e):
        return self.expr_fn(e) if self.expr_fn is not None else e


def map_stmt(s, stmt_fn=None, expr_fn=None):
    """Rebuild *s* bottom-up.  ``expr_fn(expr)`` rewrites each top-level expression;
    ``stmt_fn(stmt)`` may return a replacement for a rebuilt statement (or None)."""
    return _FnStmtMutator(stmt_fn, expr_fn).visit(s)


# structural key ------------------------------------------------------------------------------------

def structural_key(node, numbering: dict | None = None, names: bool = True):
    """A hashable key equal for structurally equal IR (expressions, statements, functions).

    Variables, buffers and tensors are told apart by identity.  With a *numbering* dict (the
    compile cache's mode), they are numbered by first appearance instead, so two functions that
    differ only in object identity get the same key, and a shared subtree is written once and
    then referred back to, so the key stays linear in the size of the DAG.  ``names=False``
    (numbering mode only) also leaves out the names of variables and buffers (a compute DAG's
    structural hash: the same operator declared with other names).
    """
    by_identity = numbering is None
    keep_names = names and not by_identity
    memo: dict = {}

    def ident(obj, prefix):
        if by_identity:
            return (prefix, id(obj))
        return (prefix, numbering.setdefault(id(obj), len(numbering)))

    def buf(b):
        if by_identity:
            return ident(b, "B")
        return ident(b, "B") + ((b.name,) if keep_names else ()) + (b.dtype, tuple(b.shape),
                                                                     b.scope.value)

    def var(v):
        if by_identity:
            return ident(v, "V")
        shape = ("shape", v.min_value) if isinstance(v, E.ShapeVar) else ()
        return ident(v, "V") + ((v.name,) if keep_names else ()) + (v.dtype,) + shape

    def key(x):
        k = memo.get(id(x))
        if k is not None:
            return k
        t = type(x)
        if t is E.Var or t is E.ShapeVar:
            k = var(x)
        elif t is E.Const:
            k = ("C", x.value, x.dtype)
        elif isinstance(x, E.Expr):
            head = (t.__name__, getattr(x, "op", None), getattr(x, "name", None), x.dtype)
            if t is E.Load:
                head += buf(x.buffer)
            elif t is E.TensorRead:
                head += ident(x.tensor, "T")
            elif t is E.Reduce:
                head += ident(x.reducer, "R") + tuple(var(a.var) for a in x.axes)
            k = head + tuple(key(c) for c in _expr_children(x))
        elif isinstance(x, S.Stmt):
            head = (t.__name__,)
            if t is S.For:
                head += var(x.var) + (x.extent if isinstance(x.extent, int) else key(x.extent),
                                      x.kind.value)
            elif t is S.LetStmt:
                head += var(x.var)
            elif t is S.Store:
                head += buf(x.buffer) + (x.nontemporal,)
            elif t is S.Allocate:
                head += buf(x.buffer)
            elif t is S.Prefetch:
                head += buf(x.buffer) + (x.extent,)
            elif t is S.ExternCall:
                head += (x.symbol, x.library) + tuple(buf(b) for b in x.inputs + (x.output,))
            elif t is S.IntrinsicCall:
                head += (x.symbol, x.definition, x.declarations, x.features, x.spans,
                         x.strides) \
                    + tuple(buf(b) for b in x.buffers)
            elif t is S.IfThenElse:
                head += (x.else_case is None,)
            k = head + tuple(key(c) for c in stmt_exprs(x)) \
                + tuple(key(c) for c in stmt_children(x))
        elif t is S.LoweredFunc:
            k = ("func", x.name, tuple(buf(b) for b in x.args), tuple(buf(b) for b in x.temps),
                 key(x.body))
        else:
            raise InternalError(f"structural_key: unknown IR node {t.__name__}")
        if by_identity:
            memo[id(x)] = k
        else:
            memo[id(x)] = ("@", len(memo))   # refer back to the first occurrence
        return k

    return key(node)
