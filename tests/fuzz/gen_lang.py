"""The newer language constructs, for the operator generator (a mixin of gen_ops.OpGen).

Each makes one description in the case's ``tensors`` (see :mod:`.program` for its te code and
:mod:`.reference` / :mod:`.reference_lang` for its NumPy meaning):

- ``argreduce``: ``te.argmax`` / ``te.argmin`` along one axis of a tensor, both outputs (the
  index, the value); its source is often a *tied* tensor, values quantized by ``floor`` so that
  rows have ties, some with a NaN (the value output may then be NaN, so it is read by no later
  stage: NaN semantics of the other operators are not the reference's business);
- ``tuple_reduce``: a user-declared ``te.comm_reducer`` on tuples over a generated expression:
  ``maxcount`` (the max and how often it occurs, on integers) or ``welford`` (count, mean, M2 of
  floats);
- ``multi``: an elementwise ``te.compute`` whose body is a tuple (outputs of different dtypes);
- ``welford``: the builtin ``te.welford`` along one axis of a float tensor: its two outputs
  (the mean, of the reduction stage's three; the variance, a stage of its own);
- ``scan``: ``te.cumsum`` / ``te.cumprod`` along a random axis (optionally exclusive);
- ``user_scan``: a user-written ``te.scan`` (TVM's ``te.scan(init, update, state)``) along
  axis 0 of a float tensor ``x``: one state, a linear recurrence such as the first-order IIR
  ``y[t] = a * y[t - 1] + x[t]`` (sometimes reading two steps back from an init of two rows,
  a neighbour of the previous step (a stencil), or squashed by ``tanh``), or two states each
  reading the other's previous step (the second driven by the first only); the coefficients
  are dyadic (exact in every float dtype) and sum to at most 7/8 in magnitude, so the values
  stay bounded;
- ``scatter_add`` / ``histogram`` / ``embedding_backward``: updates at integer indices read from
  data, including indices outside the output, which einloop clamps into it; ``scatter_reduce``
  with ``te.max`` / ``te.min``, the identity or 0 as ``init=``, and sometimes a ``where=``
  that skips the out-of-range indices instead;
- ``extern``: a ``te.extern`` stage calling a C function of :mod:`.extern_fuzz` (``2 x + 1``)
  on a float tensor, read by later stages like any tensor.

A description with several output tensors names them in ``parts`` (``name``, ``dtype``,
``range``; the first part's name is the description's own, the Python variable its schedule
uses); :func:`gen_ops.parts` lists the tensors of any description.
"""
from __future__ import annotations

from .values import FLOATS, INTS, Val

#: which construct, with its weight, when the generator draws one
CONSTRUCTS = (("argreduce", 3), ("tuple_reduce", 2), ("welford", 2), ("multi", 2), ("scan", 3),
              ("user_scan", 3), ("scatter_add", 2), ("histogram", 2), ("embedding", 1),
              ("scatter_minmax", 1), ("extern", 2))
#: the coefficients of a user scan's recurrence (dyadic: exact in float16 too)
SCAN_COEFS = (0.5, -0.5, 0.25, -0.25, 0.375, -0.125, 0.75)
#: the largest sum of |coefficients| of one state's update: |y| <= |x| / (1 - 7/8)
SCAN_GAIN = 0.875
#: the extents of a scatter's index vector and of a histogram's bins
SCATTER_N = (1, 3, 5, 8, 13, 17)


class LangForms:
    """Draws the newer constructs; needs OpGen's helpers (rng, expr, compute, readable)."""

    def construct(self):
        """Append one random new-construct description (and what it needs); False if none fit."""
        names, weights = zip(*CONSTRUCTS)
        kind = self.rng.choices(names, weights)[0]
        return getattr(self, "_lang_" + kind)()

    def _multi_name(self):
        return self._name("M")

    # tuple reductions ------------------------------------------------------------------------
    def _tied_source(self):
        """A float tensor with ties (values floor(4 x)), sometimes one NaN per some rows: a
        ``private`` compute (no other stage reads it, its NaN must meet only the argreduce)."""
        floats = self.readable_of(FLOATS)
        if not floats:
            return None
        src = self.pick(floats)
        dt = src["dtype"]
        names = [f"i{d}" for d in range(len(src["shape"]))]
        self.scope = {n: (0, e - 1) for n, e in zip(names, src["shape"])}
        body = ["call", "floor", ["bin", "*", self.read(src, 0).expr, ["lit", 4.0]]]
        nan = self.chance(0.5)
        if nan:
            v = self.pick(names)
            body = ["select", ["cmp", "==", ["var", v], ["lit", self.rng.randint(0, 3)]],
                    ["nan", dt], body]
            self.tag("nan")
        mag = 4 * max(abs(x) for x in src["range"]) + 1
        desc = {"kind": "compute", "name": self._name("T"), "shape": list(src["shape"]),
                "dtype": dt, "vars": names, "body": body, "range": [-mag, mag],
                "private": True, "nan": nan}
        self.tensors.append(desc)
        self.tag("tied")
        return desc

    def _lang_argreduce(self):
        if self.chance(0.5):
            src = self._tied_source()
        else:
            cands = [t for t in self.readable() if t["dtype"] != "bool"]
            src = self.pick(cands) if cands else None
        if src is None:
            return False
        axis = self.rng.randrange(len(src["shape"]))
        fn = self.pick(("argmax", "argmin"))
        idx_dt = self.pick(("int64", "int32"))
        shape = [e for d, e in enumerate(src["shape"]) if d != axis] or [1]
        name = self._multi_name()
        n = src["shape"][axis]
        self.tag(fn)
        self.tensors.append({
            "kind": "argreduce", "fn": fn, "name": name, "src": src["name"], "axis": axis,
            "index_dtype": idx_dt, "shape": shape, "dtype": idx_dt,
            "parts": [{"name": name, "dtype": idx_dt, "range": [0, n - 1]},
                      {"name": name + "v", "dtype": src["dtype"], "range": list(src["range"]),
                       "private": bool(src.get("nan"))}]})
        return True

    def _lang_tuple_reduce(self):
        name = self._multi_name()
        shape = [self.pick((1, 2, 3, 5, 7, 9)) for _ in range(self.rng.randint(1, 2))]
        vars_ = [f"i{d}" for d in range(len(shape))]
        self.scope = {n: (0, e - 1) for n, e in zip(vars_, shape)}
        k = self._name("k")
        ext = self.pick((1, 2, 3, 5, 8, 13, 17, 31))
        self.scope[k] = (0, ext - 1)
        reducer = self.pick(("maxcount", "welford"))
        self.tag(f"tuple-{reducer}")
        desc = {"kind": "tuple_reduce", "name": name, "reducer": reducer, "shape": shape,
                "vars": vars_, "reduce": [{"name": k, "start": 0, "extent": ext}]}
        if reducer == "maxcount":
            dt = self.pick(INTS)
            v = self.expr(dt, 2)
            desc.update(dtype=dt, body=v.expr, parts=[
                {"name": name, "dtype": dt, "range": [v.lo, v.hi]},
                {"name": name + "c", "dtype": "int32", "range": [0, ext]}])
        else:
            dt = self.pick(FLOATS)
            v = self.expr(dt, 2)
            if v.mag > 1:
                v = Val(["call", "tanh", v.expr], dt, -1, 1)
            desc.update(dtype=dt, body=v.expr, parts=[
                {"name": name, "dtype": dt, "range": [0, ext]},
                {"name": name + "m", "dtype": dt, "range": [-1, 1]},
                {"name": name + "q", "dtype": dt, "range": [0, 4 * ext]}])
        self.tensors.append(desc)
        return True

    def _lang_welford(self):
        """``mean, var = te.welford(x, axis)``: mean and population variance of a float tensor
        (of magnitude at most 8 in float16, whose M2 would overflow otherwise)."""
        cands = [t for t in self.readable_of(FLOATS)
                 if max(abs(x) for x in t["range"]) <= (8 if t["dtype"] == "float16" else 1e4)]
        if not cands:
            return False
        src = self.pick(cands)
        axis = self.rng.randrange(len(src["shape"]))
        shape = [e for d, e in enumerate(src["shape"]) if d != axis] or [1]
        name, dt = self._multi_name(), src["dtype"]
        mag = max(abs(x) for x in src["range"])
        self.tag("welford")
        self.tensors.append({
            "kind": "welford", "name": name, "src": src["name"], "axis": axis, "shape": shape,
            "dtype": dt, "parts": [{"name": name, "dtype": dt, "range": [-mag, mag]},
                                   {"name": name + "v", "dtype": dt, "range": [0, mag * mag]}]})
        return True

    def _lang_multi(self):
        name = self._multi_name()
        shape = self._shape()
        vars_ = [f"i{d}" for d in range(len(shape))]
        bodies, parts = [], []
        for j in range(self.rng.randint(2, 3)):
            self.scope = {n: (0, e - 1) for n, e in zip(vars_, shape)}
            dt = self.pick(FLOATS + INTS)
            v = self.expr(dt, 2)
            bodies.append(v.expr)
            parts.append({"name": name + ("", "b", "c")[j], "dtype": dt, "range": [v.lo, v.hi]})
        self.tag("multi-output")
        self.tensors.append({"kind": "multi", "name": name, "shape": shape, "vars": vars_,
                             "dtype": parts[0]["dtype"], "bodies": bodies, "parts": parts})
        return True

    # scans -------------------------------------------------------------------------------------
    def _lang_scan(self):
        fn = self.pick(("cumsum", "cumprod"))
        cands = [t for t in self.readable() if t["dtype"] != "bool"]
        if fn == "cumprod":      # products stay bounded: |x| <= 1.5 and few steps, or integers
            cands = [t for t in cands if t["dtype"] in INTS or
                     max(abs(x) for x in t["range"]) <= 1.5]
        if not cands:
            return False
        src = self.pick(cands)
        axis = self.rng.randrange(len(src["shape"]))
        dt = src["dtype"] if src["dtype"] in FLOATS else "int64"
        explicit = None
        if self.chance(0.3):
            explicit = self.pick(("float64",) if src["dtype"] in FLOATS else ("int32", "int64"))
            dt = explicit
        n = src["shape"][axis]
        mag = max(abs(x) for x in src["range"])
        if dt in FLOATS:
            hi = n * mag if fn == "cumsum" else max(mag, 1) ** n
            rng = [-hi, hi]
        else:
            rng = [-2 ** 63, 2 ** 63 - 1]
        exclusive = self.chance(0.3)
        self.tag(fn, "scan", *(["scan-exclusive"] if exclusive else []))
        self.tensors.append({"kind": "scan", "fn": fn, "name": self._name("S"),
                             "src": src["name"], "axis": axis, "out_dtype": explicit,
                             "exclusive": exclusive, "shape": list(src["shape"]), "dtype": dt,
                             "range": rng})
        return True

    def _lang_user_scan(self):
        """A ``te.scan`` written by the user: see the module doc (a source of magnitude at
        most 64: the states stay below 1024, within float16)."""
        cands = [t for t in self.readable_of(FLOATS) if max(abs(x) for x in t["range"]) <= 64]
        if not cands:
            return False
        src = self.pick(cands)
        shape, name = list(src["shape"]), self._name("S")
        two = self.chance(0.4)
        lag = 2 if shape[0] >= 2 and self.chance(0.3) else 1
        states = [self._scan_state(name, src["dtype"], lag, two, k) for k in range(1 + two)]
        shift = None
        if not two and len(shape) > 1 and self.chance(0.3):
            shift = [self.rng.randrange(1, len(shape)), self.pick((-1, 1))]
            self.tag("scan-stencil")
        act = self.chance(0.2)
        mag = max(abs(x) for x in src["range"])
        hi = 1.0 if act else 2 * mag / (1 - SCAN_GAIN)
        self.tag("user-scan", *(["scan-two-states"] if two else []),
                 *(["scan-lag2"] if lag == 2 else []), *(["scan-tanh"] if act else []))
        self.tensors.append({
            "kind": "user_scan", "name": name, "src": src["name"], "shape": shape, "lag": lag,
            "states": states, "shift": shift, "act": act, "dtype": states[0]["dtype"],
            "parts": [{"name": st["name"], "dtype": st["dtype"], "range": [-hi, hi]}
                      for st in states]})
        return True

    def _scan_state(self, name, src_dtype, lag, two, k):
        """State *k*: its dtype, init ``b * x[r]``, and update ``g * x[t] + sum of c *
        state_j[t - l]`` (``coefs``: [j, l, c]); the second state of two is driven by the
        first (``g = 0``, it reads the first state's previous step)."""
        dt = src_dtype if self.chance(0.6) else self.pick(FLOATS)
        coefs, budget = [], SCAN_GAIN
        reads = [(j, l) for j in range(1 + two) for l in range(1, lag + 1)]
        if two:                                  # each state reads the other's previous step
            must = [(1 - k, 1)]
            reads = must + [r for r in reads if r not in must and self.chance(0.5)]
        else:
            reads = [(0, 1)] + [r for r in reads if r != (0, 1) and self.chance(0.5)]
        for j, l in reads:
            fits = [c for c in SCAN_COEFS if abs(c) <= budget]
            if not fits:                       # the first read always fits
                break
            c = self.pick(fits)
            budget -= abs(c)
            coefs.append([j, l, c])
        return {"name": name + ("", "b")[k], "dtype": dt, "init": self.pick((1.0, 0.5, -1.0)),
                "gain": 0.0 if k else self.pick((1.0, 0.5, -1.0)), "coefs": coefs}

    # external functions ----------------------------------------------------------------------
    def _lang_extern(self):
        cands = list(self.readable_of(("float32", "float64")))
        if not cands:
            return False
        src = self.pick(cands)
        lo, hi = src["range"]
        self.tag("extern")
        self.tensors.append({"kind": "extern", "name": self._name("X"), "src": src["name"],
                             "shape": list(src["shape"]), "dtype": src["dtype"],
                             "range": [2 * lo + 1, 2 * hi + 1]})
        return True

    # scatters ----------------------------------------------------------------------------------
    def _index_placeholder(self, n, extent):
        """An integer placeholder of shape *n* (an int: 1-D) holding indices of an axis of
        *extent*, some of them outside it (einloop clamps them)."""
        name = self._name("P")
        dt = self.pick(("int32", "int64", "int8", "uint8"))
        lo = 0 if dt == "uint8" else -2
        shape = list(n) if isinstance(n, (list, tuple)) else [n]
        self.tensors.append({"kind": "placeholder", "name": name, "shape": shape, "dtype": dt,
                             "range": [lo, extent + 1]})
        return name

    def _lang_embedding(self):
        rows, width = self.pick((1, 2, 3, 5, 8)), self.pick((1, 2, 3, 4, 7))
        ids_shape = [self.pick(SCATTER_N) for _ in range(self.rng.randint(1, 2))]
        ids = self._index_placeholder(ids_shape, rows)
        dt = self.pick(FLOATS + ("int32",))
        grad = self.compute(shape=ids_shape + [width], dtype=dt, reduce_ok=False)
        n = ids_shape[0] * (ids_shape[1] if len(ids_shape) > 1 else 1)
        mag = n * max(abs(x) for x in grad["range"])
        self.tag("embedding_backward")
        self.tensors.append({"kind": "embedding", "name": self._name("H"),
                             "shape": [rows, width], "index": ids, "updates": grad["name"],
                             "dtype": dt, "range": [-mag, mag]})
        return True

    def _lang_scatter_minmax(self):
        """``te.scatter_reduce`` of values at indices with te.max or te.min; with ``init=0`` or
        the identity (then the output may hold -inf/+inf or the integer extremes, and is read by
        no later stage)."""
        bins, n = self.pick((1, 2, 3, 5, 8)), self.pick(SCATTER_N)
        index = self._index_placeholder(n, bins)
        dt = self.pick(FLOATS + ("int32", "int8"))
        vals = self.compute(shape=[n], dtype=dt, reduce_ok=False)
        fn, zero, where = self.pick(("max", "min")), self.chance(0.5), self.chance(0.5)
        lo, hi = vals["range"]
        self.tag(f"scatter-{fn}", *(["scatter-where"] if where else []))
        self.tensors.append({"kind": "scatter_minmax", "name": self._name("H"), "fn": fn,
                             "shape": [bins], "index": index, "updates": vals["name"],
                             "where": where, "init": 0 if zero else None, "dtype": dt,
                             "extent": n,
                             "range": [min(lo, 0), max(hi, 0)], "private": not zero})
        return True

    def _lang_scatter_add(self):
        shape = [self.pick((1, 2, 3, 5, 7, 9)) for _ in range(self.rng.randint(1, 2))]
        axis = self.rng.randrange(len(shape))
        n = self.pick(SCATTER_N)
        index = self._index_placeholder(n, shape[axis])
        want = shape[:axis] + [n] + shape[axis + 1:]
        dt = self.pick(FLOATS + ("int32", "int64"))
        upd = self.compute(shape=want, dtype=dt, reduce_ok=False)
        mag = n * max(abs(x) for x in upd["range"])
        self.tag("scatter_add")
        self.tensors.append({"kind": "scatter_add", "name": self._name("H"), "shape": shape,
                             "axis": axis, "index": index, "updates": upd["name"],
                             "dtype": dt, "range": [-mag, mag]})
        return True

    def _lang_histogram(self):
        bins = self.pick((1, 2, 3, 5, 8, 13))
        ints = [t for t in self.readable_of(INTS) if sum(t["shape"]) <= 40]
        if ints and self.chance(0.5):
            data = self.pick(ints)["name"]
        else:
            data = self._index_placeholder(self.pick(SCATTER_N), bins)
        shape = self._tensor(data)["shape"]
        points = 1
        for e in shape:
            points *= e
        weights = None
        dt = "int32"
        if self.chance(0.4):
            dt = self.pick(FLOATS + ("int32",))
            weights = self.compute(shape=list(shape), dtype=dt, reduce_ok=False)
            mag = points * max(abs(x) for x in weights["range"])
            weights = weights["name"]
        else:
            mag = points
        self.tag("histogram", *(["histogram-weights"] if weights else []))
        self.tensors.append({"kind": "histogram", "name": self._name("H"), "shape": [bins],
                             "bins": bins, "data": data, "weights": weights, "dtype": dt,
                             "range": [-mag, mag]})
        return True
