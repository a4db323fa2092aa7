"""Random legal schedules as plain data: the schedule half of a fuzz case.

A schedule is a list of steps such as ``{"p": "split", "tensor": "T1", "loop": "L3",
"factor": 4, "out": ["L7", "L8"]}``.  Loops are named by handles of our own (``L1``, ``L2``,
...), bound to the IterVars einloop returns, so a step list replays on freshly declared tensors
and prints as the schedule code a user would write (:func:`program.schedule_source`).

The generator simulates each stage's leaf loops (extent and kind) to draw only legal steps, in
the order a user would: cache stages first, then loop transformations, placement (inline,
compute_at a consumer's loop), annotations.  A few wild steps marked ``"try": True`` may be
illegal; einloop may reject them with an einloop.Error and the case goes on.  Steps marked
``"illegal": True`` must be refused with a ScheduleError (the newer constructs' rules, see
:mod:`.sched_lang`, which also knows their loops and placement).
"""
from __future__ import annotations

import random

from .gen_ops import reduce_axes
from .sched_lang import (LangSchedules, direct_reads, feed_externs, helper_stages, mark,
                         own_parts, pin_scan_axis, stage_loops, stage_reads)

FACTORS = (1, 2, 3, 4, 5, 7, 8, 16, 32, 64)


class Stage:
    """What the generator knows of one stage: its leaf loops and how it may be placed."""

    def __init__(self, tensor, shape, reduce_extents, reads, output):
        self.tensor = tensor
        self.loops = [["", e, "data"] for e in shape] + [["", e, "reduce"] for e in reduce_extents]
        self.reads = set(reads)
        self.output = output
        self.annotated = set()
        self.attach_points = set()
        self.placement = "root"

    def leaves(self, kind=None, free=False):
        return [lp for lp in self.loops if (kind is None or lp[2] == kind)
                and not (free and (lp[0] in self.annotated or lp[0] in self.attach_points))]


class ScheduleGen(LangSchedules):
    """Draws the steps of one schedule for a case's declarations."""

    def __init__(self, rng, case):
        self.rng = rng
        self.case = case
        self.steps = []
        self.features = set()
        self._n = 0
        self.stages = {}
        self.declared = {t["name"] for t in case["tensors"]}
        self.descs = {t["name"]: t for t in case["tensors"]}
        for t in case["tensors"]:
            if t["kind"] == "placeholder":
                continue
            if t["kind"] in ("compute", "einsum"):
                shape, red = t["shape"], [k["extent"] for k in reduce_axes(t, case)]
            else:
                shape, red = stage_loops(t, case)
            helpers = helper_stages(t)
            st = Stage(t["name"], shape, red, stage_reads(direct_reads(t), case),
                       any(n in case["outputs"] for n in own_parts(t)))
            st.tensor_reads = set(direct_reads(t))
            mark(st, t)
            for name, hshape, reads, root in helpers:
                self._helper(st, name, hshape, stage_reads(reads, case), root)
            self.stages[t["name"]] = st
        feed_externs(self.stages)

    def _helper(self, st, name, shape, reads, root):
        """A stage construct *st* declares besides its own (sched_lang.helper_stages): a
        scan's init, which the scan reads, or welford's variance, which reads *st*."""
        h = Stage(name, shape, (), reads, name in self.case["outputs"])
        mark(h, None)
        if root:
            h.root_only, h.inlinable = True, False
        if st.tensor not in reads:               # an init: the scan reads it
            st.reads.add(name)
        self.stages[name] = h

    def chance(self, p):
        return self.rng.random() < p

    def handle(self):
        self._n += 1
        return f"L{self._n}"

    def step(self, p, tensor, **args):
        self.features.add(p)
        self.steps.append({"p": p, "tensor": tensor, **args})

    def readers(self, name):
        return [s for s in self.stages.values() if name in s.reads]

    # the whole schedule -----------------------------------------------------------------------
    def generate(self):
        if self.chance(0.2):
            self.cache_read()
        if self.chance(0.15):
            self.cache_write()
        for st in self.stages.values():
            if st.extern:
                continue                   # a C call has no loops to name
            names = [self.handle() for _ in st.loops]
            for lp, h in zip(st.loops, names):
                lp[0] = h
            self.step("axes", st.tensor, axis=[lp[0] for lp in st.loops if lp[2] == "data"],
                      reduce_axis=[lp[0] for lp in st.loops if lp[2] == "reduce"])
            st.data_axes = [lp[0] for lp in st.loops if lp[2] == "data"]
            pin_scan_axis(st, self.descs.get(st.tensor))
        for st in list(self.stages.values()):
            if st.leaves("reduce") and self.chance(0.2):
                self.rfactor_scatter(st) if st.scatter else self.rfactor(st)
        order = list(self.stages.values())
        self.rng.shuffle(order)
        for st in order:       # an inlined stage has no loops to transform, so decide first
            if not st.output and self.chance(0.25) and st.leaves("reduce") == [] \
                    and st.inlinable:
                st.placement = "inline"
        for st in order:
            if st.placement != "inline":
                for _ in range(self.rng.randint(0, 3)):
                    self.transform(st)
        for st in order:
            if st.placement == "inline":
                self.step("compute_inline", st.tensor)
            elif not st.output and not st.root_only and \
                    self.chance(0.7 if st.tensor not in self.declared else 0.35):
                self.compute_at(st)
                if st.placement == "at" and self.chance(0.1):
                    st.placement = "root"          # compute_root undoes compute_at
                    self.step("compute_root", st.tensor)
        for st in order:
            if st.placement != "inline" and st.loops:
                self.annotate(st)
        for _ in range(self.rng.randint(1, 2) if self.chance(0.15) else 0):
            self.wild()
        if self.chance(0.3):
            self.illegal()
        return self.steps

    # stage-graph steps ------------------------------------------------------------------------
    def cache_read(self):
        srcs = [t["name"] for t in self.case["tensors"] if "parts" not in t
                and self._cache_readers(t["name"])]
        if not srcs:
            return
        src = self.rng.choice(srcs)
        readers = self._cache_readers(src)
        readers = self.rng.sample(readers, self.rng.randint(1, len(readers)))
        name = f"{src}_r{len(self.steps)}"
        shape = next(t["shape"] for t in self.case["tensors"] if t["name"] == src)
        for r in readers:
            r.reads = (r.reads - {src}) | {name}
        self.stages[name] = Stage(name, shape, (), {src}, False)
        mark(self.stages[name], None)
        self.step("cache_read", src, readers=[r.tensor for r in readers], out=name)

    def _cache_readers(self, name):
        """The readers of *name* whose reads cache_read may redirect (not a scatter's)."""
        return [r for r in self.readers(name) if not r.scatter and not r.extern]

    def cache_write(self):
        cands = [st for st in self.stages.values() if st.tensor in self.declared
                 and st.kind in ("compute", "einsum", "argreduce", "tuple_reduce", "multi",
                                 "welford")]
        if not cands:
            return
        st = self.rng.choice(cands)
        name = f"{st.tensor}_w"
        cache = Stage(name, [lp[1] for lp in st.loops if lp[2] == "data"],
                      [lp[1] for lp in st.loops if lp[2] == "reduce"], st.reads, False)
        st.loops = [lp for lp in st.loops if lp[2] == "data"]
        st.reads = {name}
        mark(cache, None)
        cache.parts, cache.nouts = st.parts, st.nouts
        self.stages[name] = cache
        out = name                   # a multi-output stage gets one cache per output
        if st.nouts > 1:
            out = [name] + [f"{name}{j}" for j in range(1, st.nouts)]
            self.features.add("cache_write-multi")
        self.step("cache_write", st.tensor, out=out)

    def rfactor(self, st):
        """Factor a reduction loop (often the inner part of a split) of *st* into ``<T>_rf``;
        both stages get their loops bound afresh, as after einloop's rfactor."""
        if self.chance(0.7):
            self.split(st, self.rng.choice(st.leaves("reduce")))
        lp = self.rng.choice(st.leaves("reduce"))
        data = st.leaves("data")
        fa = self.rng.randint(0, len(data))
        name = f"{st.tensor}_rf"
        shape = [d[1] for d in data]
        shape.insert(fa, lp[1])
        rf = Stage(name, shape, [r[1] for r in st.leaves("reduce") if r is not lp], st.reads,
                   False)
        mark(rf, None)
        rf.parts, rf.nouts = st.parts, st.nouts
        self.stages[name] = rf
        st.reads = {name}
        st.loops = [["", d[1], "data"] for d in data] + [["", lp[1], "reduce"]]
        self.step("rfactor", st.tensor, loop=lp[0], factor_axis=fa, out=self.rfactor_out(st, name))
        self._rename_loops(rf, st)

    # loop transformations ---------------------------------------------------------------------
    def transform(self, st):
        r = self.rng.random()
        if r < 0.45:
            self.split(st)
        elif r < 0.6:
            self.tile(st)
        elif r < 0.8:
            self.fuse(st)
        else:
            self.reorder(st)

    def _replace(self, st, old, new):
        k = st.loops.index(old)
        st.loops[k:k + 1] = new

    def split(self, st, loop=None):
        free = st.leaves(free=True)
        if not free:
            return None
        lp = loop or self.rng.choice(free)
        outer, inner = self.handle(), self.handle()
        if self.chance(0.7):
            f = self.rng.choice(FACTORS)
            args = {"factor": f}
            ie = min(f, lp[1])
            oe = -(-lp[1] // ie)
        else:
            n = self.rng.choice(FACTORS[:6])
            args = {"nparts": n}
            oe = min(n, lp[1])
            ie = -(-lp[1] // oe)
        self.step("split", st.tensor, loop=lp[0], **args, out=[outer, inner])
        self._replace(st, lp, [[outer, oe, lp[2]], [inner, ie, lp[2]]])
        return outer, inner

    def tile(self, st):
        data = st.leaves("data", free=True)
        if len(data) < 2:
            return self.split(st)
        x, y = data[0], data[1]
        xf, yf = self.rng.choice(FACTORS[:8]), self.rng.choice(FACTORS[:8])
        out = [self.handle() for _ in range(4)]
        self.step("tile", st.tensor, x=x[0], y=y[0], xf=xf, yf=yf, out=out)
        # as einloop does it: split x, split y, then reorder the four loops in their slots
        xi, yi = min(xf, x[1]), min(yf, y[1])
        xo_, xi_ = [out[0], -(-x[1] // xi), x[2]], [out[2], xi, x[2]]
        yo_, yi_ = [out[1], -(-y[1] // yi), y[2]], [out[3], yi, y[2]]
        self._replace(st, x, [xo_, xi_])
        self._replace(st, y, [yo_, yi_])
        self._reorder(st, [xo_, yo_, xi_, yi_])
        return out

    def _reorder(self, st, loops):
        slots = sorted(st.loops.index(lp) for lp in loops)
        for k, lp in zip(slots, loops):
            st.loops[k] = lp

    def fuse(self, st):
        pairs = [(a, b) for a, b in zip(st.loops, st.loops[1:]) if a[2] == b[2]
                 and not {a[0], b[0]} & (st.annotated | st.attach_points)]
        if not pairs:
            return None
        a, b = self.rng.choice(pairs)
        h = self.handle()
        self.step("fuse", st.tensor, loops=[a[0], b[0]], out=h)
        k = st.loops.index(a)
        st.loops[k:k + 2] = [[h, a[1] * b[1], a[2]]]
        return h

    def reorder(self, st):
        # a stencil scan's loop stays outermost (sched_lang): the others are reordered
        loops = st.loops[1:] if getattr(st, "scan_first", False) else st.loops
        if len(loops) < 2:
            return
        picked = self.rng.sample(loops, self.rng.randint(2, len(loops)))
        self._reorder(st, picked)
        self.step("reorder", st.tensor, loops=[lp[0] for lp in picked])

    # placement and annotations ----------------------------------------------------------------
    def consumers(self, st):
        """Stages that read *st*, directly or through inlined stages."""
        out, todo, seen = [], [st.tensor], set()
        while todo:
            for r in self.readers(todo.pop()):
                if r.tensor not in seen:
                    seen.add(r.tensor)
                    if r.placement == "inline":
                        todo.append(r.tensor)
                    else:
                        out.append(r)
        return out

    def compute_at(self, st):
        parents = self.consumers(st)
        if len(parents) != 1:            # every consumer must run inside the attach loop
            self.compute_at_enclosing(st, parents)
            return
        parent = parents[0]
        self._attach(st, parent, self.rng.choice(parent.loops))

    def _attach(self, st, parent, lp):
        parent.attach_points.add(lp[0])
        st.placement, st.at = "at", (parent, lp)
        self.step("compute_at", st.tensor, parent=parent.tensor, loop=lp[0])

    def compute_at_enclosing(self, st, readers):
        """With several readers: at a loop of one of them that the others run inside, each
        through its chain of compute_at (as the stages of a one-pass row operator nest)."""
        for parent in self.rng.sample(readers, len(readers)):
            links = [self._link_into(r, parent) for r in readers if r is not parent]
            if None not in links:
                deepest = min(links, default=len(parent.loops) - 1)
                self._attach(st, parent, parent.loops[self.rng.randint(0, deepest)])
                return

    @staticmethod
    def _link_into(st, parent):
        """The position of the loop of *parent* that *st* is computed in, or None."""
        while st.placement == "at":
            up, lp = st.at
            if up is parent:
                return parent.loops.index(lp)
            st = up
        return None

    def annotate(self, st):
        data = st.leaves("data", free=True)
        if data and st.loops[-1] in data and self.chance(0.4):
            self.step("vectorize", st.tensor, loop=st.loops[-1][0])
            st.annotated.add(st.loops[-1][0])
        elif data and self.chance(0.15):
            # an outer data loop: its inner loops run on all lanes at once (or the loop stays
            # serial with a warning where lanes could meet)
            lp = self.rng.choice(data)
            self.step("vectorize", st.tensor, loop=lp[0])
            st.annotated.add(lp[0])
        data = [lp for lp in st.leaves("data") if lp[0] not in st.annotated]
        if data and self.chance(0.35):
            lp = data[0] if self.chance(0.7) else self.rng.choice(data)
            self.step("parallel", st.tensor, loop=lp[0])
            st.annotated.add(lp[0])
        small = [lp for lp in st.leaves() if lp[1] <= 16 and lp[0] not in st.annotated]
        if small and self.chance(0.3):
            lp = self.rng.choice(small)
            self.step("unroll", st.tensor, loop=lp[0])
            st.annotated.add(lp[0])
        # inputs only: a stage's producer may end up computed inside its loops, where its
        # buffer cannot be prefetched (a right rejection of the whole case, coverage lost)
        reads = sorted(r for r in st.reads if r not in self.stages)
        if reads and self.chance(0.25):
            # may name a vectorized loop: the call says so
            lp = self.rng.choice(st.leaves())
            self.step("prefetch", st.tensor, source=self.rng.choice(reads), loop=lp[0],
                      offset=self.rng.choice((1, 2)), **{"try": True})
        # streaming stores: a stage at the root storing each element once (one computed at a
        # loop is rejected when lowered, which would reject the whole case)
        if st.placement == "root" and not any(lp[2] == "reduce" for lp in st.loops) \
                and self.chance(0.2):
            self.step("nontemporal", st.tensor, **{"try": True})
        # a stage's own buffer laid out in another dimension order (an output's is the caller's)
        axes = getattr(st, "data_axes", [])
        if not st.output and not st.scatter and not getattr(st, "feeds_extern", False) \
                and len(axes) > 1 and self.chance(0.2):
            order = list(axes)
            self.rng.shuffle(order)
            self.step("storage_order", st.tensor, loops=order)

    def wild(self):
        """A step that may be illegal: einloop must reject it with an einloop.Error or do it."""
        looped = [x for x in self.stages.values() if x.loops]
        if not looped:
            return
        st = self.rng.choice(looped)
        p = self.rng.choice(("parallel", "unroll", "compute_inline", "compute_root", "compute_at"))
        if p in ("parallel", "unroll"):
            self.step(p, st.tensor, loop=self.rng.choice(st.loops)[0], **{"try": True})
        elif p == "compute_at":
            other = self.rng.choice(looped)
            self.step(p, st.tensor, parent=other.tensor, loop=self.rng.choice(other.loops)[0],
                      **{"try": True})
        else:
            self.step(p, st.tensor, **{"try": True})
        self.features.add("wild")


def generate_schedule(case, seed):
    """Schedule steps for the declaration half of *case*, drawn from ``Random(seed)``."""
    g = ScheduleGen(random.Random(seed), case)
    return g.generate(), sorted(g.features)
