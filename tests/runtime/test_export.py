"""Exported libraries (issue 9): built kernels written as shared libraries with their metadata,
loaded in a fresh interpreter by ``einloop.runtime`` alone, compared with NumPy; every way a
library can be unloadable gives its own LibraryError; a C program runs a kernel via its header."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from einloop import (ArgumentError, BuildError, LibraryError, ToolchainError, build,
                     create_schedule, runtime, te)
from einloop.codegen.export import export_library, export_object
from einloop.runtime import cpu
from isolated import run_isolated

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import conv2d  # noqa: E402
import gemm  # noqa: E402
import softmax  # noqa: E402

GEMM = (64, 48, 40)
CONV = (1, 8, 12, 12, 16, 3, 3)
SOFTMAX = (33, 70)
HAVE_CC = any(shutil.which(c) for c in ("cc", "gcc", "clang"))
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler (cc, gcc, clang) on PATH")


@pytest.fixture(scope="module")
def kernels():
    """The three kernels of the proof: tiled GEMM, parallel conv2d, parallel softmax."""
    return {"gemm": build(*gemm.schedule(*GEMM), name="gemm"),
            "conv2d": build(*conv2d.schedule(*CONV), name="conv2d"),
            "softmax": build(*softmax.schedule(*SOFTMAX), name="softmax")}


def _inputs(name, rng):
    if name == "gemm":
        M, N, K = GEMM
        return [rng.random((M, K), np.float32), rng.random((K, N), np.float32)]
    if name == "conv2d":
        n, c, h, w, k, r, s = CONV
        return [rng.random((n, c, h, w), np.float32), rng.random((k, c, r, s), np.float32)]
    return [rng.standard_normal(SOFTMAX).astype(np.float32)]


def _reference(name, arrays):
    if name == "gemm":
        return gemm.reference(*arrays)
    if name == "conv2d":
        return conv2d.reference(*arrays)
    return softmax.reference(*arrays)


# the deploy process: einloop.runtime only; runs each kernel on saved inputs, saves the output
RUN_LOADED = """
import os, sys, numpy as np
import einloop.runtime as rt
from einloop.runtime import gomp
folder, lib, names = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
m = rt.load_module(lib)
assert sorted(m.names) == sorted(names), m.names
for name in names:
    k = m[name]
    assert k is getattr(m, name)
    ins = [np.load(f"{folder}/{name}_in{i}.npy") for i in range(len(k.signature.args) - 1)]
    out = np.zeros(k.signature.args[-1].shape, k.signature.args[-1].dtype)
    threads_before = len(os.listdir("/proc/self/task"))
    (m if len(names) == 1 else k)(*ins, out)
    np.save(f"{folder}/{name}_out.npy", out)
    if k.parallel:
        assert gomp.gomp_runtime() is not None and k.num_threads == rt.default_num_threads()
        if k.num_threads > 1 and name == names[0]:    # libgomp started its thread team
            assert len(os.listdir("/proc/self/task")) > threads_before
    print(name, "parallel" if k.parallel else "serial")
bad = sorted(x for x in sys.modules if x.split(".")[0] == "llvmlite"
             or x.startswith(("einloop.codegen", "einloop.schedule", "einloop.te")))
assert not bad, bad
print("ok")
"""


def _run_in_fresh_process(folder, lib, names):
    out = subprocess.run([sys.executable, "-c", RUN_LOADED, str(folder), str(lib), ",".join(names)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _check_outputs(folder, names):
    for name in names:
        ins = [np.load(folder / f"{name}_in{i}.npy") for i in range(2 if name != "softmax" else 1)]
        got = np.load(folder / f"{name}_out.npy")
        np.testing.assert_allclose(got, _reference(name, ins), rtol=1e-4, atol=1e-5)


def _save_inputs(folder, names):
    rng = np.random.default_rng(7)
    for name in names:
        for i, a in enumerate(_inputs(name, rng)):
            np.save(folder / f"{name}_in{i}.npy", a)


@needs_cc
@pytest.mark.parametrize("name", ["gemm", "conv2d", "softmax"])
def test_export_then_load_in_a_fresh_process_equals_numpy(kernels, tmp_path, name):
    lib = kernels[name].export_library(tmp_path / f"{name}.so")
    _save_inputs(tmp_path, [name])
    out = _run_in_fresh_process(tmp_path, lib, [name])
    assert out.strip().endswith("ok")
    assert ("parallel" in out) == kernels[name].parallel
    if name == "conv2d":
        assert kernels[name].parallel
    _check_outputs(tmp_path, [name])


@needs_cc
def test_two_kernel_library_finds_each_by_name(kernels, tmp_path):
    lib = runtime.export_library([kernels["gemm"], kernels["softmax"]], tmp_path / "two.so")
    _save_inputs(tmp_path, ["gemm", "softmax"])
    assert _run_in_fresh_process(tmp_path, lib, ["gemm", "softmax"]).strip().endswith("ok")
    _check_outputs(tmp_path, ["gemm", "softmax"])
    m = runtime.load_module(lib)
    with pytest.raises(LibraryError, match="holds 2 kernels"):
        m(np.zeros(1))
    with pytest.raises(LibraryError, match="has no kernel 'conv'"):
        m["conv"]
    assert [k["symbol"] for k in m.metadata["kernels"]] == ["einloop_gemm", "einloop_softmax"]


@needs_cc
def test_loaded_kernel_checks_arguments_like_a_built_one(kernels, tmp_path):
    m = runtime.load_module(kernels["gemm"].export_library(tmp_path / "g.so"))
    k = m.gemm
    assert k.signature == kernels["gemm"].signature and k.parallel == kernels["gemm"].parallel
    M, N, K = GEMM
    a, b = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    with pytest.raises(ArgumentError, match="expected dtype float32") as built:
        kernels["gemm"](a, b, np.zeros((M, N), np.float64))
    with pytest.raises(ArgumentError, match="expected dtype float32") as loaded:
        k(a, b, np.zeros((M, N), np.float64))
    assert str(loaded.value) == str(built.value)
    with pytest.raises(ArgumentError, match="takes 3 arrays"):
        k(a, b)
    with pytest.raises(BuildError, match="kernels built in this process"):
        runtime.export_library([k], tmp_path / "again.so")


@needs_cc
def test_export_creates_the_folders_it_writes_into(kernels, tmp_path):
    lib = kernels["softmax"].export_library(tmp_path / "kernels" / "v1" / "s.so", header=True)
    assert (tmp_path / "kernels" / "v1" / "s.h").is_file()
    obj = export_object([kernels["softmax"]], tmp_path / "objects" / "s.o")
    assert open(obj, "rb").read(4) == b"\x7fELF"
    x = np.random.default_rng(5).standard_normal(SOFTMAX).astype(np.float32)
    out = np.zeros_like(x)
    runtime.load_module(lib)(x, out)
    np.testing.assert_allclose(out, softmax.reference(x), rtol=1e-4, atol=1e-6)


def _scaled_exp(out_name):
    A = te.placeholder((8, 16), "float64", name="A")
    E = te.compute((8, 16), lambda i, j: te.exp(A[i, j]), name="E")
    O = te.compute((8, 16), lambda i, j: E[i, j] * 2.0, name=out_name)
    return create_schedule(O), [A, O]


@needs_cc
def test_kernels_are_named_after_their_output_unless_named(tmp_path):
    exp = build(*_scaled_exp("exp"))       # a C library function's name: libm's exp is called
    dotted = build(*_scaled_exp("out.1"))
    named = build(*_scaled_exp("out.1"), name="mine")
    assert (exp.name, dotted.name, named.name) == ("exp", "out_1", "mine")
    lib = runtime.export_library([exp, dotted, named], tmp_path / "named.so", header=True)
    header = (tmp_path / "named.h").read_text()
    for symbol in ("einloop_exp(", "einloop_out_1(", "einloop_mine("):
        assert "int32_t " + symbol in header
    m = runtime.load_module(lib)
    a = np.random.default_rng(2).standard_normal((8, 16))
    for kernel in (exp, m["exp"], m.out_1, m.mine):
        out = np.zeros_like(a)
        kernel(a, out)
        np.testing.assert_allclose(out, 2 * np.exp(a), rtol=1e-12)


def test_duplicate_kernel_names_are_refused(kernels, tmp_path):
    twin = build(*gemm.schedule(*GEMM), name="softmax")
    with pytest.raises(BuildError, match="both named 'softmax'.*name="):
        export_object([kernels["softmax"], twin], tmp_path / "twins.o")


def test_without_a_compiler_export_library_names_what_to_install_and_objects_still_work(
        kernels, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(ToolchainError, match="install one .*gcc.*export_object"):
        kernels["gemm"].export_library(tmp_path / "g.so")
    obj = kernels["gemm"].export_object(tmp_path / "g.o")
    data = open(obj, "rb").read()
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[16:18], "little") == 1   # ET_REL
    assert b"einloop_gemm" in data and b'"einloop_version"' in data


# metadata checks ---------------------------------------------------------------------------------

def _edited(kernels, tmp_path, edit):
    return export_library([kernels["softmax"]], tmp_path / "edited.so", edit_metadata=edit)


@needs_cc
def test_a_cpu_feature_the_host_lacks_is_refused_before_any_code_runs(kernels, tmp_path):
    flags = cpu.host_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo flags on this system: features cannot be checked")
    lacking = [f for f, flag in cpu.LLVM_TO_CPUINFO.items() if flag not in flags]
    if not lacking:
        pytest.skip("this CPU has every feature einloop knows how to check")

    def edit(meta):
        meta["target"]["features"] += f",+{lacking[0]}"
        return meta
    lib = _edited(kernels, tmp_path, edit)
    with pytest.raises(LibraryError, match=f"features this CPU lacks: {lacking[0]}"):
        runtime.load_module(lib)


@needs_cc
@pytest.mark.parametrize("target, needs", [("llvm -mcpu=skylake-avx512", "avx512f"),
                                           ("llvm -mcpu=x86-64 -mattr=+avx512f", "avx512f"),
                                           ("llvm -mcpu=haswell", "avx2")])
def test_a_library_for_a_named_cpu_records_its_features_and_refuses_a_cpu_without_them(
        tmp_path, monkeypatch, target, needs):
    """However the target is spelled (a CPU name, or -mattr on a baseline CPU), the library
    records the features its code may use; on a CPU without them (the host's flags replaced by
    an SSE4-only CPU's, whatever this host has) loading raises a LibraryError naming them, not
    SIGILL.  Built, never run: no host needs the target's features."""
    kernel = build(*softmax.schedule(*SOFTMAX), name="softmax", target=target)
    lib = kernel.export_library(tmp_path / "named.so")
    meta = runtime.library.read_metadata(lib)
    recorded = set(cpu.required_features(meta["target"]["features"]))
    assert needs in recorded and "fma" in recorded
    old = frozenset({"fpu", "sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt"})
    monkeypatch.setattr(cpu, "host_flags", lambda path="/proc/cpuinfo": old)
    with pytest.raises(LibraryError, match=f"features this CPU lacks: .*{needs}"):
        runtime.load_module(lib)


@needs_cc
@pytest.mark.parametrize("field, value, match", [
    ("einloop_version", "99.0.0", r"exported by einloop 99\.0\.0.*major versions differ"),
    ("schema", 999, r"schema 999, but this runtime reads schemas 1, 2, 3"),
])
def test_an_unknown_version_or_schema_is_refused(kernels, tmp_path, field, value, match):
    lib = _edited(kernels, tmp_path, lambda meta: {**meta, field: value})
    with pytest.raises(LibraryError, match=match):
        runtime.load_module(lib)


@needs_cc
def test_damaged_missing_and_foreign_files_are_refused(kernels, tmp_path):
    lib = kernels["softmax"].export_library(tmp_path / "s.so")
    data = open(lib, "rb").read()
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(LibraryError, match="damaged ELF file.*truncated"):
        runtime.load_module(cut)
    with pytest.raises(LibraryError, match="does not exist"):
        runtime.load_module(tmp_path / "nothing.so")
    text = tmp_path / "text.so"
    text.write_text("not a library")
    with pytest.raises(LibraryError, match="not a shared library einloop can open"):
        runtime.load_module(text)
    src = tmp_path / "plain.c"
    src.write_text("int plain(void) { return 1; }\n")
    plain = tmp_path / "plain.so"
    subprocess.run([shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"),
                    "-shared", "-fPIC", "-o", str(plain), str(src)], check=True)
    with pytest.raises(LibraryError, match="without einloop metadata"):
        runtime.load_module(plain)


# the C program -----------------------------------------------------------------------------------

C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "gemm.h"

int main(void) {
    float *a = malloc(sizeof(float) * EINLOOP_GEMM_A_SIZE);
    float *b = malloc(sizeof(float) * EINLOOP_GEMM_B_SIZE);
    float *c = malloc(sizeof(float) * EINLOOP_GEMM_C_SIZE);
    float *pb = malloc(sizeof(float) * EINLOOP_GEMM_PB_SIZE);
    for (int i = 0; i < EINLOOP_GEMM_A_SIZE; i++) a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < EINLOOP_GEMM_B_SIZE; i++) b[i] = (float)(i % 5) * 0.5f;
    if (einloop_gemm(a, b, c, pb, 2) != 0) return 1;
    for (int i = 0; i < EINLOOP_GEMM_C_SIZE; i++) printf("%.6g\n", c[i]);
    return 0;
}
"""


@needs_cc
def test_a_c_program_calls_the_kernel_through_its_header(kernels, tmp_path):
    k = kernels["gemm"]
    assert [t.name for t in k.signature.temps] == ["PB"], "C_MAIN allocates the temp PB"
    lib = k.export_library(tmp_path / "gemm.so", header=True)
    header = (tmp_path / "gemm.h").read_text()
    assert "int32_t einloop_gemm(" in header and "const float *A," in header
    assert "/* output: float32[64, 48] */" in header
    (tmp_path / "main.c").write_text(C_MAIN)
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    exe = tmp_path / "main"
    subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-o", str(exe), str(tmp_path / "main.c"),
                    f"-I{tmp_path}", lib, f"-Wl,-rpath,{tmp_path}"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60)
    M, N, K = GEMM
    a = (np.arange(M * K) % 7 - 3.0).astype(np.float32).reshape(M, K)
    b = (np.arange(K * N) % 5 * 0.5).astype(np.float32).reshape(K, N)
    got = np.array(out.stdout.split(), dtype=np.float32).reshape(M, N)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)


@needs_cc
def test_write_header_from_a_loaded_library_needs_no_compiler(kernels, tmp_path):
    lib = runtime.export_library([kernels["softmax"], kernels["conv2d"]], tmp_path / "two.so")
    code = f"""
        import sys
        import einloop.runtime as rt
        path = rt.write_header({lib!r})
        text = open(path).read()
        assert "int32_t einloop_softmax(" in text and "int32_t einloop_conv2d(" in text, text
        assert "llvmlite" not in sys.modules
        print(path)
    """
    assert run_isolated(code).strip() == str(tmp_path / "two.h")
    meta = json.loads(json.dumps(runtime.load_module(lib).metadata))
    assert meta["schema"] == 1 and {k["name"] for k in meta["kernels"]} == {"softmax", "conv2d"}


@needs_cc
def test_compiler_rt_helpers_travel_inside_the_library(tmp_path):
    """float64 -> float16 always calls __truncdfhf2, which no libc defines: the library must
    carry einloop's own (hidden, so it exports only its kernels)."""
    from einloop import create_schedule, te
    from einloop.codegen.objfile import undefined_symbols
    A = te.placeholder((37,), "float64", name="A")
    B = te.compute((37,), lambda i: A[i].astype("float16"), name="B")
    f = build(create_schedule(B), [A, B], name="to_half")
    lib = f.export_library(tmp_path / "half.so")
    assert "__truncdfhf2" not in (undefined_symbols(open(lib, "rb").read()) or ())
    a = np.random.default_rng(1).random(37) * 100
    b = np.zeros(37, np.float16)
    runtime.load_module(lib)(a, b)
    np.testing.assert_array_equal(b, a.astype(np.float16))
