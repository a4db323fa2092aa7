"""Readable, unambiguous text for the IR: expressions, and the loop IR as pseudo-code with one line
per statement and loop kinds marked (like TVM's simple mode)."""

from . import dtypes
from . import expr as E
from . import stmt as S
from .visit import StmtVisitor

_PREC = {E.LogicOp.OR: 1, E.LogicOp.AND: 2, **{op: 4 for op in E.CmpOp},
         E.BinOp.ADD: 5, E.BinOp.SUB: 5,
         E.BinOp.MUL: 6, E.BinOp.DIV: 6, E.BinOp.FLOORDIV: 6, E.BinOp.MOD: 6}
#: operators printed as calls, ``max(a, b)``
_CALL_LIKE = frozenset((E.BinOp.MAX, E.BinOp.MIN, E.BinOp.TDIV, E.BinOp.TMOD))


def _fmt_const(c):
    if c.dtype == "bool":
        return "True" if c.value else "False"
    value = c.value
    if c.dtype in ("float16", "bfloat16", "float32"):   # the shortest text that reads back
        value = str(dtypes.numpy_dtype(c.dtype).type(c.value))
    if c.dtype == "float32":
        return f"{value}f"
    if c.dtype == "int64" or c.dtype == "float64":
        return repr(value)
    return f"{c.dtype}({value})"


def expr_str(e, prec=0) -> str:
    """Print *e*; parenthesise only where precedence needs it."""
    if isinstance(e, E.Const):
        return _fmt_const(e)
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, (E.Binary, E.Compare, E.Logical)):
        if e.op in _CALL_LIKE:
            return f"{e.op.symbol}({expr_str(e.a)}, {expr_str(e.b)})"
        p = _PREC[e.op]
        s = f"{expr_str(e.a, p)} {e.op.symbol} {expr_str(e.b, p + 1)}"
        return f"({s})" if p < prec else s
    if isinstance(e, E.Not):
        return f"not {expr_str(e.a, 7)}"
    if isinstance(e, E.Select):
        return (f"select({expr_str(e.cond)}, {expr_str(e.true_value)}, "
                f"{expr_str(e.false_value)})")
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, E.Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, E.TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, E.Reduce):
        axes = ", ".join(a.var.name for a in e.axes)
        cond = f", where={expr_str(e.condition)}" if e.condition is not None else ""
        return f"{e.reducer.name}({expr_str(e.source)}, axis=[{axes}]{cond})"
    if isinstance(e, E.Load):
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    return object.__repr__(e)


_INDENT = "  "


class _Lines(StmtVisitor):
    def __init__(self, depth):
        self.depth, self.out = depth, []

    def line(self, text):
        self.out.append(_INDENT * self.depth + text)

    def nested(self, body):
        self.depth += 1
        self.visit(body)
        self.depth -= 1

    def visit_Seq(self, s):
        for x in s.stmts:
            self.visit(x)

    def visit_For(self, s):
        kind = "" if s.kind is S.ForKind.SERIAL else s.kind.value + " "
        self.line(f"{kind}for {s.var.name} in range({s.extent}):")
        self.nested(s.body)

    def visit_Store(self, s):
        stream = "  # nontemporal" if s.nontemporal else ""
        self.line(f"{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}{stream}")

    def visit_IfThenElse(self, s):
        self.line(f"if {expr_str(s.cond)}:")
        self.nested(s.then_case)
        if s.else_case is not None:
            self.line("else:")
            self.nested(s.else_case)

    def visit_Allocate(self, s):
        b = s.buffer
        self.line(f"allocate {b.name}: {b.dtype}[{' * '.join(map(str, b.shape))}]")
        self.visit(s.body)

    def visit_LetStmt(self, s):
        self.line(f"{s.var.name} = {expr_str(s.value)}")
        self.visit(s.body)

    def visit_Prefetch(self, s):
        self.line(f"prefetch {s.buffer.name}[{expr_str(s.index)}:+{s.extent}]")

    def visit_ExternCall(self, s):
        args = [b.name for b in s.inputs] + [s.output.name] + [expr_str(e) for e in s.extents]
        where = f"  # from {s.library}" if s.library else ""
        self.line(f"extern {s.symbol}({', '.join(args)}){where}")


    def visit_IntrinsicCall(self, s):
        tiles = [f"&{b.name}[{expr_str(i)}]" for b, i in zip(s.buffers, s.indices)]
        if s.strides:                    # a strided intrinsic's: each tile's strides after it
            tiles = [f"{t} strides {list(st)}" for t, st in zip(tiles, s.strides)]
        self.line(f"tensorized {s.symbol}({', '.join(tiles)})")


def stmt_str(s, depth=0) -> str:
    p = _Lines(depth)
    p.visit(s)
    return "\n".join(p.out)


def func_str(f) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}[{', '.join(map(str, b.shape))}]" for b in f.args)
    head = [f"def {f.name}({params}):"]
    for t in f.temps:
        head.append(f"{_INDENT}# temp {t.name}: {t.dtype}[{', '.join(map(str, t.shape))}]")
    return "\n".join(head + [stmt_str(f.body, 1)])
