"""The scan behind :mod:`einloop.autotune.features`: one walk over the loop IR that finds each
store's loop chain and accesses, and turns them into the named values of the layout.
"""
from __future__ import annotations

import math

from ..ir.stmt import (Allocate, Buffer, For, ForKind, IfThenElse, LetStmt, Load,
                                LoweredFunc, Scope, Seq, Store)
from ..ir import expr as E

from .feature_layout import (CACHE_LINE, N_ACCESSES_MAIN, N_ACCESSES_SECOND, N_LOOPS_MAIN,
                             N_LOOPS_SECOND, _INTRINSIC_COST, _MAX_MERGED, _VIRTUAL, _WINDOWS,
                             _WIN_NAMES)


def _elem_bytes(dtype: str) -> int:
    if dtype == "bool":
        return 1
    digits = "".join(c for c in dtype if c.isdigit())
    return max(1, int(digits) // 8) if digits else 4


_FLOAT_OPS = frozenset(("+", "-", "*", "/", "max", "min"))


class _Loop:
    __slots__ = ("key", "var", "extent", "kind")

    def __init__(self, key, var, extent, kind):
        self.key = key          # identity of the For node (None for the virtual loop)
        self.var = var          # id of the loop variable (None for the virtual loop)
        self.extent = extent
        self.kind = kind        # a ForKind, or _VIRTUAL


class _StoreRec:
    __slots__ = ("buffer", "index", "chain", "n_if", "flops", "intr", "sel", "loads", "sig")


class _Access:
    __slots__ = ("buffer", "is_store", "is_update", "mult", "coefs", "offsets", "vstride",
                 "exact", "eb", "fp")


def _affine(e, lets, memo):
    """Approximate ``e`` as ``sum coef[var] * var + const``: returns (coefs, const, exact)."""
    key = id(e)
    got = memo.get(key)
    if got is not None:
        return got
    t = type(e)
    if t is E.Const:
        v = e.value
        r = ({}, float(v), True) if isinstance(v, (int, float)) else ({}, 0.0, False)
    elif t is E.Var:
        bound = lets.get(key)
        if bound is not None:
            r = _affine(bound, lets, memo)
        else:
            r = ({key: 1.0}, 0.0, True)
    elif t is E.Binary:
        op = e.op
        ca, ka, xa = _affine(e.a, lets, memo)
        cb, kb, xb = _affine(e.b, lets, memo)
        if op == "+" or op == "-":
            s = 1.0 if op == "+" else -1.0
            c = dict(ca)
            for v, x in cb.items():
                c[v] = c.get(v, 0.0) + s * x
            r = (c, ka + s * kb, xa and xb)
        elif op == "*":
            if not cb:
                r = ({v: x * kb for v, x in ca.items()}, ka * kb, xa and xb)
            elif not ca:
                r = ({v: x * ka for v, x in cb.items()}, ka * kb, xa and xb)
            else:               # product of variables: linearise around zero
                c = {v: x * kb for v, x in ca.items()}
                for v, x in cb.items():
                    c[v] = c.get(v, 0.0) + x * ka
                r = (c, ka * kb, False)
        elif op in ("//", "tdiv") and not cb and kb > 0:
            r = ({v: x / kb for v, x in ca.items()}, ka / kb, False)
        elif op in ("%", "tmod") and not cb and kb > 0:
            r = ({v: x for v, x in ca.items() if abs(x) < kb}, math.fmod(ka, kb), False)
        elif op in ("min", "max"):
            r = (ca, ka, False) if len(ca) >= len(cb) else (cb, kb, False)
        else:
            r = ({}, 0.0, False)
    elif t is E.Cast:
        r = _affine(e.value, lets, memo)
    elif t is E.Select:
        c, k, _ = _affine(e.true_value, lets, memo)
        r = (c, k, False)
    else:                       # an indirect load or anything else: opaque
        r = ({}, 0.0, False)
    memo[key] = r
    return r


def _scan_value(e, rec, sig):
    """Count float ops, intrinsic calls, selects; collect loads; append the shape signature."""
    t = type(e)
    if t is E.Binary:
        sig.append(e.op)
        if e.op in _FLOAT_OPS and e.dtype.startswith("float"):
            rec.flops += 1
        _scan_value(e.a, rec, sig)
        _scan_value(e.b, rec, sig)
    elif t is Load:
        sig.append(("L", id(e.buffer)))
        rec.loads.append(e)
    elif t is E.Const:
        sig.append("c")
    elif t is E.Var:
        sig.append("v")
    elif t is E.Call:
        sig.append(("C", e.name))
        rec.flops += 1
        rec.intr += 1
        for a in e.args:
            _scan_value(a, rec, sig)
    elif t is E.Select:
        sig.append("S")
        rec.sel += 1
        _scan_value(e.cond, rec, sig)
        _scan_value(e.true_value, rec, sig)
        _scan_value(e.false_value, rec, sig)
    elif t is E.Cast:
        sig.append(("T", e.dtype))
        _scan_value(e.value, rec, sig)
    elif t is E.Compare or t is E.Logical:
        sig.append(e.op)
        _scan_value(e.a, rec, sig)
        _scan_value(e.b, rec, sig)
    elif t is E.Not:
        sig.append("!")
        _scan_value(e.a, rec, sig)
    else:
        raise TypeError(f"unexpected expression node {t.__name__} in a lowered store")


# ------------------------------------------------------------------------------------------------
# the extractor
# ------------------------------------------------------------------------------------------------

class Extractor:
    def __init__(self, func: LoweredFunc):
        self.func = func
        self.stores = []
        self.lets = {}
        self.memo = {}
        self.chain = []
        self.n_if = 0
        self.n_loops = 0
        self.max_depth = 0
        self.n_par = 0
        self.n_vec = 0
        self.mult = 1               # product of the extents of the enclosing unrolled loops
        self.n_store_stmts = 0
        self.max_lanes = 1
        self.n_alloc = 0
        self.local_bytes = 0
        self.local_max = 0
        self.n_ifs = 0
        self.n_lets = 0

    # -- walk ----------------------------------------------------------------------------------
    def visit(self, s, depth):
        t = type(s)
        if t is Seq:
            for x in s.stmts:
                self.visit(x, depth)
        elif t is For:
            ext = s.extent
            if isinstance(ext, bool) or not isinstance(ext, int) or ext < 1:
                raise ValueError(f"loop {s.var} has extent {ext!r}")
            kind = s.kind
            if not isinstance(kind, ForKind):
                raise ValueError(f"loop {s.var} has kind {kind!r}")
            # counts are those of the IR with unrolled loops expanded, whichever IR this is
            mult = self.mult
            if kind is ForKind.UNROLLED:
                self.mult = mult * ext
                inner = depth
            else:
                self.n_loops += mult
                inner = depth + 1
                self.max_depth = max(self.max_depth, inner)
                if kind is ForKind.PARALLEL:
                    self.n_par += mult
                elif kind is ForKind.VECTORIZED:
                    self.n_vec += mult
                    self.max_lanes = max(self.max_lanes, ext)
            if ext > 1:
                self.chain.append(_Loop(id(s), id(s.var), ext, kind))
                self.visit(s.body, inner)
                self.chain.pop()
            else:
                self.visit(s.body, inner)
            self.mult = mult
        elif t is Store:
            rec = _StoreRec()
            rec.buffer = s.buffer
            rec.index = s.index
            rec.chain = tuple(self.chain)
            rec.n_if = self.n_if
            rec.flops = rec.intr = rec.sel = 0
            rec.loads = []
            sig = []
            _scan_value(s.value, rec, sig)
            rec.sig = tuple(sig)
            self.stores.append(rec)
            self.n_store_stmts += self.mult
        elif t is IfThenElse:
            self.n_ifs += self.mult
            self.n_if += 1
            self.visit(s.then_case, depth)
            if s.else_case is not None:
                self.visit(s.else_case, depth)
            self.n_if -= 1
        elif t is Allocate:
            b = s.buffer
            nbytes = b.size * _elem_bytes(b.dtype)
            self.n_alloc += self.mult
            self.local_bytes += nbytes * self.mult
            self.local_max = max(self.local_max, nbytes)
            self.visit(s.body, depth)
        elif t is LetStmt:
            self.n_lets += self.mult
            self.lets[id(s.var)] = s.value
            self.visit(s.body, depth)
        else:
            raise TypeError(f"unexpected statement {t.__name__}")

    # -- groups --------------------------------------------------------------------------------
    def groups(self):
        groups = {}
        for rec in self.stores:
            key = (id(rec.buffer), rec.sig, rec.n_if,
                   tuple((lp.extent, lp.kind) for lp in rec.chain))
            groups.setdefault(key, []).append(rec)
        return list(groups.values())

    def describe(self, reps):
        """Everything the blocks need about one replica group."""
        rep = reps[0]
        R = len(reps)
        chain = list(rep.chain)
        trip = 1
        for lp in rep.chain:
            trip *= lp.extent
        # real unrolled loops (IR lowered without expanding unrolls) become the one virtual loop
        # that the replicas of an expanded unroll give, where the outermost of them was: both
        # IRs look alike (the replicas' chains part at the outermost unrolled loop)
        unrolled = [i for i, lp in enumerate(chain) if lp.kind is ForKind.UNROLLED]
        merge = ()
        if R == 1 and unrolled:
            merge = tuple(chain[i] for i in unrolled)
            R = math.prod(lp.extent for lp in merge)
            if R > _MAX_MERGED:
                merge, R = (), 1
        if merge:
            p = unrolled[0]
            trip //= R
            chain = [lp for lp in chain if lp.kind is not ForKind.UNROLLED]
            chain.insert(p, _Loop(None, None, R, _VIRTUAL))
        elif R > 1:
            # where the replicas' chains part: the virtual unrolled loop goes there
            p = len(chain)
            for other in reps[1:]:
                q = 0
                oc = other.chain
                while q < p and oc[q].key == chain[q].key:
                    q += 1
                p = q
            chain.insert(p, _Loop(None, None, R, _VIRTUAL))
        vpos = p if R > 1 else -1
        # accesses: the store, then the loads in order (same order in every replica)
        lets, memo = self.lets, self.memo
        per_rep = []
        for r in reps:
            forms = [(r.buffer, True, _affine(r.index, lets, memo))]
            forms += [(ld.buffer, False, _affine(ld.index, lets, memo)) for ld in r.loads]
            per_rep.append(forms)
        accesses = []
        for j, (buf, is_store, (coefs, const, exact)) in enumerate(per_rep[0]):
            if merge:
                offs = {const}
                for lp in merge:
                    c = coefs.get(lp.var, 0.0)
                    if c:
                        offs = {o + c * i for o in offs for i in range(lp.extent)}
                offsets = sorted({round(o, 6) for o in offs})
                vstride = coefs.get(merge[-1].var, 0.0)
            else:
                offsets = sorted({round(pr[j][2][1], 6) for pr in per_rep})
                vstride = per_rep[1][j][2][1] - const if R > 1 else 0.0
            cvec = [0.0 if lp.var is None else coefs.get(lp.var, 0.0) for lp in chain]
            ex = exact and all(pr[j][2][2] for pr in per_rep)
            # a load of the stored element is part of the update, and duplicates merge
            merged = False
            for a in accesses:
                if a.buffer is buf and a.coefs == cvec and a.offsets == offsets:
                    if a.is_store and not is_store:
                        a.is_update = True
                    else:
                        a.mult += 1
                    merged = True
                    break
            if merged:
                continue
            a = _Access()
            a.buffer, a.is_store, a.is_update, a.mult = buf, is_store, False, 1
            a.coefs, a.offsets, a.vstride, a.exact = cvec, offsets, vstride, ex
            a.eb = _elem_bytes(buf.dtype)
            accesses.append(a)
        for a in accesses:
            a.fp = self.footprints(a, chain, vpos)
        g = {"reps": reps, "rep": rep, "R": R, "chain": chain, "vpos": vpos, "trip": trip,
             "trip_total": trip * R, "accesses": accesses}
        g["flops"] = trip * R * rep.flops
        g["cost"] = trip * R * (1 + rep.flops + len(rep.loads) + _INTRINSIC_COST * rep.intr)
        return g

    @staticmethod
    def footprints(a, chain, vpos):
        """For every window start s (loops s..end): (distinct elements, iterations, lines)."""
        n = len(chain)
        out = [None] * n
        prod_d = 1.0
        span = 0.0
        iters = 1.0
        with_virtual = False
        cmin, cmin_ext = math.inf, 1
        n_off = len(a.offsets)
        off_range = a.offsets[-1] - a.offsets[0] if a.offsets else 0.0
        eb = a.eb
        for s in range(n - 1, -1, -1):
            lp = chain[s]
            e = lp.extent
            iters *= e
            if s == vpos:
                with_virtual = True
                c = abs(a.vstride)
            else:
                c = abs(a.coefs[s])
                if c > 0:
                    prod_d *= e if c >= 1 else math.floor(c * (e - 1)) + 1
                    span += c * (e - 1)
            if 0 < c < cmin:
                cmin, cmin_ext = c, e
            distinct = min(prod_d, span + 1)
            if with_virtual:
                distinct = min(n_off * distinct, off_range + span + 1)
            distinct = max(1.0, distinct)
            if cmin * eb < CACHE_LINE:
                per_line = max(1.0, min(CACHE_LINE / (cmin * eb), cmin_ext))
                lines = max(math.ceil(distinct * eb / CACHE_LINE), distinct / per_line)
            else:
                lines = distinct
            out[s] = (distinct, iters, max(1.0, lines))
        return out

    # -- blocks --------------------------------------------------------------------------------
    def block(self, vals, prefix, g, n_loops, n_acc, total_cost):
        rep, chain, accesses = g["rep"], g["chain"], g["accesses"]
        n = len(chain)
        vals[f"{prefix}_present"] = 1
        vals[f"{prefix}_trip"] = g["trip"]
        vals[f"{prefix}_trip_total"] = g["trip_total"]
        vals[f"{prefix}_replicas"] = g["R"]
        vals[f"{prefix}_chain_len"] = n
        vals[f"{prefix}_flops_per_iter"] = rep.flops
        vals[f"{prefix}_intrinsics_per_iter"] = rep.intr
        vals[f"{prefix}_loads_per_iter"] = len(rep.loads)
        vals[f"{prefix}_selects_per_iter"] = rep.sel
        store = accesses[0]
        vals[f"{prefix}_is_update"] = int(store.is_update)
        local = rep.buffer.scope is Scope.LOCAL
        vals[f"{prefix}_store_is_local"] = int(local)
        eb = store.eb
        vals[f"{prefix}_elem_bytes"] = eb
        lanes = 1
        for lp in chain:
            if lp.kind is ForKind.VECTORIZED:
                lanes = max(lanes, lp.extent)
        vals[f"{prefix}_vector_lanes"] = lanes
        vals[f"{prefix}_vector_bytes"] = lanes * eb
        if local:
            # distinct store offsets over the (virtual) unrolled loop; times any real unrolled
            # loop left in the chain (IR mixing expanded and kept unrolls) the store moves in
            n_accum = len(store.offsets)
            for pos, lp in enumerate(chain):
                if lp.kind is ForKind.UNROLLED and store.coefs[pos] != 0:
                    n_accum *= lp.extent
            vals[f"{prefix}_n_accumulators"] = n_accum
            vals[f"{prefix}_accumulator_lanes"] = n_accum * lanes
            vals[f"{prefix}_accumulator_bytes"] = n_accum * lanes * eb
        vals[f"{prefix}_n_ifs"] = rep.n_if
        par, first_par = 1, None
        for i, lp in enumerate(chain):
            if lp.kind is ForKind.PARALLEL:
                par *= lp.extent
                if first_par is None:
                    first_par = i
        vals[f"{prefix}_parallel_extent"] = par if first_par is not None else 0
        vals[f"{prefix}_loops_inside_parallel"] = 0 if first_par is None else n - first_par - 1
        outer = 1
        for lp in chain[:max(0, n - n_loops)]:
            outer *= lp.extent
        vals[f"{prefix}_outer_extent"] = outer
        vals[f"{prefix}_cost_frac"] = g["cost"] / total_cost if total_cost > 0 else 0
        vals[f"{prefix}_flops"] = g["flops"]
        if n:
            vals[f"{prefix}_working_set_all"] = sum(a.fp[0][0] * a.eb for a in accesses)
        # loop slots, innermost first
        inner_work = 1
        vpos = g["vpos"]
        for i in range(min(n, n_loops)):
            pos = n - 1 - i
            lp = chain[pos]
            inner_work *= lp.extent
            p = f"{prefix}_loop{i}_"
            vals[p + "present"] = 1
            vals[p + "extent"] = lp.extent
            k = lp.kind
            vals[p + ("unrolled" if k is _VIRTUAL else k.value)] = 1
            vals[p + "depth"] = pos
            vals[p + "inner_work"] = inner_work
            vals[p + "store_stride"] = store.vstride if pos == vpos else store.coefs[pos]
            vals[p + "n_invariant"] = sum(
                1 for a in accesses if (a.vstride if pos == vpos else a.coefs[pos]) == 0)
            vals[p + "ws_bytes"] = sum(a.fp[pos][0] * a.eb for a in accesses)
            vals[p + "ws_lines"] = sum(a.fp[pos][2] for a in accesses)
        # access slots: the store, then loads by bytes touched (whole chain, then two loops)
        vec_pos = next((i for i in range(n - 1, -1, -1) if chain[i].kind is ForKind.VECTORIZED),
                       None)
        ser_pos = next((i for i in range(n - 1, -1, -1) if chain[i].kind is ForKind.SERIAL), None)

        def stride_at(a, pos):
            if pos is None:
                return 0.0
            return a.vstride if pos == vpos else a.coefs[pos]

        def size_key(a):
            if not n:
                return (0.0, 0.0)
            return (-a.fp[0][0] * a.eb, -a.fp[max(0, n - 2)][0] * a.eb)
        loads = sorted(accesses[1:], key=size_key)
        for i, a in enumerate(([store] + loads)[:n_acc]):
            p = f"{prefix}_acc{i}_"
            vals[p + "present"] = 1
            vals[p + "is_store"] = int(a.is_store)
            vals[p + "is_update"] = int(a.is_update)
            vals[p + a.buffer.scope.value] = 1
            vals[p + "elem_bytes"] = a.eb
            vals[p + "exact"] = int(a.exact)
            vals[p + "multiplicity"] = a.mult
            vals[p + "stride_inner"] = stride_at(a, n - 1 if n else None)
            sv = stride_at(a, vec_pos)
            vals[p + "stride_vec"] = sv
            vals[p + "stride_serial"] = stride_at(a, ser_pos)
            if vec_pos is not None:
                vals[p + ("vec_contig" if abs(sv) == 1 else
                          "vec_broadcast" if sv == 0 else "vec_gather")] = 1
            if not n:
                for w in _WIN_NAMES:
                    vals[p + f"bytes_{w}"] = a.eb
                    vals[p + f"reuse_{w}"] = 1
                continue
            for w, wn in zip(_WINDOWS, _WIN_NAMES):
                s = 0 if w is None else max(0, n - w)
                distinct, iters, lines = a.fp[s]
                vals[p + f"bytes_{wn}"] = distinct * a.eb
                vals[p + f"reuse_{wn}"] = iters / distinct
                if wn in ("w2", "all"):
                    vals[p + f"lines_{wn}"] = lines

    # -- all -----------------------------------------------------------------------------------
    def run(self):
        f = self.func
        for b in tuple(f.args) + tuple(f.temps):
            if not isinstance(b, Buffer):
                raise TypeError(f"{b!r} is not a Buffer")
        self.visit(f.body, 0)
        groups = [self.describe(reps) for reps in self.groups()]
        vals = {}
        total_cost = sum(g["cost"] for g in groups)
        total_flops = sum(g["flops"] for g in groups)
        vec_fl = par_fl = 0
        st_tot = st_vec = st_par = st_if = 0
        bytes_st = bytes_ld = intr = sel = 0
        max_par = 0
        for g in groups:
            kinds = {lp.kind for lp in g["chain"]}
            tt = g["trip_total"]
            rep = g["rep"]
            st_tot += tt
            if ForKind.VECTORIZED in kinds:
                vec_fl += g["flops"]
                st_vec += tt
            if ForKind.PARALLEL in kinds:
                par_fl += g["flops"]
                st_par += tt
                pe = 1
                for lp in g["chain"]:
                    if lp.kind is ForKind.PARALLEL:
                        pe *= lp.extent
                max_par = max(max_par, pe)
            if rep.n_if:
                st_if += tt
            bytes_st += tt * _elem_bytes(rep.buffer.dtype)
            bytes_ld += tt * sum(_elem_bytes(ld.buffer.dtype) for ld in rep.loads)
            intr += tt * rep.intr
            sel += tt * rep.sel
        arg_bytes = sum(b.size * _elem_bytes(b.dtype) for b in f.args)
        g_ = {
            "flops": total_flops,
            "flops_vectorized_frac": vec_fl / total_flops if total_flops else 0,
            "flops_parallel_frac": par_fl / total_flops if total_flops else 0,
            "stores_vectorized_frac": st_vec / st_tot if st_tot else 0,
            "stores_parallel_frac": st_par / st_tot if st_tot else 0,
            "stores_guarded_frac": st_if / st_tot if st_tot else 0,
            "n_store_stmts": self.n_store_stmts,
            "n_groups": len(groups),
            "n_loops": self.n_loops,
            "max_depth": self.max_depth,
            "n_parallel_loops": self.n_par,
            "has_parallel": int(self.n_par > 0),
            "max_parallel_extent": max_par,
            "n_vectorized_loops": self.n_vec,
            "max_vector_lanes": self.max_lanes if self.n_vec else 0,
            "n_unrolled_groups": sum(1 for g in groups if g["R"] > 1),
            "max_replicas": max((g["R"] for g in groups), default=0),
            "n_stages": len({id(g["rep"].buffer) for g in groups}),
            "n_allocates": self.n_alloc,
            "local_bytes": self.local_bytes,
            "local_bytes_max": self.local_max,
            "n_temps": len(f.temps),
            "temp_bytes": sum(b.size * _elem_bytes(b.dtype) for b in f.temps),
            "arg_bytes": arg_bytes,
            "bytes_stored": bytes_st,
            "bytes_loaded": bytes_ld,
            "arith_intensity": total_flops / arg_bytes if arg_bytes else 0,
            "intrinsic_calls": intr,
            "selects": sel,
            "n_ifs": self.n_ifs,
            "n_lets": self.n_lets,
        }
        for k, v in g_.items():
            vals["g_" + k] = v
        if groups:
            order = sorted(range(len(groups)), key=lambda i: -groups[i]["cost"])
            main = groups[order[0]]
            vals["g_main_cost_frac"] = main["cost"] / total_cost if total_cost else 0
            vals["g_main_flops_frac"] = main["flops"] / total_flops if total_flops else 0
            self.block(vals, "m", main, N_LOOPS_MAIN, N_ACCESSES_MAIN, total_cost)
            for i in order[1:]:
                if groups[i]["rep"].buffer is not main["rep"].buffer:
                    self.block(vals, "s", groups[i], N_LOOPS_SECOND, N_ACCESSES_SECOND,
                               total_cost)
                    break
        return vals
