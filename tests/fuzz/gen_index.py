"""Reads and their index forms, for the operator generator (a mixin of gen_ops.OpGen).

Every index is legal by construction: in bounds (affine, strided, reversed, constant, ``//``),
made legal by ``%`` or a clamp (``te.min``/``te.max``, ``te.minimum``/``te.maximum``), a gather
through an integer tensor made legal the same way, guarded by an ``if_then_else`` whose branch
holds the read (padding, in the then or the else branch), a read under a condition that never
holds (a dead branch), or an index einloop cannot prove in bounds and must clamp (a square, a
narrowing cast that wraps).
"""
from __future__ import annotations

from .values import INT_RANGE, INTS, Val


class IndexForms:
    """Reads of tensors with random legal indices; needs OpGen's rng helpers and scope."""

    def read(self, tensor, depth) -> Val:
        """A read of *tensor* with a random legal index per dimension."""
        idx, guards = [], []
        for ext in tensor["shape"]:
            e, g = self.index(ext, depth)
            idx.append(e)
            guards += g
        read = ["read", tensor["name"], idx]
        dt = tensor["dtype"]
        lo, hi = tensor["range"]
        if not guards:
            return Val(read, dt, lo, hi)
        self.tag("padding")
        pad = self.const(dt)
        lo, hi = min(lo, pad.lo), max(hi, pad.hi)
        if self.chance(0.5):
            cond = ["all", guards] if self.chance(0.5) else _and_chain(guards)
            return Val(["select", cond, read, pad.expr], dt, lo, hi)
        self.tag("padding-else")          # the read in the else branch of the negated guard
        cond = ["any", [_negate(g) for g in guards]] if self.chance(0.5) else \
            ["not", ["all", guards]]
        return Val(["select", cond, pad.expr, read], dt, lo, hi)

    def index(self, ext, depth):
        """One index into an axis of extent *ext*: (expression, guard conditions)."""
        forms = ["affine"] * 8 + ["const", "div", "mod", "clamp", "square", "padding", "padding",
                                  "two-var", "reverse", "narrow"]
        if self.chance(0.1):
            forms.append("dead")
        if depth > 0 and self.readable_of(INTS):
            forms += ["gather"] * 2
        for _ in range(8):
            form = self.pick(forms)
            out = getattr(self, "_idx_" + form.replace("-", "_"))(ext, depth)
            if out is not None:
                self.tag("idx-" + form)
                return out
        return ["const", self.rng.randrange(ext), "int64"], []

    def _stride_fit(self, ext, reverse=False):
        """A variable v, stride s and offset c with c + s*v (or c - s*v) inside 0..ext-1."""
        v = self.var_val()
        s = self.pick((1, 1, 1, 2, 3))
        if reverse:
            lo, hi = v.hi * s, ext - 1 + v.lo * s
        else:
            lo, hi = -v.lo * s, ext - 1 - v.hi * s
        if lo > hi:
            return None
        return v, s, self.rng.randint(lo, hi)

    def _idx_affine(self, ext, depth):
        fit = self._stride_fit(ext)
        if fit is None:
            return None
        v, s, c = fit
        e = v.expr if s == 1 else ["bin", "*", v.expr, ["lit", s]]
        return (e if c == 0 else ["bin", "+", e, ["lit", c]]), []

    def _idx_reverse(self, ext, depth):
        fit = self._stride_fit(ext, reverse=True)
        if fit is None:
            return None
        v, s, c = fit
        return ["bin", "-", ["lit", c], v.expr if s == 1 else ["bin", "*", ["lit", s], v.expr]], []

    def _idx_two_var(self, ext, depth):
        v, w = self.var_val(), self.var_val()
        lo, hi = -(v.lo + w.lo), ext - 1 - (v.hi + w.hi)
        if lo > hi:
            return None
        return ["bin", "+", ["bin", "+", v.expr, w.expr], ["lit", self.rng.randint(lo, hi)]], []

    def _idx_const(self, ext, depth):
        return ["const", self.rng.randrange(ext), "int64"], []

    def _idx_div(self, ext, depth):
        v, q = self.var_val(), self.pick((2, 3, 4, 5))
        lo, hi = -v.lo, q * ext - 1 - v.hi
        if lo > hi:
            return None
        return ["bin", "//", ["bin", "+", v.expr, ["lit", self.rng.randint(lo, hi)]], ["lit", q]], []

    def _idx_mod(self, ext, depth):
        v = self.var_val()
        m = self.rng.randint(1, ext)
        return ["bin", "%", ["bin", "+", v.expr, ["lit", self.rng.randint(-5, 5)]], ["lit", m]], []

    def _idx_clamp(self, ext, depth):
        v = self.var_val()
        inner = ["bin", "+", v.expr, ["lit", self.rng.randint(-3, 3)]]
        if self.chance(0.5):
            return ["mm", "min", ["mm", "max", inner, ["lit", 0]], ["lit", ext - 1]], []
        return ["mm", "maximum", ["mm", "minimum", inner, ["lit", ext - 1]], ["lit", 0]], []

    def _idx_square(self, ext, depth):
        """A non-affine index einloop cannot prove in bounds: it must clamp it."""
        v = self.var_val()
        return ["bin", "//", ["bin", "*", v.expr, v.expr], ["lit", self.pick((1, 2, 3))]], []

    def _idx_padding(self, ext, depth):
        v = self.var_val()
        c = self.rng.randint(-2, 2)
        e = ["bin", "+", v.expr, ["lit", c]]
        return e, [["cmp", ">=", e, ["lit", 0]], ["cmp", "<", e, ["lit", ext]]]

    def _idx_dead(self, ext, depth):
        """An out-of-bounds index under a condition that never holds (a dead branch)."""
        v = self.var_val()
        return ["bin", "+", v.expr, ["lit", ext]], [["cmp", ">", v.expr, ["lit", v.hi]]]

    def _idx_narrow(self, ext, depth):
        """A narrowing cast that wraps inside the domain: einloop must clamp, not trust it."""
        v = self.var_val()
        dt = self.pick(("int8", "uint8", "int16", "int32"))
        edge = INT_RANGE[dt][1] + 1 if self.chance(0.7) else INT_RANGE[dt][0]
        c = edge - (v.lo + v.hi) // 2 - self.rng.randint(-ext, ext)
        self.tag("narrowing-cast")
        return ["cast", dt, ["bin", "+", v.expr, ["lit", c]]], []

    def _idx_gather(self, ext, depth):
        ints = self.readable_of(INTS)
        src = self.read(self.pick(ints), depth - 1)
        if self.chance(0.6):
            return ["bin", "%", src.expr, ["lit", ext]], []
        return ["mm", "min", ["mm", "max", src.expr, ["lit", 0]], ["lit", ext - 1]], []


def _negate(c):
    flip = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
    return ["cmp", flip[c[1]], c[2], c[3]]


def _and_chain(conds):
    out = conds[0]
    for c in conds[1:]:
        out = ["and", out, c]
    return out
