"""Rebuilding statements: apply a function to every expression, or to every statement."""
from ..loop_ir import For, Store, IfThenElse, Seq, Allocate, LetStmt


def map_stmt(s, stmt_fn=None, expr_fn=None):
    """Rebuild *s* bottom-up.  ``expr_fn(expr)`` rewrites each top-level expression;
    ``stmt_fn(stmt)`` may return a replacement for a rebuilt statement (or None)."""
    def go(x):
        if isinstance(x, Seq):
            y = Seq(tuple(go(c) for c in x.stmts))
        elif isinstance(x, For):
            y = For(x.var, x.extent, x.kind, go(x.body))
        elif isinstance(x, Store):
            y = Store(x.buffer, ex(x.index), ex(x.value)) if expr_fn else x
        elif isinstance(x, IfThenElse):
            y = IfThenElse(ex(x.cond), go(x.then_case),
                           None if x.else_case is None else go(x.else_case))
        elif isinstance(x, Allocate):
            y = Allocate(x.buffer, go(x.body))
        elif isinstance(x, LetStmt):
            y = LetStmt(x.var, ex(x.value), go(x.body))
        else:
            y = x
        if stmt_fn is not None:
            r = stmt_fn(y)
            return y if r is None else r
        return y

    def ex(e):
        return expr_fn(e) if expr_fn else e
    return go(s)
