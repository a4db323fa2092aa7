"""External stages (``te.extern``): a C function compiled here, called inside a DAG.

The functions follow the documented convention (inputs' pointers, the output's, then every
dimension of each buffer as int64_t).  Each kernel is checked against NumPy under the default
schedule and hand schedules of the neighbours; the misuses each raise their own error.
"""
import ctypes
import shutil

import numpy as np
import pytest

import einloop
from einloop import te
from einloop.errors import BuildError, ScheduleError, TEError
from einloop.te.dag import ComputeDAG
from extern_lib import build_library


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """The test functions (:mod:`extern_lib`) as a shared library."""
    return build_library(tmp_path_factory.mktemp("extern"))


def _rand(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def _gemm_relu(lib, m=37, k=19, n=23):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    Y = te.extern((m, n), [A, B], "ext_gemm", library=lib, name="Y")
    Z = te.compute((m, n), lambda i, j: te.maximum(Y[i, j], 0.0) + 1.0, name="Z")
    return A, B, Y, Z


def _run_gemm_relu(s, A, B, Z, m=37, k=19, n=23):
    a, b = _rand((m, k), 1), _rand((k, n), 2)
    z = np.full((m, n), np.nan, "float32")
    einloop.build(s, [A, B, Z])(a, b, z)
    np.testing.assert_allclose(z, np.maximum(a @ b, 0) + 1, rtol=2e-5, atol=2e-5)


def test_gemm_then_elementwise_default_schedule(lib):
    A, B, Y, Z = _gemm_relu(lib)
    s = einloop.create_schedule(Z)
    assert "extern ext_gemm(A, B, Y, 37, 19, 19, 23, 37, 23)" in str(einloop.lower(s, [A, B, Z]))
    _run_gemm_relu(s, A, B, Z)


def test_consumer_split_vectorized_and_parallel(lib):
    A, B, Y, Z = _gemm_relu(lib)
    s = einloop.create_schedule(Z)
    i, j = s[Z].op.axis
    jo, ji = s[Z].split(j, factor=8)
    s[Z].vectorize(ji)
    s[Z].parallel(i)
    s[Y].compute_root()                  # where an external stage is anyway: accepted
    _run_gemm_relu(s, A, B, Z)


def test_producer_and_consumer_chains_scheduled_around_it(lib):
    """A producer of the call (scaled input, split and parallel), an elementwise stage after it
    inlined into the output, the output tiled and vectorized."""
    m, k, n = 37, 19, 23
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    A2 = te.compute((m, k), lambda i, p: A[i, p] * 0.5, name="A2")
    Y = te.extern((m, n), [A2, B], "ext_gemm", library=lib, name="Y")
    R = te.compute((m, n), lambda i, j: te.maximum(Y[i, j], 0.0), name="R")
    Z = te.compute((m, n), lambda i, j: R[i, j] * 3.0 - 1.0, name="Z")
    s = einloop.create_schedule(Z)
    io, ii = s[A2].split(s[A2].op.axis[0], factor=5)
    s[A2].parallel(io)
    s[R].compute_inline()
    zi, zj = s[Z].op.axis
    xo, yo, xi, yi = s[Z].tile(zi, zj, 8, 8)
    s[Z].vectorize(yi)
    a, b = _rand((m, k), 3), _rand((k, n), 4)
    z = np.full((m, n), np.nan, "float32")
    einloop.build(s, [A, B, Z])(a, b, z)
    np.testing.assert_allclose(z, np.maximum((a * 0.5) @ b, 0) * 3 - 1, rtol=2e-5, atol=2e-5)


def test_tiled_reduction_feeding_the_call(lib):
    """A te GEMM before the call, tiled with an accumulator computed at its tile loop,
    vectorized and parallel: its buffer is whole when the call reads it."""
    m, k, n = 37, 19, 23
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    Y = te.extern((m, n), [C], "ext_affine", library=lib, name="Y")
    Z = te.compute((m, n), lambda i, j: Y[i, j] * 0.5, name="Z")
    s = einloop.create_schedule(Z)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 8)
    s[C].parallel(io)
    s[CL].compute_at(s[C], jo)
    ci, cj = s[CL].op.axis
    s[CL].reorder(s[CL].op.reduce_axis[0], ci, cj)
    s[CL].vectorize(cj)
    a, b = _rand((m, k), 5), _rand((k, n), 6)
    z = np.full((m, n), np.nan, "float32")
    einloop.build(s, [A, B, Z])(a, b, z)
    np.testing.assert_allclose(z, (2 * (a @ b) + 1) * 0.5, rtol=2e-5, atol=2e-5)


def test_extern_as_the_output_and_chained(lib):
    """Two calls in a row (the second reads the first's buffer), the last one the output."""
    A = te.placeholder((7, 11), name="A")
    Y1 = te.extern((7, 11), [A], "ext_affine", library=lib, name="Y1")
    Y2 = te.extern((7, 11), [Y1], "ext_affine", library=lib, name="Y2")
    s = einloop.create_schedule(Y2)
    a, y = _rand((7, 11)), np.zeros((7, 11), "float32")
    einloop.build(s, [A, Y2])(a, y)
    np.testing.assert_allclose(y, 2 * (2 * a + 1) + 1, rtol=1e-6)


def test_other_output_dtype(lib):
    A = te.placeholder((5, 101), name="A")
    S = te.extern((5,), [A], "ext_rowsum", library=lib, dtype="float64", name="S")
    Z = te.compute((5,), lambda i: S[i] * 2.0, name="Z")
    assert Z.dtype == "float64"
    a, z = _rand((5, 101)), np.zeros(5, "float64")
    einloop.build(einloop.create_schedule(Z), [A, Z])(a, z)
    np.testing.assert_allclose(z, 2 * a.astype("float64").sum(axis=1), rtol=1e-12)


def test_no_inputs_and_an_integer_output(lib):
    Y = te.extern((17,), [], "ext_iota", library=lib, dtype="int32", name="Y")
    Z = te.compute((17,), lambda i: Y[i] * 3 + 1, name="Z")
    z = np.zeros(17, "int32")
    einloop.build(einloop.create_schedule(Z), [Z])(z)
    np.testing.assert_array_equal(z, np.arange(17) * 3 + 1)


def test_symbolic_extents_are_passed_as_their_values(lib):
    m, n = te.size_var("m"), te.size_var("n")
    A = te.placeholder((m, n), name="A")
    Y = te.extern((m, n), [A], "ext_affine", library=lib, name="Y")
    Z = te.compute((m, n), lambda i, j: Y[i, j] - 1.0, name="Z")
    s = einloop.create_schedule(Z)
    jo, ji = s[Z].split(s[Z].op.axis[1], factor=8)
    s[Z].vectorize(ji)
    f = einloop.build(s, [A, Z])
    for rows, cols in ((3, 5), (37, 101)):
        a, z = _rand((rows, cols), rows), np.full((rows, cols), np.nan, "float32")
        f(a, z)
        np.testing.assert_allclose(z, 2 * a, rtol=1e-6, atol=1e-6)


def test_symbol_already_in_the_process(lib):
    """Without library=, the symbol is looked up among those the process has loaded."""
    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    A = te.placeholder((4, 9), name="A")
    Y = te.extern((4, 9), [A], "ext_affine", name="Y")
    a, y = _rand((4, 9)), np.zeros((4, 9), "float32")
    einloop.build(einloop.create_schedule(Y), [A, Y])(a, y)
    np.testing.assert_allclose(y, 2 * a + 1, rtol=1e-6)


def test_dag_knows_external_stages(lib):
    A = te.placeholder((8, 8), name="A")
    P = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="P")
    Y = te.extern((8, 8), [P], "ext_affine", library=lib, name="Y")
    Z = te.compute((8, 8), lambda i, j: Y[i, j] * 2.0, name="Z")
    dag = ComputeDAG(Z)
    assert dag.is_extern(Y) and not dag.is_extern(P)
    assert dag.feeds_extern(P) and not dag.is_inlinable(P)   # materialized for the call
    assert dag.elementwise_consumer(P) is None
    assert dag.producers(Y) == (P.op,) and dag.consumers(Y) == (Z.op,)
    assert "Y = extern ext_affine(P)" in str(dag)
    other = te.extern((8, 8), [P], "ext_gemm", library=lib, name="Y")
    assert dag.structural_hash() != ComputeDAG(
        te.compute((8, 8), lambda i, j: other[i, j] * 2.0, name="Z")).structural_hash()


# missing pieces -------------------------------------------------------------------------------

def _affine_kernel(symbol, library):
    A = te.placeholder((4, 4), name="A")
    Y = te.extern((4, 4), [A], symbol, library=library, name="Y")
    return einloop.create_schedule(Y), [A, Y]


def test_missing_library(tmp_path):
    s, args = _affine_kernel("ext_affine", str(tmp_path / "nowhere" / "libnone.so"))
    with pytest.raises(BuildError, match=r"libnone\.so does not exist"):
        einloop.build(s, args)


def test_library_that_cannot_be_loaded(tmp_path):
    bad = tmp_path / "libbad.so"
    bad.write_text("not a shared object")
    s, args = _affine_kernel("ext_affine", str(bad))
    with pytest.raises(BuildError, match=r"libbad\.so cannot be loaded"):
        einloop.build(s, args)


def test_missing_symbol(lib):
    s, args = _affine_kernel("ext_no_such_function", lib)
    with pytest.raises(BuildError, match=r"does not define the external function "
                                         r"ext_no_such_function"):
        einloop.build(s, args)


def test_missing_symbol_in_the_process():
    s, args = _affine_kernel("ext_nowhere_at_all", None)
    with pytest.raises(BuildError, match=r"no library loaded in this process defines the "
                                         r"external function ext_nowhere_at_all; pass library="):
        einloop.build(s, args)


def test_one_symbol_of_two_libraries_in_one_kernel(lib, tmp_path):
    shutil.copy(lib, tmp_path / "libtwin.so")
    A = te.placeholder((4, 4), name="A")
    Y1 = te.extern((4, 4), [A], "ext_affine", library=lib, name="Y1")
    Y2 = te.extern((4, 4), [Y1], "ext_affine", library=str(tmp_path / "libtwin.so"), name="Y2")
    with pytest.raises(BuildError, match=r"calls the external function ext_affine of two "
                                         r"libraries"):
        einloop.build(einloop.create_schedule(Y2), [A, Y2])


def test_one_symbol_with_two_signatures_in_one_kernel(lib):
    """The same C function called on a 2-d and a 1-d tensor would need two prototypes."""
    A = te.placeholder((4, 4), name="A")
    Y = te.extern((4, 4), [A], "ext_affine", library=lib, name="Y")
    V = te.compute((16,), lambda i: Y[i // 4, i % 4], name="V")
    W = te.extern((16,), [V], "ext_affine", library=lib, name="W")
    with pytest.raises(BuildError, match=r"the external function ext_affine clashes with another "
                                         r"function of that name"):
        einloop.build(einloop.create_schedule(W), [A, W])


def test_input_read_only_by_the_call_must_be_an_argument(lib):
    A = te.placeholder((4, 4), name="A")
    Y = te.extern((4, 4), [A], "ext_affine", library=lib, name="Y")
    with pytest.raises(BuildError, match=r"the input A is read by the external stage Y .* not "
                                         r"in args"):
        einloop.build(einloop.create_schedule(Y), [Y])


# declaration errors ---------------------------------------------------------------------------

def test_several_outputs_are_refused():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(TEError, match=r"2 output shapes given; an external stage has one output"):
        te.extern([(4, 4), (4,)], [A], "f")


def test_symbol_must_be_a_c_name():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(TEError, match=r"the symbol must be the C name of a function"):
        te.extern((4, 4), [A], "my-func")


def test_symbol_must_not_be_an_einloop_kernel():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(TEError, match=r"prefix of einloop's own kernels"):
        te.extern((4, 4), [A], "einloop_gemm")


def test_inputs_must_be_tensors():
    with pytest.raises(TEError, match=r"input 0 is 3, not a tensor"):
        te.extern((4, 4), [3], "f")


def test_library_must_be_a_path():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(TEError, match=r"library must be the path of a shared library"):
        te.extern((4, 4), [A], "f", library=42)


# schedule errors ------------------------------------------------------------------------------

def _chain(lib):
    A = te.placeholder((8, 8), name="A")
    P = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="P")
    Y = te.extern((8, 8), [P], "ext_affine", library=lib, name="Y")
    Z = te.compute((8, 8), lambda i, j: Y[i, j] + P[i, j], name="Z")
    return A, P, Y, Z, einloop.create_schedule(Z)


@pytest.mark.parametrize("primitive", ["split", "vectorize", "parallel", "compute_inline",
                                       "reorder", "fuse", "nontemporal"])
def test_loop_primitives_on_the_external_stage(lib, primitive):
    A, P, Y, Z, s = _chain(lib)
    call = {"split": lambda st: st.split(None, factor=2),
            "vectorize": lambda st: st.vectorize(None), "parallel": lambda st: st.parallel(None),
            "compute_inline": lambda st: st.compute_inline(),
            "reorder": lambda st: st.reorder(), "fuse": lambda st: st.fuse(),
            "nontemporal": lambda st: st.nontemporal()}[primitive]
    with pytest.raises(ScheduleError, match=rf"{primitive}: stage Y is an external stage \(the "
                                            r"C function ext_affine\), which has no loops"):
        call(s[Y])


@pytest.mark.parametrize("primitive", ["cache_write", "rfactor", "split_residues"])
def test_stage_graph_primitives_on_the_external_stage(lib, primitive):
    A, P, Y, Z, s = _chain(lib)
    call = {"cache_write": lambda: s.cache_write(Y, "local"),
            "rfactor": lambda: s.rfactor(Y, None),
            "split_residues": lambda: s.split_residues(Y, [], [])}[primitive]
    with pytest.raises(ScheduleError, match=rf"{primitive}: stage Y is an external stage"):
        call()


@pytest.mark.parametrize("primitive", ["cache_read", "pack", "deinterleave"])
def test_external_stage_does_not_read_a_copy(lib, primitive):
    A, P, Y, Z, s = _chain(lib)
    call = {"cache_read": lambda: s.cache_read(P, "local", [Y]),
            "pack": lambda: s.pack(P, 0, 2, readers=[Y]),
            "deinterleave": lambda: s.deinterleave(P, 2, [Y])}[primitive]
    with pytest.raises(ScheduleError, match=rf"{primitive} of P: stage Y is an external stage "
                                            r".* reads the whole buffer of P itself"):
        call()


def test_its_output_can_be_copied_packed_and_prefetched(lib):
    """What reads the call's buffer is scheduled as with any buffer; a pack of its input for
    the other readers leaves the call reading the original."""
    for schedule in ("copy", "pack and prefetch"):
        A, P, Y, Z, s = _chain(lib)
        if schedule == "copy":
            s.cache_read(Y, "local", [Z])
        else:
            s.pack(P, 1, 4)
            s[Z].prefetch(Y, s[Z].op.axis[0])
        a, z = _rand((8, 8)), np.zeros((8, 8), "float32")
        einloop.build(s, [A, Z])(a, z)
        np.testing.assert_allclose(z, (2 * (a + 1) + 1) + (a + 1), rtol=1e-6, err_msg=schedule)


def test_compute_at_the_external_stage(lib):
    A, P, Y, Z, s = _chain(lib)
    with pytest.raises(ScheduleError, match=r"compute_at: stage P is read by the external stage "
                                            r"Y .* cannot be computed at a loop"):
        s[P].compute_at(s[Z], s[Z].op.axis[0])


def test_producer_of_the_call_is_not_inlined(lib):
    A, P, Y, Z, s = _chain(lib)
    with pytest.raises(ScheduleError, match=r"compute_inline: stage P is read by the external "
                                            r"stage Y .* cannot be inlined"):
        s[P].compute_inline()


def test_producer_of_the_call_keeps_its_layout(lib):
    A, P, Y, Z, s = _chain(lib)
    i, j = s[P].op.axis
    s[P].storage_order(j, i)
    with pytest.raises(ScheduleError, match=r"storage_order reorders its layout"):
        einloop.lower(s, [A, Z])


def test_neighbours_of_a_shared_producer_still_work(lib):
    """P feeds both the call and Z: it stays at the root and Z is scheduled freely."""
    A, P, Y, Z, s = _chain(lib)
    zo, zi = s[Z].split(s[Z].op.axis[1], factor=4)
    s[Z].vectorize(zi)
    a, z = _rand((8, 8)), np.zeros((8, 8), "float32")
    einloop.build(s, [A, Z])(a, z)
    np.testing.assert_allclose(z, (2 * (a + 1) + 1) + (a + 1), rtol=1e-6)


# export ---------------------------------------------------------------------------------------

def _exported(lib, folder):
    """A library exported from Z = ext_affine(A) - 1, built against a copy of *lib* in *folder*
    (so that a test can take the copy away)."""
    copy = folder / "libextcopy.so"
    shutil.copy(lib, copy)
    A = te.placeholder((6, 5), name="A")
    Y = te.extern((6, 5), [A], "ext_affine", library=str(copy), name="Y")
    Z = te.compute((6, 5), lambda i, j: Y[i, j] - 1.0, name="Z")
    f = einloop.build(einloop.create_schedule(Z), [A, Z], name="shifted")
    return copy, f.export_library(str(folder / "kernels.so"), header=True)


def test_export_records_and_loads_the_dependency(lib, tmp_path):
    from einloop.runtime.library import read_metadata
    from isolated import run_isolated
    copy, path = _exported(lib, tmp_path)
    (entry,) = read_metadata(path)["kernels"]
    assert entry["externs"] == [{"symbol": "ext_affine", "library": str(copy)}]
    assert "Calls the external function ext_affine of " in (tmp_path / "kernels.h").read_text()
    out = run_isolated(f"""
        import sys
        import numpy as np
        from einloop import runtime
        m = runtime.load_module({path!r})
        a = np.arange(30, dtype="float32").reshape(6, 5)
        z = np.zeros((6, 5), "float32")
        m["shifted"](a, z)
        assert "llvmlite" not in sys.modules
        print(float(np.abs(z - 2 * a).max()))
        """)
    assert float(out.strip()) == 0.0


def test_exported_library_whose_dependency_is_gone(lib, tmp_path):
    from isolated import run_python
    copy, path = _exported(lib, tmp_path)
    copy.unlink()
    out = run_python(f"""
        from einloop import runtime
        from einloop.errors import LibraryError
        try:
            runtime.load_module({path!r})
        except LibraryError as exc:
            print("LibraryError:", exc)
        """)
    assert "LibraryError:" in out.stdout, out.stderr
    assert "kernel 'shifted' calls ext_affine" in out.stdout
    assert "libextcopy.so does not exist" in out.stdout
    assert "also looked for libextcopy.so beside" in out.stdout


def test_shipped_kernel_binds_its_functions_in_another_process(lib, tmp_path):
    """The tuner builds in one process and times in another: the shipped object code names its
    external functions, which the loading process binds before linking it."""
    import pickle
    from einloop.codegen.shipped import ship
    from isolated import run_isolated
    A = te.placeholder((3, 4), name="A")
    Y = te.extern((3, 4), [A], "ext_affine", library=lib, name="Y")
    sk = ship(einloop.lower(einloop.create_schedule(Y), [A, Y]))
    assert sk.externs == (("ext_affine", lib),)
    (tmp_path / "sk.pickle").write_bytes(pickle.dumps(sk))
    out = run_isolated(f"""
        import pickle
        import numpy as np
        from einloop.codegen.shipped import load
        with open({str(tmp_path / "sk.pickle")!r}, "rb") as f:
            k = load(pickle.load(f))
        a = np.ones((3, 4), "float32")
        y = np.zeros((3, 4), "float32")
        k(a, y)
        print(y.sum())
        """)
    assert float(out.strip()) == 36.0


# operator rewrites ----------------------------------------------------------------------------

def test_bound_sizes_keep_the_call(lib):
    """Tuning a symbolic operator declares it again at a size hint: the call comes along."""
    from einloop.te.bind import bind_sizes, shape_vars_of
    m = te.size_var("m")
    A = te.placeholder((m, 6), name="A")
    Y = te.extern((m, 6), [A], "ext_affine", library=lib, name="Y")
    Z = te.compute((m, 6), lambda i, j: Y[i, j] * 0.5, name="Z")
    assert [v.name for v in shape_vars_of([A, Z])] == ["m"]
    A5, Z5 = bind_sizes([A, Z], {"m": 5})
    Y5 = Z5.op.input_tensors[0]
    assert isinstance(Y5.op, te.ExternOp) and Y5.shape == (5, 6) and Y5.op.inputs == (A5,)
    a, z = _rand((5, 6)), np.zeros((5, 6), "float32")
    einloop.build(einloop.create_schedule(Z5), [A5, Z5])(a, z)
    np.testing.assert_allclose(z, a + 0.5, rtol=1e-6)


def test_gradient_through_the_call_is_refused(lib):
    A = te.placeholder((4, 4), name="A")
    Y = te.extern((4, 4), [A], "ext_affine", library=lib, name="Y")
    Z = te.compute((4, 4), lambda i, j: Y[i, j] * Y[i, j], name="Z")
    with pytest.raises(TEError, match=r"the gradient flows through Y, an external stage"):
        te.gradient(Z, [A])
    (dy,) = te.gradient(Z, [Y])                      # after the call: as usual
    a, y, g = _rand((4, 4)), np.zeros((4, 4), "float32"), np.zeros((4, 4), "float32")
    einloop.build(einloop.create_schedule(dy), [A, Y, dy])(a, y, g)
    np.testing.assert_allclose(g, 2 * (2 * a + 1), rtol=1e-6)


def test_widening_an_operator_with_a_call_is_refused(lib):
    from einloop.te.promote import promote_floats
    A = te.placeholder((4, 4), name="A")
    Y = te.extern((4, 4), [A], "ext_affine", library=lib, name="Y")
    with pytest.raises(TEError, match=r"Y is an external stage .* cannot be widened"):
        promote_floats([A, Y])


def test_library_names(lib, tmp_path, monkeypatch):
    """A file of the working directory is made absolute (the kernel finds it from anywhere);
    another bare name is the dynamic loader's to search."""
    shutil.copy(lib, tmp_path / "libhere.so")
    monkeypatch.chdir(tmp_path)
    A = te.placeholder((2, 3), name="A")
    assert te.extern((2, 3), [A], "f", library="libhere.so").op.library == \
        str(tmp_path / "libhere.so")
    Y = te.extern((2, 3), [A], "ext_affine", library="libm.so.6", name="Y")
    assert Y.op.library == "libm.so.6"
    with pytest.raises(BuildError, match=r"the library libm\.so\.6 does not define the external "
                                         r"function ext_affine"):
        einloop.build(einloop.create_schedule(Y), [A, Y])


def test_exported_library_whose_function_another_library_shadows(lib, tmp_path):
    """A library with the same symbol, loaded globally before, would take the calls."""
    from isolated import run_python
    copy, path = _exported(lib, tmp_path)
    out = run_python(f"""
        import ctypes
        from einloop import runtime
        from einloop.errors import LibraryError
        ctypes.CDLL({lib!r}, mode=ctypes.RTLD_GLOBAL)     # another file defining ext_affine
        try:
            runtime.load_module({path!r})
        except LibraryError as exc:
            print("LibraryError:", exc)
        """)
    assert "LibraryError:" in out.stdout, out.stderr
    assert "another library loaded in this process already defines ext_affine" in out.stdout


def test_export_of_one_symbol_from_two_libraries(lib, tmp_path):
    kernels = []
    for n, name in enumerate(("libone.so", "libtwo.so")):
        shutil.copy(lib, tmp_path / name)
        A = te.placeholder((3, 3), name="A")
        Y = te.extern((3, 3), [A], "ext_affine", library=str(tmp_path / name), name="Y")
        kernels.append(einloop.build(einloop.create_schedule(Y), [A, Y], name=f"k{n}"))
    with pytest.raises(BuildError, match=r"the kernels exported together call the external "
                                         r"function ext_affine of two libraries"):
        einloop.codegen.export.export_library(kernels, str(tmp_path / "both.so"))


def test_deployed_beside_the_kernels(lib, tmp_path):
    """Shipped to another folder together, the kernels find the function's library beside
    them when the build machine's path is gone."""
    from isolated import run_isolated
    built = tmp_path / "built"
    built.mkdir()
    copy, path = _exported(lib, built)
    deployed = tmp_path / "deployed"
    deployed.mkdir()
    shutil.move(path, deployed / "kernels.so")
    shutil.move(copy, deployed / copy.name)
    out = run_isolated(f"""
        import numpy as np
        from einloop import runtime
        m = runtime.load_module({str(deployed / "kernels.so")!r})
        a = np.ones((6, 5), "float32")
        z = np.zeros((6, 5), "float32")
        m["shifted"](a, z)
        print(z.sum())
        """)
    assert float(out.strip()) == 60.0
