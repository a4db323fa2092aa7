"""Give every loop and let variable of a function a distinct name.

Stages reuse the names of their axes (two stages may both have an ``i``); distinct names keep the
printed IR unambiguous, which also makes it a safe key for the compiled-kernel cache.
"""
from ...arith import substitute
from ...ir.expr import Var
from ...ir.stmt import For, LetStmt
from ...ir.visit import map_stmt


def unique_names(stmt):
    owner = {}          # name -> Var object that holds it
    rename = {}         # Var -> new Var

    def claim(var):
        if owner.setdefault(var.name, var) is var:
            return
        n = 1
        while f"{var.name}_{n}" in owner:
            n += 1
        new = Var(f"{var.name}_{n}", var.dtype)
        owner[new.name] = new
        rename[var] = new

    def visit(s):
        if isinstance(s, (For, LetStmt)) and s.var not in rename:
            claim(s.var)
        return None
    # first pass: decide names in program order (outer loops keep theirs)
    _walk(stmt, visit)
    if not rename:
        return stmt

    def fn(s):
        if isinstance(s, For) and s.var in rename:
            return For(rename[s.var], s.extent, s.kind, s.body)
        if isinstance(s, LetStmt) and s.var in rename:
            return LetStmt(rename[s.var], s.value, s.body)
        return None
    return map_stmt(stmt, stmt_fn=fn, expr_fn=lambda e: substitute(e, rename))


def _walk(s, fn):
    fn(s)
    for child in ("body", "then_case", "else_case"):
        c = getattr(s, child, None)
        if c is not None:
            _walk(c, fn)
    for c in getattr(s, "stmts", ()):
        _walk(c, fn)
