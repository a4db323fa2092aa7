"""Kernels with symbolic extents (``float32[n, m]``) at the runtime layer: each call binds the
variables from the arrays, checks every other occurrence, sizes the temporaries, and passes the
values to native code (a ctypes callback, ``native_stub.SymbolicStub``) as int64s after the
temporaries; metadata and headers carry them."""
import json
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from einloop.errors import ArgumentError, InternalError, KernelRuntimeError
from einloop.runtime import BufferSpec, Signature, VarSpec
from einloop.runtime.header import header_text, kernel_declaration
from einloop.runtime.fastcall import make_fast_call
from einloop.runtime.kernel import _DATA_OFFSET, _dlpack_pointer
from einloop.runtime.library import signature_from_json, signature_to_json
from native_stub import SIGNATURE, SYMBOLIC, symbolic_kernel

SHAPES = "the shapes are A: float32[n, m], B: float32[n, m]"


def _signature(shape, *variables):
    """A, B (written) and the float64 temp T, all of *shape*, over *variables*."""
    return Signature((BufferSpec("A", "float32", shape), BufferSpec("B", "float32", shape)),
                     (BufferSpec("T", "float64", shape),), ("B",), variables)


MIXED = _signature(("n", 4), VarSpec("n"))                 # n >= 0, a static dimension
SQUARE = _signature(("n", "n"), VarSpec("n", 1))           # one variable twice in a shape


def _run(k, shape, call=None):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 3
    b = np.full(shape, -1, np.float32)
    (call or k)(a, b)
    np.testing.assert_array_equal(b, 2 * a)
    return k.owner.calls[-1]


# calls -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, m", [(1, 1), (1, 1024), (13, 7), (8, 8), (8, 1), (1000, 1031)])
def test_calls_bind_the_variables_at_every_size(n, m):
    k = symbolic_kernel()
    for call in (k, lambda *args: k._call_general(args)):
        seen = _run(k, (n, m), call)
        assert seen["values"] == (n, m) and seen["nthreads"] == 1
        # the temp T: float64[n, m], in a block large enough for this call's sizes, given
        # back to the kernel's pool after the call
        assert seen["t_count"] == n * m
        block = k._workspaces.take(0)
        assert block.address <= seen["t"] and seen["t"] + n * m * 8 <= block.address + block.nbytes
        k._workspaces.give(block)


def test_one_kernel_serves_many_sizes_in_turn():
    k = symbolic_kernel(parallel=True)
    k.num_threads = 2
    for n in (5, 1, 64, 3, 997):
        seen = _run(k, (n, 3))
        assert seen["values"] == (n, 3) and seen["nthreads"] == 2


def test_a_variable_may_be_zero_when_its_minimum_is_zero():
    k = symbolic_kernel()
    seen = _run(k, (3, 0))
    assert seen["values"] == (3, 0)
    assert _run(symbolic_kernel(MIXED), (0, 4))["values"] == (0,)


def test_a_variable_repeated_in_one_shape_and_a_static_dimension():
    square, mixed = symbolic_kernel(SQUARE), symbolic_kernel(MIXED)
    assert _run(square, (6, 6))["values"] == (6,)
    assert _run(mixed, (9, 4))["values"] == (9,)
    with pytest.raises(ArgumentError, match=r"^kernel double: argument 0 \(A\): dimension 1 is "
                                            r"7, but n = 6 \(from argument 0 \(A\), dimension "
                                            r"0\); the shapes are A: float32\[n, n\]"):
        square(np.zeros((6, 7), np.float32), np.zeros((6, 7), np.float32))
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\): expected shape \(n, 4\), got "
                                            r"\(9, 5\)$"):
        mixed(np.zeros((9, 4), np.float32), np.zeros((9, 5), np.float32))
    with pytest.raises(ArgumentError, match=r"argument 0 \(A\): expected shape \(n, 4\), got "
                                            r"\(9,\)$"):
        mixed(np.zeros(9, np.float32), np.zeros((9, 4), np.float32))


# errors --------------------------------------------------------------------------------------
def test_inconsistent_shapes_name_the_dimension_and_the_values():
    k = symbolic_kernel()
    a = np.zeros((5, 3), np.float32)
    with pytest.raises(ArgumentError) as err:
        k(a, np.zeros((7, 3), np.float32))
    assert str(err.value) == ("kernel double: argument 1 (B): dimension 0 is 7, but n = 5 (from "
                              "argument 0 (A), dimension 0); also bound: m = 3; " + SHAPES)
    with pytest.raises(ArgumentError) as err:
        k(a, np.zeros((5, 4), np.float32))
    assert str(err.value) == ("kernel double: argument 1 (B): dimension 1 is 4, but m = 3 (from "
                              "argument 0 (A), dimension 1); also bound: n = 5; " + SHAPES)


def test_one_variable_reports_its_value_alone():
    k = symbolic_kernel(SQUARE)
    with pytest.raises(ArgumentError) as err:
        k(np.zeros((5, 5), np.float32), np.zeros((7, 7), np.float32))
    assert str(err.value) == ("kernel double: argument 1 (B): dimension 0 is 7, but n = 5 (from "
                              "argument 0 (A), dimension 0); the shapes are A: float32[n, n], "
                              "B: float32[n, n]")


def test_a_value_below_the_minimum_is_refused_before_the_kernel_runs():
    k = symbolic_kernel()
    b = np.full((0, 3), 7, np.float32)
    with pytest.raises(ArgumentError) as err:
        k(np.zeros((0, 3), np.float32), b)
    assert str(err.value) == ("kernel double: argument 0 (A): dimension 0 gives n = 0, but n is "
                              "a size variable (at least 1); " + SHAPES)
    assert k.owner.calls == []
    at_least_2 = symbolic_kernel(_signature(("n",), VarSpec("n", 2)))
    with pytest.raises(ArgumentError, match=r"dimension 0 gives n = 1, but n must be at least 2"):
        at_least_2(np.zeros(1, np.float32), np.zeros(1, np.float32))


def test_rank_dtype_and_layout_errors_are_those_of_static_kernels():
    k = symbolic_kernel()
    a = np.zeros((4, 3), np.float32)
    cases = [((a, np.zeros(12, np.float32)),
              r"argument 1 \(B\): expected shape \(n, m\), got \(12,\)"),
             ((a.astype(np.float64), a.copy()), r"argument 0 \(A\): expected dtype float32, got "
                                                r"float64"),
             ((a, np.zeros((3, 4), np.float32).T), r"argument 1 \(B\): the array is not "
                                                   r"C-contiguous"),
             ((a, np.frombuffer(bytes(48), np.float32).reshape(4, 3)),
              r"argument 1 \(B\): the kernel writes this array but it is read-only"),
             ((a.tolist(), a), r"argument 0 \(A\): expected a numpy.ndarray of float32\[n, m\], "
                               r"got list")]
    for args, message in cases:
        with pytest.raises(ArgumentError, match=message):
            k(*args)
    assert k.owner.calls == []


# overlap and temporaries ---------------------------------------------------------------------
def test_overlap_is_tested_with_the_actual_byte_sizes():
    k = symbolic_kernel()
    base = np.zeros((7, 3), np.float32)
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\): the kernel writes this array "
                                            r"but it shares memory with argument 0 \(A\)"):
        k(base[:4], base[3:])                  # one row shared
    base[:3] = np.arange(9, dtype=np.float32).reshape(3, 3)
    k(base[:3], base[3:6])                     # adjacent: no byte in common
    np.testing.assert_array_equal(base[3:6], 2 * base[:3])
    k(base[4:7], base[1:4])                    # adjacent the other way round
    np.testing.assert_array_equal(base[1:4], 2 * base[4:7])


def test_temporaries_are_sized_from_the_bound_values():
    k = symbolic_kernel()
    (t,) = k._allocate_temps([5, 7])
    assert t.shape == (5, 7) and t.dtype == np.float64
    huge = symbolic_kernel(Signature((BufferSpec("A", "float32", ("n",)),
                                      BufferSpec("B", "float32", ("n",))),
                                     (BufferSpec("T", "float64", ("n", "n", "n")),), ("B",),
                                     (VarSpec("n", 1),)))
    n = 1 << 16                                  # T: 2**51 bytes, more than any address space
    with pytest.raises(KernelRuntimeError, match=r"cannot allocate its temporary buffer T "
                                                 r"\(float64\[n, n, n\] = float64\[65536, 65536, "
                                                 r"65536\], 2251799813685248 bytes\)"):
        huge(np.zeros(n, np.float32), np.zeros(n, np.float32))
    assert huge.owner.calls == []


def test_time_binds_the_variables_like_a_call():
    k = symbolic_kernel()
    a, b = np.ones((7, 3), np.float32), np.zeros((7, 3), np.float32)
    t = k.time(a, b, number=2, repeat=2, warmup=1)
    assert t.number == 2 and [c["values"] for c in k.owner.calls] == [(7, 3)] * 5
    np.testing.assert_array_equal(b, 2)
    with pytest.raises(ArgumentError, match="dimension 0 is 6, but n = 7"):
        k.time(a, np.zeros((6, 3), np.float32))


def test_a_legacy_dlpack_producer_is_read_with_its_shape():
    class Legacy:               # the legacy protocol only: NumPy imports its capsule read-only
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, stream=None):
            return self.array.__dlpack__()

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    k = symbolic_kernel()
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((2, 3), np.float32)
    found = _dlpack_pointer(k._params[1], Legacy(b))
    assert found is not None and found[0] == b.ctypes.data and found[2] == (2, 3)
    assert _dlpack_pointer(k._params[1], Legacy(np.zeros((2, 6), np.float32)[:, ::2])) is None
    assert _dlpack_pointer(k._params[1], Legacy(np.zeros(6, np.float32))) is None
    k(Legacy(a), Legacy(b))
    np.testing.assert_array_equal(b, 2 * a)
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\): dimension 0 is 3, but n = 2"):
        k(a, Legacy(np.zeros((3, 3), np.float32)))


# fast path -----------------------------------------------------------------------------------
class DLPackOnly:
    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class Sub(np.ndarray):
    pass


def _variants(shape):
    """(label, make) pairs around a fitting *shape*: make() returns fresh arguments (a, b)."""
    f32 = np.float32

    def pair(sa, sb=None, dtype=f32):
        def make():
            a = np.arange(int(np.prod(sa)), dtype=dtype).reshape(sa)
            return a, np.zeros(sa if sb is None else sb, f32)
        return make

    def change(i, fn):
        def make():
            args = list(pair(shape)())
            args[i] = fn(args[i])
            return tuple(args)
        return make

    def overlap(rows_a, rows_b):
        def make():
            base = np.arange(7 * shape[1], dtype=f32).reshape(7, shape[1])
            return base[rows_a], base[rows_b]
        return make

    bigger0, bigger1 = (shape[0] + 1, shape[1]), (shape[0], shape[1] + 1)
    return [
        ("plain", pair(shape)),
        ("ones", pair((1, 1))),
        ("n = 0", pair((0, shape[1]))),
        ("m = 0", pair((shape[0], 0))),
        ("B's dimension 0 differs", pair(shape, bigger0)),
        ("B's dimension 1 differs", pair(shape, bigger1)),
        ("both bigger", pair(bigger1)),
        ("A of rank 1", pair((shape[0],), shape)),
        ("B of rank 3", pair(shape, shape + (1,))),
        ("A of rank 0", change(0, lambda a: np.array(1, f32))),
        ("float64 input", pair(shape, dtype=np.float64)),
        ("big-endian input", change(0, lambda a: a.astype(">f4"))),
        ("Fortran output", change(1, np.asfortranarray)),
        ("strided output", change(1, lambda b: np.zeros((shape[0], 2 * shape[1]),
                                                        np.float32)[:, ::2])),
        ("read-only output", change(1, lambda b: np.frombuffer(b.tobytes(), np.float32)
                                    .reshape(b.shape))),
        ("subclass input", change(0, lambda a: a.view(Sub))),
        ("output is input", change(1, lambda b: None)),
        ("overlapping rows", overlap(slice(0, shape[0]), slice(shape[0] - 1, 2 * shape[0] - 1))),
        ("adjacent rows", overlap(slice(0, shape[0]), slice(shape[0], 2 * shape[0]))),
        ("DLPack input", change(0, DLPackOnly)),
        ("DLPack output", change(1, DLPackOnly)),
        ("list input", change(0, lambda a: a.tolist())),
        ("scalar input", change(0, lambda a: np.float32(1))),
    ]


def _outcome(k, call, args):
    if args[1] is None:
        args = (args[0], args[0])
    try:
        call(args)
    except ArgumentError as exc:
        return "error", str(exc)
    out = args[1].array if isinstance(args[1], DLPackOnly) else args[1]
    return "ran", out.copy(), k.owner.calls[-1]["values"]


@pytest.mark.parametrize("signature, shape", [(SYMBOLIC, (3, 5)), (MIXED, (3, 4)),
                                              (SQUARE, (3, 3))], ids=["n,m", "n,4", "n,n"])
def test_fast_and_general_paths_agree_on_every_variant(signature, shape):
    k = symbolic_kernel(signature)
    seen = set()
    for label, make in _variants(shape):
        fast = _outcome(k, k._fast_call, make())
        general = _outcome(k, k._call_general, make())
        assert fast[0] == general[0], label
        if fast[0] == "error":
            assert fast[1] == general[1], label
        else:
            np.testing.assert_array_equal(fast[1], general[1], err_msg=label)
            assert fast[2] == general[2], label
        seen.add(fast[0])
    assert seen == {"ran", "error"}


def test_fitting_arrays_never_reach_the_general_path():
    """The generated call runs every fitting variant itself (binding, overlap test, temps);
    here its general path only records that it was asked."""
    k, declined = symbolic_kernel(), []
    proxy = SimpleNamespace(_call_general=declined.append, out_of_memory=k.out_of_memory,
                            _take_temps=k._take_temps, _give_temps=k._give_temps,
                            _num_threads=None, name=k.name)
    call = make_fast_call(proxy, k._params, k._pairs, True, k._cfunc, False, _DATA_OFFSET,
                          k._vars)
    runs = {"plain", "ones", "m = 0", "both bigger", "adjacent rows", "subclass input",
            "DLPack input", "DLPack output"}
    for label, make in _variants((3, 5)):
        before, args = len(k.owner.calls), make()
        if args[1] is None:
            args = (args[0], args[0])
        call(args)
        assert (len(k.owner.calls) == before + 1) == (label in runs), label
        assert (len(declined) == 0) == (label in runs), label
        declined.clear()


def test_the_generated_check_binds_once_and_compares_the_rest():
    source = symbolic_kernel()._fast_call.source
    assert not any(line.lstrip().startswith(("for ", "while ")) for line in source.splitlines())
    assert "len(h0 := a0.shape) == 2 and (v0 := h0[0]) >= 1 and (v1 := h0[1]) >= 0" in source
    assert "a1.shape == (v0, v1)" in source
    assert "(p1 < p0 + v0 * v1 * 4 and p0 < p1 + v0 * v1 * 4)" in source
    assert "block, temps = kernel._take_temps((v0, v1,))" in source
    assert "*temps, v0, v1, 1)" in source
    assert "h0 == (v0, v0)" in symbolic_kernel(SQUARE)._fast_call.source
    assert "h0 == (v0, 4)" in symbolic_kernel(MIXED)._fast_call.source


# the signature, metadata and header ------------------------------------------------------------
def test_signature_normalises_and_validates_its_shapes():
    spec = BufferSpec("A", "float32", (np.int64(4), "n"))
    assert spec.shape == (4, "n") and type(spec.shape[0]) is int and spec.symbols == ("n",)
    assert spec.describe() == "A: float32[4, n]"
    assert VarSpec("n").min_value == 0 and not Signature(SIGNATURE.args).symbolic
    assert SYMBOLIC.symbolic and str(SYMBOLIC) == "A: float32[n, m], B: float32[n, m]"
    a = BufferSpec("A", "float32", ("n",))
    for make, message in [
            (lambda: BufferSpec("A", "float32", ("2n",)), r"\(an identifier\), got '2n'"),
            (lambda: VarSpec("n m"), "an identifier, got 'n m'"),
            (lambda: Signature((a,)), "dimension n is not a variable of the signature"),
            (lambda: Signature((a,), (BufferSpec("T", "float32", ("k",)),), (),
                               (VarSpec("n"),)), "dimension k is not a variable"),
            (lambda: Signature((BufferSpec("A", "float32", (3,)),),
                               (BufferSpec("T", "float32", ("n",)),), (), (VarSpec("n"),)),
             "variable n is no argument's dimension, so no call can bind it"),
            (lambda: Signature((a,), (), (), (VarSpec("n"), VarSpec("n"))), "listed twice"),
            (lambda: Signature((a,), (), (), ("n",)), "vars are VarSpecs")]:
        with pytest.raises(InternalError, match=message):
            make()


def test_metadata_round_trips_through_json():
    for sig in (SYMBOLIC, MIXED, SQUARE, SIGNATURE):
        data = json.loads(json.dumps(signature_to_json(sig)))
        assert signature_from_json(data) == sig
    data = signature_to_json(SYMBOLIC)
    assert data["vars"] == [{"name": "n", "min": 1}, {"name": "m", "min": 0}]
    assert data["args"][0]["shape"] == ["n", "m"]
    static = signature_to_json(SIGNATURE)
    assert "vars" not in static and signature_from_json(static).vars == ()


def _entry(sig, name="double"):
    return {"name": name, "symbol": f"einloop_{name}", "parallel": False,
            **signature_to_json(sig)}


def test_header_declares_the_variables_in_abi_order():
    text = kernel_declaration(_entry(SYMBOLIC))
    lines = text.splitlines()
    params = [line.split("/*")[0].strip() for line in lines[lines.index("int32_t einloop_double("
                                                                         ) + 1:]]
    assert params == ["const float *A,", "float *B,", "double *T,", "int64_t n,", "int64_t m,",
                      "int32_t nthreads);"]
    assert "/* input: float32[n, m] */" in text and "/* temporary: float64[n, m] */" in text
    assert "/* size variable: n >= 1 */" in text and "/* symbolic extent: m >= 0 */" in text
    assert "Pass the extents n, m the arrays have" in text
    assert "#define EINLOOP_DOUBLE_A_SIZE(n, m) ((int64_t)(n) * (int64_t)(m))" in text
    mixed = kernel_declaration(_entry(MIXED))
    assert "#define EINLOOP_DOUBLE_T_SIZE(n) ((int64_t)(n) * 4)" in mixed
    square = kernel_declaration(_entry(SQUARE))
    assert "#define EINLOOP_DOUBLE_B_SIZE(n) ((int64_t)(n) * (int64_t)(n))" in square
    static = kernel_declaration(_entry(SIGNATURE))
    assert "int64_t" not in static and "#define EINLOOP_DOUBLE_A_SIZE 4" in static


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_the_header_compiles_and_declares_what_a_c_caller_uses(tmp_path):
    meta = {"schema": 1, "einloop_version": "0", "target": {},
            "kernels": [_entry(SYMBOLIC), _entry(MIXED, "mixed"), _entry(SIGNATURE, "fixed")]}
    (tmp_path / "lib.h").write_text(header_text(meta, "lib.so"))
    (tmp_path / "use.c").write_text(
        '#include <stdlib.h>\n#include "lib.h"\n'
        "int use(int64_t n, int64_t m) {\n"
        "    float *a = malloc(EINLOOP_DOUBLE_A_SIZE(n, m) * sizeof(float));\n"
        "    float *b = malloc(EINLOOP_DOUBLE_B_SIZE(n, m) * sizeof(float));\n"
        "    double *t = malloc(EINLOOP_DOUBLE_T_SIZE(n, m) * sizeof(double));\n"
        "    float c[EINLOOP_FIXED_A_SIZE], d[EINLOOP_FIXED_B_SIZE];\n"
        "    double e[EINLOOP_FIXED_T_SIZE];\n"
        "    return einloop_double(a, b, t, n, m, 1) + einloop_mixed(a, b, t, n, 1)\n"
        "        + einloop_fixed(c, d, e, 1);\n}\n")
    done = subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-fsyntax-only", "use.c"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
