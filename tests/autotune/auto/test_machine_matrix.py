"""The auto-scheduler's invariants on every machine of a matrix, none of them the host: AVX2
(8 float lanes, 16 registers) and AVX-512 (16 lanes, 32 registers), each with 1, 2, 4 and 64
cores, and SSE without FMA (4 lanes) on 2 cores, over GEMM, a dense layer, conv2d, softmax,
layer norm and batched matmul.

What must hold whatever the machine: vector tiles are whole vectors of the model's lanes; a
seed's register tile fits the model's register file; the parallel loop gives every core work
when the operator has that much; every seed and the default schedule lower, and the schedules
compute what NumPy computes (the host runs them: a schedule needs none of the model's ISA)."""
import math
import warnings

import pytest

import ops
from rule_ops import check_steps, gemm_relu
from einloop import lower, te
from einloop.autotune.space.sketch import MachineModel, generate_space
from einloop.autotune.space.sketch.analysis import Role
from einloop.autotune.space.sketch.loops import MIN_PARALLEL_POINTS
from einloop.autotune.space.sketch.rules import (RFACTOR_CHUNKS_PER_CORE, KnobKind, knob_name,
                                                 tile_axes)
from einloop.autotune.space.sketch.seeds import _vector_and_row
from einloop.autotune.space.sketch.tiles import REGISTER_ROWS, divisors
from einloop.ir.stmt import For, ForKind
from einloop.ir.visit import walk_stmt
from einloop.schedule.replay import replay

MACHINES = {f"{isa}-{cores}c": MachineModel(lanes, regs, cores)
            for isa, lanes, regs in (("avx2", 8, 16), ("avx512", 16, 32))
            for cores in (1, 2, 4, 64)}
MACHINES["sse-nofma-2c"] = MachineModel(4, 16, 2, fma=False)

#: operator -> (declaration, the parallel iterations it offers a sane schedule at least: the
#: parallel loop must reach min(cores, this))
OPERATORS = {
    "gemm": (lambda: ops.gemm(96, 128, 64), 8),
    "dense": (lambda: gemm_relu(8, 256, 64), 4),
    "conv2d": (lambda: ops.conv2d(1, 8, 14, 14, 32, 3, 3, pad=1, stride=1), 8),
    "softmax": (lambda: ops.softmax(128, 512), 32),
    "layer_norm": (lambda: ops.layer_norm(64, 512), 16),
    "batch_matmul": (lambda: ops.batch_matmul(4, 32, 64, 32), 4),
}


def _parallel_extent(steps, ins, outs) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        func = lower(replay(steps, outs), ins + outs)
    return max((st.extent for st in walk_stmt(func.body)
                if isinstance(st, For) and st.kind is ForKind.PARALLEL), default=1)


@pytest.fixture(scope="module", params=sorted(OPERATORS))
def operator(request):
    return request.param


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_space_and_seeds_hold_the_invariants_of_the_machine(operator, machine):
    m = MACHINES[machine]
    make, offers = OPERATORS[operator]
    ins, outs, ref = make()
    sp = generate_space(outs, m)
    an = sp.analysis
    assert sp.machine is m and an.machine is m
    seeds = sp.seed_configs(8)
    assert seeds and len({c.index for c in seeds}) == len(seeds)
    for f in an.stages():
        if f.role is not Role.TILED:
            continue
        last, _ = _vector_and_row(an, f)
        lanes = an.lanes(f.op)
        if last is not None and last.extent > lanes:
            # every innermost tile the space offers on the vector axis: none, whole vectors,
            # or whole vectors and a half one; where another axis may be the vector loop
            # instead (vector_alt), also the register-tile heights of a tile's other side
            knob = sp.config_space.knobs[knob_name(KnobKind.TILE, f, last)]
            inner = {e.size[-1] for e in knob.entities}
            rows_too = set(REGISTER_ROWS) | set(divisors(last.extent)) \
                if f.vector_alt is not None else set()
            assert all(t == 1 or t % lanes == 0 or (t > lanes and t % (lanes // 2) == 0)
                       or t in rows_too for t in inner), (machine, sorted(inner))
        if f.vector_alt is not None:
            alt = f.spatial[f.vector_alt]
            assert alt.extent % lanes == 0 and last.extent % lanes, (machine, f.name)
        spatial, _ = tile_axes(f)
        vaxis = knob_name(KnobKind.VECTOR_AXIS, f)
        for c in seeds:
            tile = {iv.name: c[knob_name(KnobKind.TILE, f, iv)].size for iv in spatial}
            vec = f.spatial[f.vector_alt] if vaxis in sp.config_space.knobs \
                and c[vaxis].val == "alt" else last
            if vec is not None:
                width = tile[vec.name][-1]
                assert width % lanes == 0 or width == vec.extent, (machine, c)
                vectors = -(-width // lanes)
                rows = math.prod(tile[iv.name][-1] for iv in spatial if iv is not vec)
                # accumulators, plus the vectors loaded, one broadcast, one product without FMA
                spare = vectors + 1 + (0 if m.fma else 1)
                assert rows * vectors + spare <= m.registers, (machine, tile)
    for steps in [sp.default_steps()] + [sp.steps(c) for c in seeds]:
        assert _parallel_extent(steps, ins, outs) >= min(m.cores, offers), (machine, steps)


@pytest.mark.parametrize("machine", ["avx512-1c", "avx2-64c", "avx2-2c"])
@pytest.mark.parametrize("name", ["gemm", "dense", "softmax"])
def test_seeds_for_other_machines_compute_what_numpy_computes(name, machine):
    ins, outs, ref = OPERATORS[name][0]()
    sp = generate_space(outs, MACHINES[machine])
    for c in sp.seed_configs(3):
        check_steps(sp.steps(c), ins, outs, ref, rtol=1e-3)


def test_the_machines_shape_the_spaces():
    """The matrix is not the same machine eight times: the model's lanes set the vector tiles
    and its cores the parallel choices."""
    ins, outs, ref = ops.gemm(96, 128, 64)
    first = {name: generate_space(outs, m).seed_configs(1)[0]["C.tile.j"].size[-1]
             for name, m in MACHINES.items()}
    assert {first["avx2-2c"] % 8, first["avx512-2c"] % 16} == {0}
    assert first["avx512-2c"] > first["avx2-2c"]
    # 8 row sums of 16384: split into parallel chunks ("par") only where 8 rows cannot give
    # each core RFACTOR_CHUNKS_PER_CORE chunks (4 cores and more)
    X = te.placeholder((8, 16384), name="X")
    k = te.reduce_axis((0, 16384), name="k")
    S = te.compute((8,), lambda i: te.sum(X[i, k], axis=k), name="S")
    par = {name: "par" in [e.val for e in generate_space(S, m).config_space.knobs["S.rfactor"]
                           .entities] for name, m in MACHINES.items()}
    assert par == {name: m.cores * RFACTOR_CHUNKS_PER_CORE > 8 for name, m in MACHINES.items()}
    assert par["avx2-64c"] and not par["avx2-1c"]


#: operators whose stages have too few points for a thread team (loops.MIN_PARALLEL_POINTS)
SMALL = {
    "gemm": lambda: ops.gemm(16, 16, 16),
    "softmax": lambda: ops.softmax(16, 64),
    "layer_norm": lambda: ops.layer_norm(8, 128),
    "batch_matmul": lambda: ops.batch_matmul(2, 8, 16, 8),
}


@pytest.mark.parametrize("machine", ["avx2-2c", "avx512-64c"])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_stage_too_small_for_a_thread_team_runs_serially(name, machine):
    """A thread team costs microseconds to start and join on an idle machine and a scheduler
    slice on a shared core: the default schedule and every seed of a small operator are serial,
    and still compute what NumPy computes."""
    ins, outs, ref = SMALL[name]()
    sp = generate_space(outs, MACHINES[machine])
    seeds = sp.seed_configs(4)
    for steps in [sp.default_steps()] + [sp.steps(c) for c in seeds]:
        assert _parallel_extent(steps, ins, outs) == 1, (name, steps)
    check_steps(sp.default_steps(), ins, outs, ref, rtol=1e-3)


def test_the_threshold_counts_the_stages_computed_in_a_parallel_loop():
    """A GEMM whose output alone is small but whose product (the cache_write tile computed in
    the output's loops) has points enough for threads is parallel."""
    assert 64 * 64 < MIN_PARALLEL_POINTS <= 64 * 64 * 64
    ins, outs, _ = ops.gemm(64, 64, 64)
    sp = generate_space(outs, MACHINES["avx2-2c"])
    assert all(_parallel_extent(sp.steps(c), ins, outs) >= 2 for c in sp.seed_configs(4))


def test_seed_tiles_grow_with_the_register_file():
    """The seed variants' rows were chosen for 16 registers: a machine with 32 seeds register
    tiles twice as tall (within its registers; a height that does not divide the rows only
    where its partial tile wastes little), so that each loaded vector feeds more
    multiply-adds.  A 128-row GEMM: the tallest seed tile with four vectors is 6 rows on
    AVX-512 (22 tiles, the last 2 rows short), 3 rows' worth on AVX2 at most."""
    ins, outs, ref = gemm_relu(128, 512, 64)

    def tiles(machine):
        sp = generate_space(outs, machine)
        f = next(f for f in sp.analysis.stages() if f.role is Role.TILED)
        row, col = (knob_name(KnobKind.TILE, f, iv) for iv in f.spatial)
        lanes = sp.analysis.lanes(f.op)
        return sp, {(c[row].size[-1], c[col].size[-1] // lanes): c for c in sp.seed_configs(12)}

    sp512, big = tiles(MachineModel(16, 32, 2))
    _, small = tiles(MachineModel(8, 16, 2))
    assert (6, 4) in big and max(r for r, v in big if v == 4) == 6
    assert max(r * v for r, v in small) <= 16 - 3
    assert max(r * v for r, v in big) > max(r * v for r, v in small)
    assert all(r * v + v + 1 <= 32 for r, v in big)
    check_steps(sp512.steps(big[6, 4]), ins, outs, ref, rtol=1e-3)
