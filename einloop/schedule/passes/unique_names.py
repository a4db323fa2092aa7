"""Give every loop and let variable of a function a distinct name.

Stages reuse the names of their axes (two stages may both have an ``i``); distinct names keep the
printed IR unambiguous, which also makes it a safe key for the compiled-kernel cache.
"""
from ...arith import substitute
from ...ir.expr import Var
from ...ir.stmt import For, LetStmt
from ...ir.visit import map_stmt, walk_stmt


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

    # first pass: decide names in program order (outer loops keep theirs)
    for s in walk_stmt(stmt):
        if isinstance(s, (For, LetStmt)) and s.var not in rename:
            claim(s.var)
    if not rename:
        return stmt

    def fn(s):
        if isinstance(s, For) and s.var in rename:          # (its extent is renamed already)
            return For(rename[s.var], s.extent, s.kind, s.body)
        if isinstance(s, LetStmt) and s.var in rename:
            return LetStmt(rename[s.var], s.value, s.body)
        return None
    return map_stmt(stmt, stmt_fn=fn, expr_fn=lambda e: substitute(e, rename))
