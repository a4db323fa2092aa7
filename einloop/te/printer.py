"""Readable, unambiguous text for expressions (also used as a structural key for caching)."""
import numpy as np

from . import expr as E

_PREC = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
         "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6}


def _fmt_const(c):
    if c.dtype == "bool":
        return "True" if c.value else "False"
    value = c.value
    if c.dtype in ("float16", "float32"):       # the shortest text that reads back to the value
        value = str(np.dtype(c.dtype).type(c.value))
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
        if e.op in ("max", "min", "tdiv", "tmod"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        p = _PREC[e.op]
        s = f"{expr_str(e.a, p)} {e.op} {expr_str(e.b, p + 1)}"
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
    load = getattr(e, "buffer", None)
    if load is not None:
        return f"{load.name}[{expr_str(e.index)}]"
    return object.__repr__(e)
