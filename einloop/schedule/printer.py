"""Pseudo-code for the loop IR: one line per statement, loop kinds marked, like TVM's simple mode."""
from ..te.printer import expr_str
from . import loop_ir as L

_INDENT = "  "


def _lines(s, depth, out):
    pad = _INDENT * depth
    if isinstance(s, L.Seq):
        for x in s.stmts:
            _lines(x, depth, out)
    elif isinstance(s, L.For):
        kind = "" if s.kind is L.ForKind.SERIAL else s.kind.value + " "
        out.append(f"{pad}{kind}for {s.var.name} in range({s.extent}):")
        _lines(s.body, depth + 1, out)
    elif isinstance(s, L.Store):
        out.append(f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}")
    elif isinstance(s, L.IfThenElse):
        out.append(f"{pad}if {expr_str(s.cond)}:")
        _lines(s.then_case, depth + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _lines(s.else_case, depth + 1, out)
    elif isinstance(s, L.Allocate):
        b = s.buffer
        out.append(f"{pad}allocate {b.name}: {b.dtype}[{' * '.join(map(str, b.shape))}]")
        _lines(s.body, depth, out)
    elif isinstance(s, L.LetStmt):
        out.append(f"{pad}{s.var.name} = {expr_str(s.value)}")
        _lines(s.body, depth, out)
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def stmt_str(s) -> str:
    out = []
    _lines(s, 0, out)
    return "\n".join(out)


def func_str(f) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}[{', '.join(map(str, b.shape))}]" for b in f.args)
    head = [f"def {f.name}({params}):"]
    for t in f.temps:
        head.append(f"{_INDENT}# temp {t.name}: {t.dtype}[{', '.join(map(str, t.shape))}]")
    out = []
    _lines(f.body, 1, out)
    return "\n".join(head + out)
