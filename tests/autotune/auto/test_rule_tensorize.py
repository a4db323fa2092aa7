"""The tensorize rule: an int8 x int8 -> int32 reduction gets tensorized sketches (the weight
packed into the intrinsic's tiles, the intrinsic's tile innermost, the register tile searched)
next to the tiled ones, on targets with an int8 intrinsic; every one is exact against NumPy's
int32 matmul; a float32 matmul, a target without an intrinsic, and a declaration no intrinsic
computes get none (the last skipped with its reason, never raised)."""
import re

import numpy as np
import pytest

from einloop import build, te
from einloop.autotune.space.sketch import MachineModel, RuleKind, generate_space
from einloop.autotune.space.sketch.rules import KnobKind, knob_name
from einloop.autotune.space.sketch.seeds import config_from
from einloop.codegen.target import Target
from einloop.errors import ArgumentError, TEError
from einloop.schedule.steps import StepKind

from rule_ops import AVX2

HOST_AVX2 = Target.parse("llvm").has_feature("avx2")
needs_avx2 = pytest.mark.skipif(not HOST_AVX2, reason="x86-64 with AVX2 only")
CASCADELAKE = "llvm -mcpu=cascadelake"


def matmul_u8s8(M, N, K, a_dtype="uint8", swapped=False):
    A = te.placeholder((M, K), a_dtype, name="A")
    B = te.placeholder((K, N), "int8", name="B")
    k = te.reduce_axis((0, K), name="k")
    if swapped:     # B's cast first: not the intrinsic's expression node for node
        body = lambda i, j: te.sum(B[k, j].astype("int32") * A[i, k].astype("int32"), axis=k)
    else:
        body = lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k)
    return [A, B], te.compute((M, N), body, name="C")


def batched_u8s8(L, M, N, K):
    A = te.placeholder((L, M, K), "uint8", name="A")
    B = te.placeholder((L, K, N), "int8", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((L, M, N), lambda b, i, j: te.sum(
        A[b, i, k].astype("int32") * B[b, k, j].astype("int32"), axis=k), name="C")
    return [A, B], C


def reference(a, b):
    return np.matmul(a.astype(np.int32), b.astype(np.int32))


def random_operands(ins, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, ins[0].shape, dtype=np.uint8)
    b = rng.integers(-128, 128, ins[1].shape, dtype=np.int8)
    a.reshape(-1, a.shape[-1])[0, :] = 255          # the largest products in magnitude
    b[..., 0] = -128
    return a, b


def run_exact(s, ins, C, target="llvm"):
    f = build(s, ins + [C], target=target)
    a, b = random_operands(ins)
    c = np.full(C.shape, 7, np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, reference(a, b))
    return f


def tensorize_values(sp, stage="C"):
    knob = sp.config_space.knobs.get(knob_name(KnobKind.TENSORIZE, stage))
    return [] if knob is None else [e.val for e in knob.entities]


def tensorized_seeds(sp, n=4):
    """The seeds whose steps tensorize, of the first *n* seeds."""
    return [c for c in sp.seed_configs(n)
            if StepKind.TENSORIZE in [st.kind for st in sp.steps(c)]]


@needs_avx2
def test_the_host_space_of_an_int8_matmul_offers_the_avx2_sketch():
    ins, C = matmul_u8s8(37, 45, 34)
    sp = generate_space(C)
    assert RuleKind.TENSORIZE in sp.fired["C"]
    assert tensorize_values(sp) == ["none", "x86.avx2.u8s8_i32x8"]
    # the default config stays the tiled sketch
    assert StepKind.TENSORIZE not in [st.kind for st in sp.steps(None)]
    steps = sp.steps(config_from(sp, {"C.tensorize": "x86.avx2.u8s8_i32x8", "C.trows": 4,
                                      "C.ttiles": 1}))
    kinds = [(st.kind, st.stage) for st in steps]
    assert kinds[:3] == [(StepKind.PACK, "B"), (StepKind.PACK, "B.pack"),
                         (StepKind.COMPUTE_INLINE, "B.pack")]
    assert (StepKind.TENSORIZE, "C") in kinds or (StepKind.TENSORIZE, "C.local") in kinds
    assert "tensorize" in sp.describe()


@needs_avx2
@pytest.mark.parametrize("M, N, K", [(37, 45, 34), (101, 16, 10), (5, 37, 101), (1, 8, 2)])
def test_every_tensorized_seed_of_a_matmul_is_exact(M, N, K):
    ins, C = matmul_u8s8(M, N, K)
    sp = generate_space(C)
    seeds = tensorized_seeds(sp, 3)
    # the tensorized seeds come first (measured first); a tiny matmul has fewer distinct ones
    assert len(seeds) >= (1 if M * N < 64 else 3)
    assert [c.index for c in seeds] == [c.index for c in sp.seed_configs(3)[:len(seeds)]]
    for c in seeds:
        f = run_exact(sp.schedule(c), ins, C)
        assert re.search(r"\bvpmaddwd\b", f.get_source("asm"))


@needs_avx2
@pytest.mark.parametrize("L, M, N, K", [(3, 13, 48, 34), (2, 7, 45, 11)])
def test_every_tensorized_seed_of_a_batched_matmul_is_exact(L, M, N, K):
    ins, C = batched_u8s8(L, M, N, K)
    sp = generate_space(C)
    seeds = tensorized_seeds(sp, 3)
    assert seeds
    for c in seeds:
        run_exact(sp.schedule(c), ins, C)


@needs_avx2
def test_random_tensorized_configs_are_exact():
    """The tuner's other points of the sketch: register tiles, orders, partial tiles."""
    ins, C = matmul_u8s8(29, 56, 26)
    sp = generate_space(C)
    rng = np.random.default_rng(3)
    cs = sp.config_space
    names = list(cs.knobs)
    at = names.index("C.tensorize")
    for _ in range(4):
        point = [int(rng.integers(len(k))) for k in cs.knobs.values()]
        point[at] = 1
        c = cs.get(cs.index_of(point))
        steps = sp.steps(c)
        assert StepKind.TENSORIZE in [st.kind for st in steps]
        run_exact(sp.schedule(c), ins, C)


@pytest.mark.parametrize("make", [lambda: matmul_u8s8(9, 32, 16)[1],
                                  lambda: batched_u8s8(2, 9, 32, 16)[1]],
                         ids=["matmul", "batched"])
def test_cascadelake_offers_vnni_first_and_compiles_to_vpdpbusd(make):
    C = make()
    sp = generate_space(C, CASCADELAKE)
    assert tensorize_values(sp)[:2] == ["none", "x86.avx512vnni.u8s8_i32x16"]
    (seed, *_) = tensorized_seeds(sp)
    assert seed.entities["C.tensorize"].val == "x86.avx512vnni.u8s8_i32x16"
    ins = list(sp.analysis.dag.inputs)
    f = build(sp.schedule(seed), ins + [C], target=CASCADELAKE)    # compiled, not run here
    asm = f.get_source("asm")
    assert re.search(r"\bvpdpbusd\s+[^\n]*%zmm", asm)
    assert not re.search(r"\bvpmulld\b", asm)


def test_a_float32_matmul_has_no_tensorized_sketch():
    A = te.placeholder((32, 24), name="A")
    B = te.placeholder((24, 40), name="B")
    k = te.reduce_axis((0, 24), name="k")
    C = te.compute((32, 40), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    for target in ("llvm", CASCADELAKE):
        sp = generate_space(C, target)
        assert RuleKind.TENSORIZE not in sp.fired["C"]
        assert tensorize_values(sp) == []
        assert sp.tensorize_skipped        # each intrinsic tried, and skipped saying why
        assert all(re.search(r"accumulates float32, the intrinsic \S+ int32", why)
                   or "bf16" in intrin and re.search(r"where the intrinsic \S+ computes "
                                                     r"float32\(A", why)   # AMX's bf16 ones
                   for _, intrin, why in sp.tensorize_skipped)


def test_a_target_without_int8_intrinsics_changes_nothing():
    ins, C = matmul_u8s8(16, 24, 8)
    sp = generate_space(C, AVX2)                        # a model stated by hand: none
    assert RuleKind.TENSORIZE not in sp.fired["C"]
    assert not any(n.endswith((".tensorize", ".trows", ".ttiles", ".torder"))
                   for n in sp.config_space.knobs)
    assert sp.tensorize_skipped == []
    sse = generate_space(C, "llvm -mcpu=x86-64")         # SSE2 only: no intrinsic
    assert tensorize_values(sse) == [] and sse.tensorize_skipped == []


@pytest.mark.parametrize("kwargs, why", [
    (dict(a_dtype="int8"), r"operand A of stage C(\.local)? is int8, the intrinsic "
                           r"x86\.avx2\.u8s8_i32x8's A is uint8"),
    (dict(swapped=True), r"operand B\.pack\.pack of stage C(\.local)? is int8, the "
                         r"intrinsic x86\.avx2\.u8s8_i32x8's A is uint8")])
def test_a_declaration_no_intrinsic_computes_is_skipped_with_its_reason(kwargs, why):
    ins, C = matmul_u8s8(16, 24, 8, **kwargs)
    sp = generate_space(C, "llvm -mcpu=haswell")
    assert tensorize_values(sp) == []
    assert RuleKind.TENSORIZE not in sp.fired["C"]
    ((stage, intrin, reason),) = sp.tensorize_skipped
    assert (stage, intrin) == ("C", "x86.avx2.u8s8_i32x8")
    assert re.search(why, reason), reason
    assert "not offered" in sp.describe()


def test_machine_model_intrinsics_must_be_a_tuple_of_names():
    with pytest.raises(ArgumentError, match=r"MachineModel\.intrinsics must be a tuple of "
                                            r"tensor intrinsic names, got 'x86'"):
        MachineModel(8, 16, 2, intrinsics="x86")


def test_an_undeclared_intrinsic_in_a_machine_model_is_a_clear_error():
    ins, C = matmul_u8s8(16, 24, 8)
    model = MachineModel(8, 16, 2, intrinsics=("nobody.declared_this",))
    with pytest.raises(TEError, match=r"no tensor intrinsic is declared as "
                                      r"'nobody\.declared_this'"):
        generate_space(C, model)


@needs_avx2
def test_auto_schedule_finds_an_exact_tensorized_schedule_and_its_log_replays(tmp_path):
    from einloop import autotune
    from einloop.autotune.log import record
    ins, C = matmul_u8s8(48, 32, 64)
    log = str(tmp_path / "int8.jsonl")
    fast = autotune.measure_option(number=1, repeat=1, timeout=20, n_parallel=2)
    s, args = autotune.auto_schedule(ins + [C], n_trial=4, log=log, seed=0, measure_option=fast,
                                     quiet=True)
    assert StepKind.TENSORIZE in [st.kind for st in s.steps]
    run_exact(s, args[:2], args[2])
    assert len(record.load(log)) == 4
    with autotune.apply_history_best(log) as ctx:          # deploy: replayed, not measured
        again, args2 = autotune.auto_schedule(ins + [C])
    assert ctx.hits == 1
    assert [st.kind for st in again.steps] == [st.kind for st in s.steps]
    run_exact(again, args2[:2], args2[2])


@needs_avx2
@pytest.mark.parametrize("order", ["cols", "rows"])
def test_a_column_panel_outer_tile_is_exact(order):
    """Register tiles of columns grouped into panels of 4 (the outer tile), in either order, with
    an accumulator (N a multiple of the tile) and tiled in place (N = 101: the last partial)."""
    for M, N, K in ((23, 96, 18), (19, 101, 14)):
        ins, C = matmul_u8s8(M, N, K)
        sp = generate_space(C)
        wish = {"C.tensorize": "x86.avx2.u8s8_i32x8", "C.trows": 4, "C.ttiles": 1,
                "C.torder": order}
        c = config_from(sp, {**wish, "C.tpanel": 4})
        assert c.entities["C.tpanel"].val == 4
        steps = sp.steps(c)
        assert StepKind.TENSORIZE in [st.kind for st in steps]
        no_panel = sp.steps(config_from(sp, {**wish, "C.tpanel": 1}))
        splits = [sum(st.kind is StepKind.SPLIT for st in x) for x in (steps, no_panel)]
        assert splits[0] == splits[1] + 1           # the column tiles' loop split into panels
        run_exact(sp.schedule(c), ins, C)
