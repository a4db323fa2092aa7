"""What the schedule generator knows of the newer constructs (:mod:`.gen_lang`).

- their loops: an argmax or tuple reduction has its data axes and one reduction loop; a scan
  its data axes, one of which (the scan axis) is *pinned*: never split, fused, vectorized,
  parallel or unrolled, though it may be reordered among the others; a scatter has its free
  axes as data loops (``scatter_add``: every axis but the scattered one; ``histogram``: none)
  and its domain as reduction loops;
- the stages a construct declares besides its own (:func:`helper_stages`): a user scan's
  inits (``<S>_i<k>``; for two states stored at the root: a stage computed at the scan's loops
  may be read by its first state only), ``te.welford``'s variance stage (``<W>v``); they are
  scheduled like computes.  The states of two share the first's loops (the second has no
  primitives); a stencil scan (reading a neighbour of the previous step) keeps its scan loop
  outermost;
- their placement: a scan and a scatter stay at the root (a scatter is stored whole; a scan
  computed at a consumer's loop is legal only where that loop is outside its scan axis, which
  the generator does not track); a reduction is never inlined;
- the legal form of rfactor: a tuple reduction's gives one rf tensor per part; a scatter's
  (privatization) needs a domain loop split first and factor_axis 0;
- the *illegal* steps each must refuse with a ScheduleError (rendered ``_refused(...)``): a
  split, vectorize or parallel of a scan axis, inlining a scan, a parallel domain loop of a
  scatter, compute_at of a scatter, cache_read of one output of a multi-output stage.
"""
from __future__ import annotations

from .gen_ops import owners, tensor_table

SCATTERS = ("scatter_add", "histogram", "embedding", "scatter_minmax")
ROOT_ONLY = ("scan", "user_scan", "extern") + SCATTERS
SCANS = ("scan", "user_scan")
#: how many outputs the stage of a construct has, where its parts do not say (te.welford's
#: reduction stage computes count, mean and M2; its variance is a stage of its own)
OUTPUTS = {"welford": 3}


def helper_stages(desc):
    """(name, shape, reads, root) of the stages construct *desc* declares besides its own, in
    declaration order; *reads* are tensor names."""
    if desc["kind"] == "welford":
        return [(desc["name"] + "v", list(desc["shape"]), [desc["name"]], False)]
    if desc["kind"] == "user_scan":
        two = len(desc["states"]) > 1
        shape = [desc["lag"]] + list(desc["shape"][1:])
        return [(f"{desc['name']}_i{k}", shape, [desc["src"]], two)
                for k in range(len(desc["states"]))]
    return []


def direct_reads(desc):
    """The tensor names the stage of construct *desc* reads itself: a user scan whose init
    gives every step (``lag`` >= its length) reads its inits only, not its source."""
    from .gen_ops import tensor_reads
    if desc["kind"] == "user_scan" and desc["shape"][0] <= desc["lag"]:
        return []
    return tensor_reads(desc)


def helper_names(case):
    """The Python names of every helper stage of *case* (schedule steps may name them)."""
    return {h[0] for t in case["tensors"] if t["kind"] != "placeholder"
            for h in helper_stages(t)}


def own_parts(desc):
    """The names of the parts computed by the construct's own stage."""
    helpers = {h[0] for h in helper_stages(desc)}
    return [p["name"] for p in desc.get("parts", [desc]) if p["name"] not in helpers]


def stage_loops(desc, case):
    """(data extents, reduction extents) of the stage of construct *desc*."""
    kind = desc["kind"]
    if kind == "argreduce":
        src = tensor_table(case)[desc["src"]]["shape"]
        return list(desc["shape"]), [src[desc["axis"]]]
    if kind == "tuple_reduce":
        return list(desc["shape"]), [k["extent"] for k in desc["reduce"]]
    if kind in ("multi", "scan", "user_scan"):
        return list(desc["shape"]), []
    if kind == "welford":
        src = tensor_table(case)[desc["src"]]["shape"]
        return list(desc["shape"]), [src[desc["axis"]]]
    if kind == "extern":
        return [], []                   # a C call: no loops
    if kind == "scatter_add":
        n = tensor_table(case)[desc["index"]]["shape"][0]
        return [e for d, e in enumerate(desc["shape"]) if d != desc["axis"]], [n]
    if kind == "embedding":            # the free axis: the feature dimension
        return [desc["shape"][1]], list(tensor_table(case)[desc["index"]]["shape"])
    if kind == "scatter_minmax":
        return [], [desc["extent"]]
    return [], list(tensor_table(case)[desc["data"]]["shape"])      # histogram


def stage_reads(names, case):
    """The stages (description or helper stage names) behind tensor *names*."""
    own = owners(case)
    own.update((h, h) for h in helper_names(case))
    return {own.get(n, n) for n in names}


def mark(stage, desc):
    """Record on generator *stage* what its construct allows (see the module doc)."""
    kind = desc["kind"] if desc else "compute"
    stage.kind = kind
    stage.parts = own_parts(desc) if desc and "parts" in desc else []
    if kind == "user_scan":      # its states are ops of their own, not outputs of one op
        stage.parts = [desc["name"]]
    stage.nouts = OUTPUTS.get(kind, max(1, len(stage.parts)))
    stage.scan_first = kind == "user_scan" and bool(desc["shift"])
    stage.root_only = kind in ROOT_ONLY
    stage.scatter = kind in SCATTERS
    stage.inlinable = kind in ("compute", "einsum", "multi")
    stage.extern = kind == "extern"


def feed_externs(stages):
    """The stages an external stage reads are stored whole, at the root, in their own layout:
    never inlined, computed at a loop, or reordered in storage."""
    for st in stages.values():
        if st.extern:
            for name in st.reads:
                if name in stages:
                    stages[name].root_only, stages[name].inlinable = True, False
                    stages[name].feeds_extern = True


def pin_scan_axis(stage, desc):
    """After the axes are named: the scan axis of a scan stage is kept out of transformations
    (listed as annotated, which every transformation and annotation skips)."""
    if desc and desc["kind"] in SCANS:
        stage.scan_axis = stage.loops[desc.get("axis", 0)][0]
        stage.annotated.add(stage.scan_axis)


class LangSchedules:
    """Schedule steps of the newer constructs; a mixin of gen_schedules.ScheduleGen."""

    def rfactor_scatter(self, st):
        """Privatize a scatter: split a domain loop in parts, rfactor the outer part."""
        from .gen_schedules import Stage
        lp = self.rng.choice(st.leaves("reduce"))
        if lp[1] < 2:
            return
        outer, inner = self.handle(), self.handle()
        n = self.rng.choice((2, 3, 4))
        self.step("split", st.tensor, loop=lp[0], nparts=n, out=[outer, inner])
        oe = min(n, lp[1])
        self._replace(st, lp, [[outer, oe, "reduce"], [inner, -(-lp[1] // oe), "reduce"]])
        data = st.leaves("data")
        name = f"{st.tensor}_rf"
        rf = Stage(name, [oe] + [d[1] for d in data],
                   [r[1] for r in st.leaves("reduce") if r[0] != outer], st.reads, False)
        mark(rf, {"kind": st.kind})
        self.stages[name] = rf
        st.reads = {name}
        # the scatter now combines the copies: every output dimension is a free axis of it
        shape = self.descs[st.tensor]["shape"]
        st.loops = [["", e, "data"] for e in shape] + [["", oe, "reduce"]]
        self.step("rfactor", st.tensor, loop=outer, factor_axis=0, out=name)
        self.features.add("rfactor-scatter")
        self._rename_loops(rf, st)
        if self.chance(0.6):          # what privatizing is for: the copies run in parallel
            self.step("parallel", rf.tensor, loop=rf.loops[0][0])
            rf.annotated.add(rf.loops[0][0])

    def _rename_loops(self, *stages):
        for x in stages:
            for loop in x.loops:
                loop[0] = self.handle()
            self.step("axes", x.tensor, axis=[loop[0] for loop in x.loops if loop[2] == "data"],
                      reduce_axis=[loop[0] for loop in x.loops if loop[2] == "reduce"])

    def rfactor_out(self, st, name):
        """The ``out`` of rfactor on *st*: one name per part of a tuple reduction."""
        if st.nouts > 1:
            self.features.add("rfactor-tuple")
            return [name] + [f"{name}{j}" for j in range(1, st.nouts)]
        return name

    def illegal(self):
        """One step that einloop must refuse, on a new-construct stage, if there is one."""
        options = []
        for st in self.stages.values():
            if getattr(st, "scan_axis", None):
                options += [(self._illegal_scan, st)]
            if st.scatter and st.leaves("reduce"):
                options += [(self._illegal_scatter, st)]
            if st.nouts > 1 and self._multi_readers(st):
                options += [(self._illegal_cache_read, st)]
            if st.extern:
                options += [(self._illegal_extern, st)]
        if options:
            fn, st = self.rng.choice(options)
            fn(st)
            self.features.add("illegal")

    def _illegal_scan(self, st):
        p = self.rng.choice(("split", "vectorize", "parallel", "compute_inline"))
        if p == "split":
            self.step("split", st.tensor, loop=st.scan_axis, factor=2, illegal=True)
        elif p == "compute_inline":
            self.step(p, st.tensor, illegal=True)
        else:
            self.step(p, st.tensor, loop=st.scan_axis, illegal=True)

    def _illegal_scatter(self, st):
        if self.chance(0.5):
            lp = self.rng.choice(st.leaves("reduce"))
            self.step(self.rng.choice(("parallel", "vectorize")), st.tensor, loop=lp[0],
                      illegal=True)
            return
        readers = [r for r in self.readers(st.tensor) if r.placement != "inline" and r.loops]
        if readers:
            r = self.rng.choice(readers)
            self.step("compute_at", st.tensor, parent=r.tensor,
                      loop=self.rng.choice(r.loops)[0], illegal=True)

    def _illegal_extern(self, st):
        """Inline the C call, or a stage it reads."""
        feeders = [self.stages[n] for n in st.reads if n in self.stages]
        target = self.rng.choice(feeders) if feeders and self.chance(0.5) else st
        self.step("compute_inline", target.tensor, illegal=True)

    def _multi_readers(self, st):
        return [r for r in self.readers(st.tensor) if r.placement != "inline"
                and any(p in getattr(r, "tensor_reads", ()) for p in st.parts)]

    def _illegal_cache_read(self, st):
        r = self.rng.choice(self._multi_readers(st))
        part = next(p for p in st.parts if p in r.tensor_reads)
        self.features.add("cache_read-multi")
        self.step("cache_read_parts", part, readers=[r.tensor], illegal=True)
