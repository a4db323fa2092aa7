"""Per-stage facts the auto-scheduler's rules decide on, on top of the te ComputeDAG.

One pass over the DAG, consumers before producers, gives every compute stage a :class:`Role`
(how the rules treat it) and, where it applies, the consumer it fuses into, the root stage it
may be computed at (its *anchor*), and the operand it may pack.  The :class:`MachineModel` gives
the SIMD width, the register file and the core count the tile heuristics aim at.
"""
from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass, field

from ....codegen import intrinsics
from ....codegen.target import Target as LLVMTarget
from ....codegen.vector import window_runs
from ....errors import ArgumentError
from ....runtime import cpu
from ....runtime.threads import default_num_threads
from ....ir import expr as E
from ....arith.linear import affine_in
from ....arith import simplify
from ....ir.visit import free_vars, reads_of, substitute
from ....te.dag import ComputeDAG
from ....te.scatter import is_scatter
from ....te.tensor import ComputeOp, PlaceholderOp
from ....te.scan import is_scan
from .knob_names import stage_names
from .loops import MIN_PARALLEL_POINTS
from .tensor_amx import offered_for as amx_offered


#: the last-level cache assumed where the machine's cannot be read (a target for another
#: architecture, a host that hides it): the L3 of a server part of the last decade (16-64 MiB
#: for EPYC and Xeon), so that a tensor this large is out of cache on most machines
DEFAULT_CACHE_BYTES = 32 << 20


class Role(enum.Enum):
    """How the rules treat a compute stage."""
    INLINE = "inline"            # injective, cheap: substituted into its consumers
    FLEXIBLE = "flexible"        # injective but dear (exp, branches): a compute-location choice
    TILED = "tiled"              # reduction with data reuse: multi-level tiling
    FUSED = "fused"              # elementwise consumer that a tiled stage is computed inside
    ROW = "row"                  # reduction without reuse (row max/sum, pooling, full sums)
    ROOT = "root"                # anything else: computed at the root, parallel + vectorized
    SCAN = "scan"                # a scan's state: its scan loop serial, the rest blocked
    SCATTER = "scatter"          # a scatter (te.scatter_reduce): free axes parallel + vectorized,
                                 # its domain serial or privatized (rules.fires_scatter)


@dataclass(frozen=True)
class MachineModel:
    """What the tile heuristics know of the machine a kernel will run on.

    ``lanes``: float32 lanes of a SIMD register; ``registers``: SIMD registers (the register
    tile's budget); ``cores``: the threads its parallel loops get; ``fma``: whether it has
    fused multiply-add (without, a product takes a register before it is added);
    ``cache_bytes``: the last-level cache (what a tensor must exceed to be sure it is not in
    cache when the kernel starts); ``min_parallel_points``: the fewest points of a loop nest's
    iteration domain worth a thread team (:data:`~.loops.MIN_PARALLEL_POINTS`; a test of the
    rules' loop structure on small operators states 1, a machine whose threads cost nothing).  :meth:`of` reads lanes, registers and FMA from the
    compilation target (whatever its spelling: host, ``-mcpu``, ``-mattr``), the cores from
    this process unless given, and the cache from this machine when the target is for its
    architecture; a test or a tuner for another machine states them.
    """
    lanes: int
    registers: int
    cores: int
    fma: bool = True
    cache_bytes: int = DEFAULT_CACHE_BYTES
    min_parallel_points: int = MIN_PARALLEL_POINTS
    #: names of the tensor intrinsics the target has (einloop's int8 and bf16 dot products, best
    #: first: :func:`einloop.codegen.intrinsics.for_target`); none for a model stated by hand
    intrinsics: tuple = ()

    def __post_init__(self):
        for name in ("lanes", "registers", "cores", "cache_bytes", "min_parallel_points"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ArgumentError(f"MachineModel.{name} must be a positive int, got {v!r}")
        if not isinstance(self.fma, bool):
            raise ArgumentError(f"MachineModel.fma must be True or False, got {self.fma!r}")
        if not isinstance(self.intrinsics, tuple) or \
                not all(isinstance(n, str) for n in self.intrinsics):
            raise ArgumentError(f"MachineModel.intrinsics must be a tuple of tensor intrinsic "
                                f"names, got {self.intrinsics!r}")

    @staticmethod
    def of(spec="llvm", cores=None) -> MachineModel:
        """The model of target *spec* (a target string or codegen Target).

        *cores*: the threads a kernel's parallel loops will get; by default those of this
        process (``EINLOOP_NUM_THREADS``, else the CPUs its affinity mask allows: what the
        thread runtime starts).  Tuning on a cluster, where the runners' machines run the
        kernels, pass their core count (``create_task(..., cores=N)``).
        """
        t = LLVMTarget.parse(spec)
        if cores is None:
            cores = default_num_threads()
        cache = None if cpu.foreign_arch(t.triple) else cpu.host_last_level_cache_bytes()
        cache = cache or DEFAULT_CACHE_BYTES
        if t.triple.startswith(("aarch64", "arm64")):
            return MachineModel(4, 32, cores, cache_bytes=cache)   # NEON: 32 x 128 bits, FMA
        # x86: AVX-512 has 32 zmm registers of 16 floats; AVX/AVX2 16 ymm of 8; SSE 16 xmm of 4
        wide = t.has_feature("avx512f")
        lanes = 16 if wide else 8 if t.has_feature("avx") else 4
        return MachineModel(lanes, 32 if wide else 16, cores, t.has_feature("fma"), cache,
                            intrinsics=tuple(x.name for x in amx_offered(t))
                            + tuple(x.name for x in intrinsics.for_target(t)))


@dataclass
class StageFacts:
    """What the rules know of one compute stage (by its DAG operation).  ``name``: the
    stage's name in the space, unique in its task (:func:`~.knob_names.stage_names`: the op's
    own, suffixed where ops share it); its knobs start with it."""
    op: object
    name: str
    role: Role
    spatial: tuple = ()                  # data IterVars
    reduce: tuple = ()                   # reduce IterVars
    fused_into: object = None            # TILED: the FUSED consumer op it is computed inside
    anchor: object = None                # FLEXIBLE/ROW: the root stage op it may be computed at
    packable: tuple = ()                 # TILED: (placeholder op, dim, spatial axis position)
    vector_ok: bool = False              # the last data axis is contiguous for every access
    vector_alt: int | None = None        # TILED: another data axis that may be the vector loop
    notes: list = field(default_factory=list)


def _lanes_for(dtype, lanes32):
    bits = {"float64": 64, "int64": 64, "float16": 16, "int16": 16, "int8": 8, "uint8": 8}
    return max(1, lanes32 * 32 // bits.get(str(dtype), 32))


class DagAnalysis:
    """Facts for every compute stage of the DAG of *outputs* on *target* (a target spec, read
    as :meth:`MachineModel.of` with *cores*, or a :class:`MachineModel`)."""

    def __init__(self, outputs, target="llvm", cores=None):
        self.dag = ComputeDAG(outputs)
        self.machine = target if isinstance(target, MachineModel) \
            else MachineModel.of(target, cores)
        self.facts = {}
        #: the tensorize rule's offers (:func:`~.tensor_probe.tensor_candidates`), once probed
        self.tensor_candidates = None
        dag = self.dag
        self._names = stage_names(dag.compute_ops)
        self._of_constants = _of_constants(dag)
        for op in reversed(dag.compute_ops):          # consumers first
            self.facts[id(op)] = self._classify(op)
        for op in dag.compute_ops:                     # fusion needs the consumers' roles
            f = self.facts[id(op)]
            if f.role is Role.TILED:
                self._fusion(f)
        for op in reversed(dag.compute_ops):           # anchors need the final roles
            f = self.facts[id(op)]
            if f.role in (Role.FLEXIBLE, Role.ROW):
                f.anchor = self.anchor_of(op)

    # lookup -------------------------------------------------------------------------------------
    def __getitem__(self, op) -> StageFacts:
        return self.facts[id(op.op if hasattr(op, "op") and not hasattr(op, "body") else op)]

    def stages(self):
        """The facts of every compute stage, producers first."""
        return [self.facts[id(op)] for op in self.dag.compute_ops]

    def lanes(self, op) -> int:
        """Vector lanes of compute *op*: a register of its narrowest output (argmax's value,
        not its int64 index, as for the max it computes along)."""
        outputs = range(getattr(op, "num_outputs", 1))
        return max(_lanes_for(op.output(n).dtype, self.machine.lanes) for n in outputs)

    # classification -----------------------------------------------------------------------------
    def _classify(self, op) -> StageFacts:
        dag = self.dag
        f = StageFacts(op, self._names[id(op)], Role.ROOT, tuple(op.axis), tuple(op.reduce_axis))
        f.vector_ok = contiguous_last(op)
        if is_scan(op):
            f.role = Role.SCAN
            f.vector_ok = f.vector_ok and op.axis[-1] is not op.scan_axis
        elif is_scatter(op):
            f.role = Role.SCATTER
        elif self._folds(op):
            f.role = Role.ROOT
        elif dag.is_strictly_inlinable(op):
            f.role = Role.INLINE
        elif dag.is_inlinable(op):
            f.role = Role.FLEXIBLE
        elif dag.is_reduction(op) and dag.has_data_reuse(op):
            f.role = Role.TILED
            f.packable = self._packable(op)
            if not f.vector_ok:
                # an operand strided along the last axis (K[j, d] in Q @ K^T) becomes contiguous
                # once packed along it: the axis may still be the vector loop
                last = len(op.axis) - 1
                f.vector_ok = contiguous_last(op, skip={id(src) for src, _, pos in f.packable
                                                        if pos == last})
            f.vector_alt = self._vector_alternative(op, f.packable)
        elif dag.is_reduction(op):
            f.role = Role.ROW
        return f

    def _folds(self, op) -> bool:
        """Is *op* an injective stage computed from constant inputs alone that a consumer would
        recompute inside one of its loops if inlined (batch norm's per-channel scale, read by
        every pixel)?  Such a stage stays at the root, where the kernel's prologue computes it
        once, ahead of the calls (:func:`~einloop.codegen.build.build_split`): constant
        folding, where inlining would pay its work per element of the consumer."""
        return self.dag.is_inlinable(op) and self._of_constants[id(op)] \
            and self.repeats_when_inlined(op)

    def _vector_alternative(self, op, packable):
        """The position of a data axis other than the last that a tiled stage may vectorize
        instead, or None.  Offered where vectors along the last axis waste work or loads:

        - its extent is no multiple of the lanes (a convolution's rows of 7, 14, 28 or 56
          pixels fill 16 lanes at most 7/8 of the time);
        - or it slides over a window (``x + rx``: a convolution's pixels), so that every tap
          of the window loads its vector at another offset, mostly across two cache lines,
          where vectors along the channels load each weight vector aligned and broadcast one
          input value per tap.  Which is faster depends on the channels, the window and the
          machine's load ports, so both are searched.

        The other axis's extent must be a multiple of the lanes (its output channels), and every
        read that uses it contiguous along it or an operand packed along it.  The tile's
        accumulator is then stored with that axis innermost (``storage_order``), as oneDNN's
        blocked layouts keep channels innermost.  The latest such axis."""
        lanes = self.lanes(op)
        axes = list(op.axis)
        if len(axes) < 2 or lanes < 2 or not isinstance(axes[-1].extent, int):
            return None
        if axes[-1].extent % lanes == 0 and not _slides_along(op, axes[-1].var):
            return None
        for pos in range(len(axes) - 2, -1, -1):
            ext = axes[pos].extent
            if not isinstance(ext, int) or ext < lanes or ext % lanes:
                continue
            packed = {id(src) for src, _, at in packable if at == pos}
            if _contiguous_along(op, axes[pos].var, packed):
                return pos
        return None

    def _packable(self, op):
        """Inputs read once by *op* that miss one of its data axes (reused across it) and have a
        dimension indexed by a bare data axis: the dimension of the latest such axis, packed so
        that a tile along it is contiguous (the B panel of GEMM, conv2d's output channels)."""
        axes = [iv.var for iv in op.axis]
        out = []
        reads = self.dag.reads(op)
        for r in reads:
            src = r.tensor.op
            if not isinstance(src, PlaceholderOp) or len(r.indices) < 2 \
                    or sum(x.tensor.op is src for x in reads) != 1:
                continue
            used = var_ids(r.indices)
            if all(id(v) in used for v, iv in zip(axes, op.axis) if iv.extent > 1):
                continue
            best = None
            for d, ix in enumerate(r.indices):
                pos = _position(ix, axes)
                if pos is not None:
                    if op.axis[pos].extent > 1 and (best is None or pos > best[1]):
                        best = (d, pos)
            if best is not None:
                out.append((src, best[0], best[1]))
        return tuple(out)

    def repeats_when_inlined(self, op) -> bool:
        """Would inlining *op* recompute its elements inside a loop of a consumer: does some
        consumer (seen through cheap inlined stages) read it from a loop nest with an axis of
        extent > 1 that the read's indices do not use?  Attention's ``e = exp(s - max)``
        read as ``e[b, i, j]`` by ``att[b, i, c] = sum_j e[b, i, j] * v[b, j, c]`` would
        compute each exponential once per ``c``: 64 times the work, for nothing."""
        for c in self.dag.consumers(op):
            loops = [iv.var for iv in tuple(c.axis) + tuple(c.reduce_axis)
                     if not isinstance(iv.extent, int) or iv.extent > 1]
            for r in self.dag.reads(c):
                if r.tensor.op is not op:
                    continue
                used = set().union(*(free_vars(ix) for ix in r.indices))
                if any(v not in used for v in loops):
                    return True
            cf = self.facts.get(id(c))
            if cf is not None and cf.role is Role.INLINE and self.repeats_when_inlined(c):
                return True
        return False

    def effective_consumers(self, op):
        """The stages that read *op*, seen through inlined stages."""
        out = {}
        for c in self.dag.consumers(op):
            cf = self.facts.get(id(c))
            if cf is not None and cf.role is Role.INLINE:
                out.update((id(x), x) for x in self.effective_consumers(c))
            else:
                out[id(c)] = c
        return list(out.values())

    def _fusion(self, f):
        """A tiled stage that is not an output and whose one consumer (through inlined stages)
        reads it point for point fuses into that consumer's tile (Ansor's MLT with fusion)."""
        op, dag = f.op, self.dag
        if dag.is_output(op):
            return
        users = self.effective_consumers(op)
        if len(users) != 1:
            return
        c = users[0]
        cf = self.facts.get(id(c))
        if cf is None:                               # an external stage: it reads a buffer
            return
        if cf.role not in (Role.ROOT, Role.FLEXIBLE) or tuple(c.shape) != tuple(op.shape) \
                or dag.is_reduction(c) or not self._pointwise_path(op, c):
            return
        if cf.role is Role.FLEXIBLE and not dag.is_output(c) and len(self.effective_consumers(c)):
            return                                   # an intermediate would have to stay root
        cf.role = Role.FUSED
        f.fused_into = c

    def _pointwise_path(self, op, c) -> bool:
        """Every stage from *op* to *c* (inlined ones between) reads its producer at its own
        axes in order and has the same shape."""
        for user in self.dag.consumers(op):
            uf = self.facts[id(user)]
            if user is not c and uf.role is not Role.INLINE:
                continue
            if tuple(user.shape) != tuple(op.shape):
                return False
            axes = [iv.var for iv in user.axis]
            for r in self.dag.reads(user):
                if r.tensor.op is op and not all(ix is v for ix, v in zip(r.indices, axes)):
                    return False
            if user is not c and not self._pointwise_path(user, c):
                return False
        return True

    def is_root(self, op) -> bool:
        """Whether *op* is computed at the root in every sketch (its loops can host others)."""
        f = self.facts.get(id(op))
        return f is not None and f.role in (Role.ROOT, Role.FUSED, Role.TILED) \
            and f.fused_into is None

    def anchor_of(self, op):
        """The one root stage every use of *op* leads to (directly or through stages anchored
        there, or a tiled stage computed inside it); None when uses lead to several."""
        found = set()
        anchors = []
        for c in self.effective_consumers(op):
            cf = self.facts.get(id(c))
            if cf is None:          # read by an external stage: its whole buffer, at the root
                return None
            if self.is_root(c):
                a = c
            elif cf.role is Role.TILED and cf.fused_into is not None:
                a = cf.fused_into
            elif cf.role in (Role.FLEXIBLE, Role.ROW):
                a = cf.anchor
            else:
                a = None
            if a is None:
                return None
            if id(a) not in found:
                found.add(id(a))
                anchors.append(a)
        return anchors[0] if len(anchors) == 1 else None

    # text ---------------------------------------------------------------------------------------
    def cum(self, ivs) -> int:
        return math.prod(iv.extent for iv in ivs)


def contiguous_last(op, skip=frozenset()) -> bool:
    """Whether the last data axis of compute *op* moves every read that uses it by one element
    of the read's last dimension (so a vector loop over it loads contiguously or broadcasts);
    reads of the ops whose ids are in *skip* (operands packed along that axis) are not asked."""
    if not op.axis or op.axis[-1].extent < 2:
        return False
    return _contiguous_along(op, op.axis[-1].var, skip)


def dot_rows(op, lanes, body=None) -> bool:
    """Whether compute *op* is a product of rows that a plain schedule should vectorize along
    its reduction (rfactor by the lanes), not along its last data axis: one reduction axis of
    a static extent of two vectors or more, read contiguously (last dimension, unit stride) by
    every read that uses it, while the last data axis is not.  ``Y[i, j] = sum_k X[i, k] *
    W[j, k]`` (a dense layer with PyTorch's weight layout, attention's scores): vectorized
    along j, every load of W is a gather of one element per row of W, and the loop over k
    outside it sweeps all of W's rows for each k.  *body*: the op's body with the stages a
    schedule inlines substituted (a transpose ``W.T`` inlined into the product reads W
    itself); by default its own."""
    if len(op.reduce_axis) != 1 or not op.axis or lanes < 2:
        return False
    k = op.reduce_axis[0]
    if not isinstance(k.extent, int) or k.extent < 2 * lanes:
        return False
    if body is None:
        body = op.body
        if contiguous_last(op) or windowed_last(op, lanes):
            return False
    elif _reads_contiguous_along(body, op.axis[-1].var, frozenset()):
        return False
    return _reads_contiguous_along(body, k.var, frozenset())


def _slides_along(op, v) -> bool:
    """Whether some read of compute *op* indexes a dimension with the Var *v* plus a reduction
    axis of *op* (a window: ``X[c, y + ry, x + rx]``)."""
    reduce_ids = {id(iv.var) for iv in op.reduce_axis}
    for r in reads_of(op.body):
        for ix in r.indices:
            ids = var_ids([ix])
            if id(v) in ids and ids & reduce_ids:
                return True
    return False


def _of_constants(dag) -> dict:
    """``{id(compute op): does it read constant placeholders and nothing else, directly or
    through the compute stages it reads?}`` over *dag*, producers first."""
    out = {}

    def constant(src):
        if isinstance(src, PlaceholderOp):
            return src.constant
        return isinstance(src, ComputeOp) and out.get(id(src), False)
    for op in dag.compute_ops:
        reads = dag.reads(op)
        out[id(op)] = bool(reads) and all(constant(r.tensor.op) for r in reads)
    return out


def _contiguous_along(op, v, skip) -> bool:
    """Whether every read of compute *op* that uses the Var *v* (but those of the ops whose
    ids are in *skip*) indexes it in its last dimension only, with unit stride."""
    return _reads_contiguous_along(op.body, v, skip)


def _reads_contiguous_along(body, v, skip) -> bool:
    """:func:`_contiguous_along` of the reads in expression *body*."""
    for r in reads_of(body):
        if id(r.tensor.op) in skip:
            continue
        for d, ix in enumerate(r.indices):
            if id(v) in var_ids([ix]) and (d != len(r.indices) - 1 or not _unit_stride(ix, v)):
                return False
    return True


@functools.lru_cache(maxsize=1024)
def windowed_last(op, lanes) -> bool:
    """Whether a vector loop of *lanes* over the last data axis of compute *op* reads every
    tensor with at most a few vector loads and a shuffle (the code generator's window loads):
    the element offsets of the first *lanes* values of the axis, the other loops at zero, fall
    into the few narrow windows it allows (a stride of 2, the period of ``x // 2`` and
    ``x % 2`` of an upsampling or a residue copy).  Tensors of symbolic shape are not asked.
    Memoized per operation (compared by identity): every config of a space asks it again."""
    if not op.axis or op.axis[-1].extent < 2:
        return False
    v = op.axis[-1].var
    for r in reads_of(op.body):
        if id(v) not in var_ids(r.indices):
            continue
        shape = r.tensor.shape
        if not all(isinstance(d, int) for d in shape):
            return False
        flat, stride = E.const(0), 1
        for ix, d in zip(reversed(r.indices), reversed(shape)):
            flat, stride = flat + ix * stride, stride * d
        others = {x: E.const(0) for x in free_vars(flat) if x is not v}
        offsets = []
        for k in range(lanes):
            got = simplify(substitute(flat, {**others, v: E.const(k)}))
            if not isinstance(got, E.Const):
                return False
            offsets.append(int(got.value))
        if window_runs(sorted(set(offsets)), lanes) is None:
            return False
    return True


def _unit_stride(ix, v) -> bool:
    """``ix == v + rest`` with ``v`` not in ``rest`` (its stride is one element)."""
    got = affine_in(ix, v)
    return got is not None and got[0] == 1


def var_ids(exprs) -> set:
    """ids of the Vars in *exprs* (Var ``==`` builds an expression, so sets of Vars are
    compared by identity)."""
    return {id(v) for e in exprs for v in free_vars(e)}


def _position(ix, axes):
    """Position of the bare Var *ix* in *axes* (by identity), else None."""
    if isinstance(ix, E.Var):
        for n, v in enumerate(axes):
            if v is ix:
                return n
    return None
