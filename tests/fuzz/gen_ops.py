"""Random operator DAGs as plain data: the declaration half of a fuzz case.

A case's ``tensors`` is a list of placeholders, computes and einsums in declaration order.  A
compute body is a nested list (see :mod:`.program` for the te code each node becomes and
:mod:`.reference` for its NumPy meaning), e.g. ``["bin", "+", ["var", "i0"], ["lit", 3]]``.

Only legal programs are generated.  The generator keeps a value range for every sub-expression
(an interval for integers, a magnitude bound for floats) so that float-to-int casts stay in range,
log/sqrt/pow/division see arguments away from their poles, and floats stay well conditioned.
Reads and their index forms are in :mod:`.gen_index`.
"""
from __future__ import annotations

import random

from .gen_index import IndexForms
from .gen_lang import LangForms
from .values import DTYPES, FLOATS, INT_RANGE, INTS, Val, int_val

UNARY = ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "floor", "ceil", "abs")
REDUCERS = ("sum", "max", "min", "prod", "absmax", "csum", "cmin")
EXTENTS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 31, 33)
#: magnitude cap of generated float values, so that float16 stays far from overflow
FLOAT_CAP = {"float16": 16.0, "float32": 256.0, "float64": 256.0}
#: the values placeholders hold (harness.random_inputs draws them)
INPUT_RANGE = {**{d: (-1.0, 1.0) for d in FLOATS}, **{d: (-9, 9) for d in INTS},
               "uint8": (0, 30), "bool": (0, 1)}
MAX_GRID = 40_000          # data points x reduction points of one compute
LANG_RATE = 0.2            # default share of the stages that are newer constructs (gen_lang)


class OpGen(IndexForms, LangForms):
    """Draws one random operator DAG from ``random.Random(seed)``."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.tensors = []          # the case's tensor descriptions, in declaration order
        self.features = set()
        self.scope = {}            # loop variable -> (lo, hi) while a body is generated
        self._n = 0
        self.lang_rate = LANG_RATE  # how often a stage is one of the newer constructs (gen_lang)

    # helpers --------------------------------------------------------------------------------
    def chance(self, p):
        return self.rng.random() < p

    def pick(self, seq):
        return self.rng.choice(list(seq))

    def tag(self, *names):
        self.features.update(names)

    def _name(self, prefix):
        self._n += 1
        return f"{prefix}{self._n}"

    def readable(self, dtype=None):
        """The tensors a new stage may read (of *dtype*): every part of every description but
        the ``private`` ones (holding NaN, see :mod:`.gen_lang`)."""
        return [p for t in self.tensors if not t.get("private") for p in parts(t)
                if not p.get("private") and (dtype is None or p["dtype"] == dtype)]

    def readable_of(self, dtypes):
        return [t for t in self.readable() if t["dtype"] in dtypes]

    # DAG --------------------------------------------------------------------------------------
    def generate(self):
        for _ in range(self.rng.randint(1, 3)):
            self.placeholder(self.pick(DTYPES) if self.chance(0.6) else self.pick(FLOATS))
        for _ in range(self.rng.randint(1, 4)):
            if self.chance(0.1) and self.einsum():
                continue
            if self.chance(self.lang_rate) and self.construct():
                continue
            self.compute()
        used = {r for t in self.tensors if t["kind"] != "placeholder" for r in tensor_reads(t)}
        computes = [p["name"] for t in self.tensors if t["kind"] != "placeholder"
                    for p in parts(t)]
        outputs = [n for n in computes if n not in used]
        extra = [n for n in computes if n in used and self.chance(0.15)]
        if extra:
            self.tag("output-with-consumer")
        inputs = [t["name"] for t in self.tensors if t["kind"] == "placeholder" and t["name"] in used]
        self.tensors = [t for t in self.tensors if t["kind"] != "placeholder" or t["name"] in used]
        args = inputs + outputs + extra
        if self.chance(0.3):
            self.rng.shuffle(args)
            self.tag("shuffled-args")
        return {"tensors": self.tensors, "outputs": outputs + extra, "args": args}

    def placeholder(self, dtype):
        shape = [self.pick(EXTENTS) for _ in range(self.rng.randint(1, 3))]
        self.tensors.append({"kind": "placeholder", "name": "ABCDEFGH"[len(self.tensors) % 8],
                             "shape": shape, "dtype": dtype, "range": list(INPUT_RANGE[dtype])})

    def _shape(self):
        srcs = self.readable()
        if srcs and self.chance(0.6):
            shape = list(self.pick(srcs)["shape"])
            if len(shape) > 1 and self.chance(0.4):
                self.rng.shuffle(shape)
                self.tag("transpose-shape")
            return shape
        return [self.pick(EXTENTS) for _ in range(self.rng.randint(1, 3))]

    def compute(self, shape=None, dtype=None, reduce_ok=True):
        """Append a random compute (of *shape* and *dtype* if given); return its description."""
        name = self._name("T")
        shape = shape or self._shape()
        dtype = dtype or (self.pick(DTYPES) if self.chance(0.5) else self.pick(FLOATS))
        names = [f"i{d}" for d in range(len(shape))]
        self.scope = {n: (0, e - 1) for n, e in zip(names, shape)}
        desc = {"kind": "compute", "name": name, "shape": shape, "dtype": dtype, "vars": names}
        data_points = 1
        for e in shape:
            data_points *= e
        if reduce_ok and dtype != "bool" and self.chance(0.45) and data_points < MAX_GRID // 2:
            val = self._reduction(desc, data_points)
        else:
            val = self.expr(dtype, 3)
            desc["body"] = val.expr
        desc["range"] = [val.lo, val.hi]
        self.tensors.append(desc)
        return desc

    def _reduction(self, desc, data_points):
        dtype = desc["dtype"]
        axes, points = [], data_points
        for _ in range(self.rng.randint(1, 2)):
            ext = self.pick(e for e in EXTENTS if e * points <= MAX_GRID)
            start = self.pick((0, 0, 0, 1, 2, -3))
            k = self._name("k")
            axes.append({"name": k, "start": start, "extent": ext})
            self.scope[k] = (start, start + ext - 1)
            points *= ext
        self.tag("reduce", f"reduce-{len(axes)}axes")
        reducer = self.pick(REDUCERS)
        self.tag(f"reduce-{reducer}")
        src = self.expr(dtype, 2 if reducer == "prod" else 3)
        if dtype in FLOATS:
            # keep the result far from overflow: |term| <= 1 for products, n*|term| bounded for sums
            limit = 1.0 if reducer == "prod" else FLOAT_CAP[dtype] * 16 / points
            src = src if src.mag <= limit else Val(["call", "tanh", src.expr], dtype, -1, 1)
        elif reducer == "prod":
            src = self._bounded_int(src, 3)
        desc.update(reduce=axes, reducer=reducer, body=src.expr)
        if self.chance(0.35):
            desc["where"] = self.condition(2)
            self.tag("reduce-where")
        n = points // data_points
        if reducer in ("sum", "csum"):
            lo, hi = min(0, src.lo * n), max(0, src.hi * n)
        elif reducer == "prod":
            lo, hi = -max(src.mag, 1) ** n, max(src.mag, 1) ** n
        else:
            lo, hi = min(0, src.lo), max(0, src.hi)
        return Val(None, dtype, lo, hi) if dtype in FLOATS else int_val(None, dtype, lo, hi)

    def einsum(self):
        floats = [t for t in self.readable() if t["dtype"] in FLOATS + ("int32", "int64")]
        if not floats:
            return False
        a = self.pick(floats)
        letters = "ijkl"[:len(a["shape"])]
        same = [t for t in floats if t["dtype"] == a["dtype"] and t is not a
                and t["shape"][0] == a["shape"][-1]]
        if same and self.chance(0.7):
            b = self.pick(same)
            lb = letters[-1] + "mnp"[:len(b["shape"]) - 1]
            out = "".join(c for c in letters[:-1] + lb[1:])
            subs, ops = f"{letters},{lb}->{out}", [a["name"], b["name"]]
        else:
            out = "".join(self.rng.sample(letters, self.rng.randint(0, len(letters))))
            subs, ops = f"{letters}->{out}", [a["name"]]
        shapes = [self._tensor(n)["shape"] for n in ops]
        shape = _einsum_shape(subs, shapes)
        terms = 1
        for n in ops:
            lo, hi = self._tensor(n)["range"]
            terms *= max(abs(lo), abs(hi))
        for c, size in _einsum_sizes(subs, shapes).items():
            terms *= size if c not in subs.split("->")[1] else 1
        dt = a["dtype"]
        if dt in FLOATS and terms > FLOAT_CAP[dt] * 64:
            return False
        rng = [-terms, terms] if dt in FLOATS else list(INT_RANGE[dt])
        self.tag("einsum")
        self.tensors.append({"kind": "einsum", "name": self._name("E"), "subscripts": subs,
                             "operands": ops, "dtype": dt, "shape": shape, "range": rng})
        return True

    def _tensor(self, name):
        return next(p for t in self.tensors for p in parts(t) if p["name"] == name)

    # expressions ------------------------------------------------------------------------------
    def expr(self, dtype, depth) -> Val:
        """A random expression of *dtype*."""
        if depth <= 0 or self.chance(0.25):
            return self.leaf(dtype, depth)
        if dtype == "bool":
            return Val(self.condition(depth), "bool", 0, 1)
        if dtype in FLOATS:
            return self._cap(self._float_op(dtype, depth))
        return self._int_op(dtype, depth)

    def leaf(self, dtype, depth=1):
        srcs = self.readable(dtype)
        r = self.rng.random()
        if srcs and r < 0.65:
            return self.read(self.pick(srcs), depth)
        if r < 0.8:
            return self.cast(self.leaf(self.pick(DTYPES), depth - 1) if depth > 0
                             else self.var_val(), dtype)
        if r < 0.9:
            return self.cast(self.var_val(), dtype)
        if r < 0.95 and dtype in INTS and dtype != "int64":
            return self.wrapped_var(dtype)
        return self.const(dtype)

    def wrapped_var(self, dtype):
        """``(v + c).astype(dtype)`` with c near the dtype's edge: the values wrap around."""
        v = self.var_val()
        lo, hi = INT_RANGE[dtype]
        c = (hi if self.chance(0.5) else lo) - (v.lo + v.hi) // 2
        self.tag("wrapped-var")
        return Val(["cast", dtype, ["bin", "+", v.expr, ["lit", c]]], dtype, lo, hi)

    def var_val(self):
        v = self.pick(self.scope)
        lo, hi = self.scope[v]
        return Val(["var", v], "int64", lo, hi)

    def const(self, dtype):
        if dtype == "bool":
            return Val(["const", self.chance(0.5), "bool"], "bool", 0, 1)
        if dtype in FLOATS:
            v = self.pick((0.0, 0.5, 1.0, -2.0, 3.25, 7.0))
            return Val(["const", v, dtype], dtype, -abs(v), abs(v))
        lo, hi = INT_RANGE[dtype]
        v = self.pick((0, 1, 2, 3, 7, -1, -5, 100, lo, hi))
        v = min(max(v, lo), hi)
        return Val(["const", v, dtype], dtype, v, v)

    def _lit(self, val, dtype):
        """A Python literal that takes *dtype* from the expression it meets."""
        self.tag("literal")
        return Val(["lit", val], dtype, val, val)

    def _cap(self, v: Val) -> Val:
        """Squash a float whose magnitude bound passed the cap (tanh or sigmoid)."""
        if v.mag <= FLOAT_CAP[v.dtype]:
            return v
        fn = self.pick(("tanh", "sigmoid"))
        return Val(["call", fn, v.expr], v.dtype, -1, 1)

    def _float_op(self, dtype, depth):
        r = self.rng.random()
        a = self.expr(dtype, depth - 1)
        if r < 0.35:
            op = self.pick("+-*")
            b = self.expr(dtype, depth - 1) if self.chance(0.7) else self._lit(
                self.pick((0.5, 2.0, -1.5, 3.0)), dtype)
            m = a.mag * b.mag if op == "*" else a.mag + b.mag
            return Val(["bin", op, a.expr, b.expr], dtype, -m, m)
        if r < 0.45:
            b = self.expr(dtype, depth - 1)
            den = ["bin", "+", ["call", "abs", b.expr], ["lit", 1.0]]
            if self.chance(0.3):
                den = ["call", "exp", ["call", "tanh", b.expr]]
                self.tag("exp")
            self.tag("div")
            return Val(["bin", "/", a.expr, den], dtype, -a.mag, a.mag + 1e-9)
        if r < 0.7:
            return self.unary(a)
        if r < 0.8:
            b = self.expr(dtype, depth - 1)
            fn = self.pick(("max", "min", "maximum", "minimum"))
            self.tag(f"minmax-{fn}")
            m = max(a.mag, b.mag)
            return Val(["mm", fn, a.expr, b.expr], dtype, -m, m)
        if r < 0.9:
            return self.select(dtype, depth)
        if r < 0.95:
            return Val(["neg", a.expr], dtype, -a.mag, a.mag)
        src = self.expr(self.pick(d for d in DTYPES if d != dtype), depth - 1)
        return self.cast(src, dtype)

    def unary(self, a: Val) -> Val:
        dt, m = a.dtype, a.mag
        fn = self.pick(UNARY + ("pow",))
        self.tag(fn)
        if fn == "exp":
            a = self._squash(a, 3.0)
            return Val(["call", "exp", a.expr], dt, 0, 2.72 ** a.mag)
        if fn == "log":
            return Val(["call", "log", ["bin", "+", ["call", "abs", a.expr], ["lit", 0.5]]], dt,
                       -0.7, 0.5 + m)
        if fn == "sqrt":
            return Val(["call", "sqrt", ["call", "abs", a.expr]], dt, 0, m ** 0.5 + 1)
        if fn in ("tanh", "sigmoid", "erf"):
            return Val(["call", fn, a.expr], dt, -1, 1)
        if fn in ("floor", "ceil"):
            return Val(["call", fn, a.expr], dt, -m - 1, m + 1)
        if fn == "abs":
            return Val(["call", "abs", a.expr], dt, 0, m)
        base = ["bin", "+", ["call", "abs", self._squash(a, 2.0).expr], ["lit", 0.5]]
        if self.chance(0.6):
            y = self.pick((2.0, 0.5, 1.5, -1.0, 3.0))
            expo = ["lit", y] if self.chance(0.5) else ["const", y, dt]
        else:
            expo = ["call", "tanh", self.expr(dt, 1).expr]
        return Val(["call", self.pick(("pow", "power")), base, expo], dt, 0, 2.5 ** 3)

    def _squash(self, a: Val, limit):
        if a.mag <= limit:
            return a
        return Val(["call", "tanh", a.expr], a.dtype, -1, 1)

    def _int_op(self, dtype, depth):
        a = self.expr(dtype, depth - 1)
        r = self.rng.random()
        if r < 0.4:
            op = self.pick("+-*")
            if self.chance(0.3):
                b = self._lit(self.pick((1, 2, 3, 7, -1)) if dtype != "uint8" else 3, dtype)
            else:
                b = self.expr(dtype, depth - 1)
            c = [a.lo + b.lo, a.hi + b.hi] if op == "+" else [a.lo - b.hi, a.hi - b.lo] \
                if op == "-" else [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
            if op == "-" and dtype == "uint8":
                self.tag("uint-wrap")
            return int_val(["bin", op, a.expr, b.expr], dtype, min(c), max(c))
        if r < 0.6:
            op = self.pick(("//", "%"))
            self.tag("int-div")
            if self.chance(0.5):
                d = self.pick((1, 2, 3, 5, 7, -3) if dtype != "uint8" else (1, 2, 3, 5, 7))
                b = self._lit(d, dtype)
            else:
                b = self.expr(dtype, depth - 1)
                self.tag("int-div-data")
            if op == "%":
                m = max(abs(b.lo), abs(b.hi))
                return int_val(["bin", "%", a.expr, b.expr], dtype, -m, m)
            return int_val(["bin", "//", a.expr, b.expr], dtype, -a.mag - 1, a.mag + 1)
        if r < 0.7:
            b = self.expr(dtype, depth - 1)
            fn = self.pick(("max", "min", "maximum", "minimum"))
            if b.expr[0] == "var" and fn in ("max", "min"):
                # te.max(x, k) with k a reduce axis means "reduce x over k": not what we want
                fn = "maximum" if fn == "max" else "minimum"
            return int_val(["mm", fn, a.expr, b.expr], dtype, min(a.lo, b.lo), max(a.hi, b.hi))
        if r < 0.8:
            return self.select(dtype, depth)
        if r < 0.85:
            return int_val(["call", "abs", a.expr], dtype, 0, a.mag)
        src = self.expr(self.pick(d for d in DTYPES if d != dtype), depth - 1)
        return self.cast(src, dtype)

    def _bounded_int(self, v: Val, m):
        """``v % m``: in 0..m-1 whatever v is (floor modulo)."""
        if 0 <= v.lo and v.hi < m:
            return v
        return Val(["bin", "%", v.expr, ["lit", m]], v.dtype, 0, m - 1)

    def cast(self, v: Val, dtype) -> Val:
        """``v.astype(dtype)``, made legal: floats reach int dtypes only in range."""
        if v.dtype == dtype:
            return v
        self.tag(f"cast-{v.dtype[0]}2{dtype[0]}")
        if dtype == "bool":
            return Val(["cast", "bool", v.expr], "bool", 0, 1)
        if dtype in FLOATS:
            if v.dtype in INTS or v.dtype == "int64":
                v = self._bounded_int(v, 1000) if v.mag > 1000 else v
            return self._cap(Val(["cast", dtype, v.expr], dtype, min(v.lo, 0), max(v.hi, 0)))
        lo, hi = INT_RANGE[dtype]
        if v.dtype in FLOATS:
            if self.chance(0.5):
                v = Val(["call", self.pick(("floor", "ceil")), v.expr], v.dtype, -v.mag - 1,
                        v.mag + 1)
            if v.mag >= min(-lo if lo else hi, hi):
                v = Val(["call", "tanh", v.expr], v.dtype, -1, 1)
            if dtype == "uint8":
                v = Val(["call", "abs", v.expr], v.dtype, 0, v.mag)
            return Val(["cast", dtype, v.expr], dtype, int(-v.mag) if lo else 0, int(v.mag))
        if v.lo < lo or v.hi > hi:
            self.tag("narrowing-cast")
        return int_val(["cast", dtype, v.expr], dtype, v.lo, v.hi)

    def select(self, dtype, depth):
        self.tag("select")
        a, b = self.expr(dtype, depth - 1), self.expr(dtype, depth - 1)
        cond = self.condition(depth - 1)
        return Val(["select", cond, a.expr, b.expr], dtype, min(a.lo, b.lo), max(a.hi, b.hi))

    def condition(self, depth):
        """A boolean expression: comparisons of indices or values, combined."""
        r = self.rng.random()
        if depth > 0 and r < 0.3:
            parts = [self.condition(depth - 1) for _ in range(self.rng.randint(2, 3))]
            kind = self.pick(("and", "or", "all", "any"))
            self.tag(f"cond-{kind}")
            if kind in ("all", "any"):
                return [kind, parts]
            out = parts[0]
            for p in parts[1:]:
                out = [kind, out, p]
            return out
        if depth > 0 and r < 0.35:
            return ["not", self.condition(depth - 1)]
        if r < 0.45 and self.readable("bool"):
            return self.read(self.pick(self.readable("bool")), depth).expr
        op = self.pick(("<", "<=", ">", ">=", "==", "!="))
        if r < 0.8:
            a = self.var_val()
            if self.chance(0.3):
                w = self.var_val()
                a = Val(["bin", self.pick("+-"), a.expr, w.expr], "int64", 0, 0)
            if self.chance(0.25):
                fn = self.pick(("min", "max"))
                a = Val(["mm", fn, a.expr, ["const", self.rng.randint(0, 8), "int64"]], "int64")
                self.tag("minmax-in-cond")
            c = self.rng.randint(-1, 9) if self.chance(0.85) else self.rng.choice((-60, 60))
            return ["cmp", op, a.expr, ["lit", c]]
        dt = self.pick(DTYPES[:-1])
        return ["cmp", op, self.expr(dt, depth - 1).expr, self.expr(dt, depth - 1).expr]

def _reads(desc):
    out = set()

    def walk(e):
        if isinstance(e, list):
            if e and e[0] == "read":
                out.add(e[1])
            for x in e:
                walk(x)
    walk(desc.get("body"))
    walk(desc.get("where"))
    walk(desc.get("bodies"))
    return out


#: the fields of a new-construct description that name the tensors it reads
SOURCE_FIELDS = ("src", "index", "updates", "data", "weights")


def parts(desc):
    """The tensors of a description: ``name``, ``shape``, ``dtype``, ``range`` (and ``private``)
    of each output; one for all but the multi-output constructs of :mod:`.gen_lang`."""
    if "parts" not in desc:
        return [desc]
    return [{**p, "shape": desc["shape"]} for p in desc["parts"]]


def tensor_table(case):
    """Tensor name -> its part dict (see :func:`parts`), over every description of *case*."""
    return {p["name"]: p for t in case["tensors"] for p in parts(t)}


def owners(case):
    """Tensor name -> the name of the description (stage) computing it."""
    return {p["name"]: t["name"] for t in case["tensors"] for p in parts(t)}


def _einsum_sizes(subs, shapes):
    sizes = {}
    for term, shape in zip(subs.split("->")[0].split(","), shapes):
        sizes.update(zip(term, shape))
    return sizes


def _einsum_shape(subs, shapes):
    sizes = _einsum_sizes(subs, shapes)
    return [sizes[c] for c in subs.split("->")[1]] or [1]


def reduce_axes(desc, case):
    """The reduction axes of a compute or einsum of *case*: dicts of name, start, extent."""
    if desc["kind"] != "einsum":
        return desc.get("reduce", [])
    lhs, out = desc["subscripts"].split("->")
    sizes = _einsum_sizes(desc["subscripts"], _operand_shapes(desc, case))
    return [{"name": c, "start": 0, "extent": sizes[c]}
            for c in dict.fromkeys(lhs.replace(",", "")) if c not in out]


def _operand_shapes(desc, case):
    shapes = {n: p["shape"] for n, p in tensor_table(case).items()}
    return [shapes[n] for n in desc["operands"]]


def refresh_shapes(case):
    """Recompute the shapes of einsums and of the constructs shaped by their sources after
    source shapes changed (the shrinker does that)."""
    for t in case["tensors"]:
        if t["kind"] == "einsum":
            t["shape"] = _einsum_shape(t["subscripts"], _operand_shapes(t, case))
        elif t["kind"] in ("argreduce", "scan", "user_scan", "welford"):
            src = tensor_table(case)[t["src"]]["shape"]
            t["shape"] = list(src) if t["kind"] in ("scan", "user_scan") else \
                [e for d, e in enumerate(src) if d != t["axis"]] or [1]
            if t["kind"] == "user_scan" and src[0] < t["lag"]:
                t["lag"] = 1                     # an init of two rows needs two steps
                for st in t["states"]:
                    st["coefs"] = [[j, 1, c] for j, _, c in st["coefs"]]


def tensor_reads(desc):
    """Names of the tensors a compute or einsum description (or a newer construct) reads."""
    if desc["kind"] == "einsum":
        return desc["operands"]
    named = [desc[f] for f in SOURCE_FIELDS if desc.get(f)]
    return sorted(set(named) | _reads(desc))


def generate_ops(seed, lang_rate=LANG_RATE):
    """The declaration half of case *seed*: tensors, outputs, argument order, feature tags;
    *lang_rate* is the chance of each stage to be one of the newer constructs."""
    g = OpGen(random.Random(seed))
    g.lang_rate = lang_rate
    case = g.generate()
    case["features"] = sorted(g.features)
    return case
