"""Beyond x86 (issue 20): kernels of the operator zoo compiled for ``aarch64-linux-gnu``.

Every machine compiles them to AArch64 ELF objects (LLVM's AArch64 backend ships in llvmlite).
Where Debian's cross toolchain and qemu-user are installed (``apt-get install
gcc-aarch64-linux-gnu libc6-dev-arm64-cross libgomp1-arm64-cross qemu-user``; ``.ci/run`` does
it), the objects are linked with a small C driver into an AArch64 program, which runs under
``qemu-aarch64`` on inputs NumPy made on the host and writes its outputs back for comparison:
the zoo under vectorized, parallel (2 threads) and unrolled schedules, some operators with
symbolic extents, and float -> int casts (einloop's one semantics, not AArch64's own).
"""
import os
import platform
import shutil
import struct
import subprocess

import numpy as np
import pytest

import ops
import strategies
from oracle import RTOL, random_inputs
from einloop import BuildError, LibraryError, ToolchainError, build, create_schedule, runtime, te
from einloop.codegen.export import (export_library, export_object, kernel_symbol, link_libraries,
                                    object_files)
from einloop.codegen.target import Target
from einloop.runtime import cpu

AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
EM_AARCH64 = 183                # ELF e_machine of AArch64
ET_REL, ET_DYN = 1, 3
SYSROOT = "/usr/aarch64-linux-gnu"
CROSS_CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
THREADS = 2
POSITIVE = {"layer_norm"}

needs_qemu = pytest.mark.skipif(
    not (CROSS_CC and QEMU and os.path.isdir(SYSROOT)),
    reason="needs Debian's AArch64 cross toolchain and qemu-user (apt-get install "
           "gcc-aarch64-linux-gnu libc6-dev-arm64-cross libgomp1-arm64-cross qemu-user)")

#: schedules whose objects are checked: plain, tiled + vectorized + parallel, cache_write with
#: unrolled and vectorized tiles, fused + parallel + vectorized
COMPILED = [strategies.default, strategies.tile_vectorize_parallel,
            strategies.cache_write_tiles, strategies.fuse_split_parallel]
#: schedules run under qemu (every op of the zoo under each)
RUN = [strategies.tile_vectorize_parallel, strategies.cache_write_tiles]


# ELF, read here independently of einloop's own reader -----------------------------------------

def elf_header(data: bytes) -> dict:
    assert data[:4] == b"\x7fELF", "not an ELF file"
    e_type, e_machine = struct.unpack_from("<HH", data, 0x10)
    return {"class64": data[4] == 2, "little": data[5] == 1, "type": e_type,
            "machine": e_machine}


def defined_symbols(data: bytes) -> set:
    """Names of the symbols an ELF64 little-endian file defines (section index not UNDEF)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind not in (2, 11):                     # SHT_SYMTAB, SHT_DYNSYM
            continue
        strtab = sections[link][4]
        for pos in range(offset, offset + size, entsize):
            name, _, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, pos)
            if name and shndx != 0:
                start = strtab + name
                names.add(data[start:data.index(b"\0", start)].decode())
    return names


def assert_aarch64_elf(path, kind, symbols):
    data = open(path, "rb").read()
    head = elf_header(data)
    assert head == {"class64": True, "little": True, "type": kind, "machine": EM_AARCH64}, head
    missing = set(symbols) - defined_symbols(data)
    assert not missing, f"{path} does not define {sorted(missing)}"


# compiling: every machine --------------------------------------------------------------------

def _build(op, strategy):
    inputs, outputs, ref = ops.ZOO[op]()
    name = f"{op}_{strategy.__name__}"
    k = build(strategy(outputs), list(inputs) + list(outputs), target=AARCH64, name=name)
    return k, inputs, outputs, ref


@pytest.mark.parametrize("strategy", COMPILED, ids=lambda f: f.__name__)
@pytest.mark.parametrize("op", sorted(ops.ZOO))
def test_zoo_kernel_compiles_to_an_aarch64_object(op, strategy, tmp_path):
    k, *_ = _build(op, strategy)
    path = k.export_object(tmp_path / "kernel.o")
    assert_aarch64_elf(path, ET_REL, [kernel_symbol(k.name), "einloop_metadata"])


@pytest.mark.parametrize("spec", ["llvm -mtriple=aarch64-linux-gnu",
                                  "llvm -mtriple=aarch64-unknown-linux-gnu -mcpu=neoverse-v1",
                                  "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53 -mattr=-neon"])
def test_other_aarch64_cpus_compile_too(spec, tmp_path):
    """The generic CPU, one with SVE, and one without NEON (scalar floating point only)."""
    inputs, outputs, _ = ops.softmax()
    k = build(strategies.tile_vectorize_parallel(outputs), inputs + outputs, target=spec,
              name="softmax")
    assert_aarch64_elf(k.export_object(tmp_path / "k.o"), ET_REL, ["einloop_softmax"])


def test_aarch64_code_is_aarch64_assembly_and_cannot_be_called_here():
    k, inputs, outputs, _ = _build("gemm", strategies.tile_vectorize_parallel)
    asm = k.get_source("asm")
    assert "fmla" in asm or "fmadd" in asm, asm[:2000]       # AArch64's fused multiply-add
    assert "GOMP_parallel" in asm and k.parallel
    arrays = random_inputs(list(inputs) + list(outputs))
    with pytest.raises(BuildError, match=r"compiled for aarch64-linux-gnu, which this process "
                                         r".* cannot run; write it out with export_object"):
        k(*arrays)


def test_a_foreign_triple_without_mcpu_is_generic_and_round_trips():
    t = Target.parse("llvm -mtriple=aarch64-linux-gnu")
    assert (t.cpu, t.features, t.arch, t.system) == ("generic", "", "aarch64", "linux")
    assert not t.is_native and Target.parse(str(t)) == t
    t = Target.parse("llvm -mtriple=aarch64-linux-gnu -mattr=+sve")
    assert t.has_feature("sve") and Target.parse(str(t)) == t
    assert Target.parse("llvm").is_native


def test_an_unknown_triple_is_a_build_error_at_parse_time():
    with pytest.raises(BuildError, match="LLVM does not know triple 'nosucharch-linux-gnu'"):
        Target.parse("llvm -mtriple=nosucharch-linux-gnu")


# running under qemu-aarch64: where the tools are installed ------------------------------------

CAST_VALUES = np.array([0.0, 2.5, -2.5, 127.9, 128.5, -128.7, 255.9, 300.7, -300.2, 65535.5,
                        2147483520.0, -2147483648.0, 3e9, -3e9, 1e20, -1e20, np.inf, -np.inf,
                        np.nan, 1e-30, -0.9, 9.2e18, -9.3e18], np.float32)
CAST_DTYPES = ("int32", "int64", "int16", "int8", "uint8")


def cast_kernel():
    """Float32 -> each integer type, with NaN, infinities and values outside every range: the
    one semantics einloop defines on every target (NumPy's on x86-64), not AArch64's own
    saturating conversion."""
    n = len(CAST_VALUES)
    X = te.placeholder((n,), "float32", name="X")
    outs = [te.compute((n,), _cast_to(X, d), name=f"to_{d}") for d in CAST_DTYPES]
    s = create_schedule(outs)
    for o in outs[:2]:
        s[o].vectorize(s[o].op.axis[0])
    return s, [X], outs, lambda x: [x86_cast(x, d) for d in CAST_DTYPES]


def _cast_to(X, dtype):
    return lambda i: X[i].astype(dtype)


def x86_cast(x, dtype):
    """einloop's float -> int cast spelled out: truncate toward zero; NaN or outside int32
    (int64 for int64) gives that type's minimum; narrower types keep the low bits."""
    bits = 64 if dtype == "int64" else 32
    limit = 2.0 ** (bits - 1)
    x = x.astype(np.float64)
    ok = (x >= -limit) & (x < limit)
    wide = np.where(ok, np.trunc(np.where(ok, x, 0.0)), -limit).astype(f"int{bits}")
    return wide.astype(dtype)          # NumPy's int -> int astype keeps the low bits


def arith_kernel():
    """Integer floor division and modulo by data (0 and -1 included, of INT_MIN too) and float16
    arithmetic (AArch64 converts half natively; x86 without F16C calls helpers)."""
    n = 64
    A = te.placeholder((n,), "int32", name="A")
    B = te.placeholder((n,), "int32", name="B")
    H = te.placeholder((n,), "float16", name="H")
    Q = te.compute((n,), lambda i: A[i] // B[i], name="Q")
    R = te.compute((n,), lambda i: A[i] % B[i], name="R")
    F = te.compute((n,), lambda i: H[i] * H[i] - te.exp(H[i]) / (B[i].astype("float16") + 1.5),
                   name="F")
    s = create_schedule([Q, R, F])
    for t in (Q, R, F):
        s[t].vectorize(s[t].op.axis[0])
    rng = np.random.default_rng(5)
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    a[:3] = np.iinfo(np.int32).min
    b = rng.integers(-9, 9, n).astype(np.int32)
    b[:6] = [0, -1, 3, 0, -1, 7]
    h = rng.uniform(-3, 3, n).astype(np.float16)

    def ref(a, b, h):
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            return [a // b, a % b, h * h - np.exp(h) / (b.astype(np.float16) + np.float16(1.5))]
    return s, [A, B, H], [Q, R, F], ref, [a, b, h]


_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
{declarations}
typedef struct {{
    const char *name; int nargs, nbufs, nvars; const long *bytes; const int64_t *vars; void *fn;
}} Case;
{tables}
static const Case CASES[] = {{ {cases} }};

/* Each case: read its arguments from DIR/NAME.in, call it, write its arguments to DIR/NAME.out */
int main(int argc, char **argv) {{
    if (argc != 3) return 2;
    int threads = atoi(argv[2]);
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {{
        const Case *k = &CASES[c];
        const int64_t *v = k->vars;
        char path[4096];
        void *p[16];
        snprintf(path, sizeof path, "%s/%s.in", argv[1], k->name);
        FILE *f = fopen(path, "rb");
        if (!f) {{ perror(path); return 3; }}
        for (int i = 0; i < k->nbufs; i++) {{
            p[i] = aligned_alloc(64, (k->bytes[i] + 64) / 64 * 64);
            if (i < k->nargs && fread(p[i], 1, k->bytes[i], f) != (size_t)k->bytes[i]) return 4;
        }}
        fclose(f);
        int rc;
        switch (k->nbufs * 8 + k->nvars) {{ {calls} default: return 5; }}
        if (rc != 0) {{ fprintf(stderr, "%s returned %d\n", k->name, rc); return 6; }}
        snprintf(path, sizeof path, "%s/%s.out", argv[1], k->name);
        f = fopen(path, "wb");
        for (int i = 0; i < k->nargs; i++) fwrite(p[i], 1, k->bytes[i], f);
        fclose(f);
        for (int i = 0; i < k->nbufs; i++) free(p[i]);
    }}
    return 0;
}}
"""


def _nbytes(spec, values):
    shape = [values[d] if isinstance(d, str) else d for d in spec.shape]
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize


def driver_source(cases, header=None):
    """A C program calling the kernel of each case (``{name: (kernel, arrays, values of its
    symbolic extents)}``) on buffers read from a file; it declares the kernels itself, or
    includes the library's *header*."""
    decls, tables, entries, arities = [], [], [], set()
    for n, (name, (k, _, values)) in enumerate(cases.items()):
        specs = list(k.signature.args) + list(k.signature.temps)
        nvars = len(k.signature.vars)
        assert len(specs) <= 16 and nvars < 8
        sym = kernel_symbol(k.name)
        decls.append(f"extern int32_t {sym}({'void *, ' * len(specs)}"
                     f"{'int64_t, ' * nvars}int32_t);")
        sizes = ", ".join(str(_nbytes(spec, values)) for spec in specs)
        tables.append(f"static const long BYTES{n}[] = {{{sizes}}};")
        tables.append(f"static const int64_t VARS{n}[] = "
                      f"{{{', '.join(str(values[v.name]) for v in k.signature.vars) or '0'}}};")
        entries.append(f'{{"{name}", {len(k.signature.args)}, {len(specs)}, {nvars}, BYTES{n}, '
                       f'VARS{n}, (void *){sym}}}')
        arities.add((len(specs), nvars))
    calls = " ".join(
        f"case {a * 8 + nv}: rc = ((int32_t (*)({'void *, ' * a}{'int64_t, ' * nv}int32_t))k->fn)("
        f"{''.join(f'p[{i}], ' for i in range(a))}{''.join(f'v[{i}], ' for i in range(nv))}"
        f"threads); break;" for a, nv in sorted(arities))
    return _DRIVER.format(declarations=f'#include "{header}"' if header else "\n".join(decls),
                          tables="\n".join(tables), cases=", ".join(entries), calls=calls)


def _run_cases(folder, program, cases, env=()):
    """Write each case's arrays (outputs prefilled) to *folder*, run *program* under qemu, and
    return ``{name: its arrays after the call}``."""
    for name, (k, arrays, values) in cases.items():
        with open(folder / f"{name}.in", "wb") as f:
            for a in arrays:
                f.write(np.ascontiguousarray(a).tobytes())
    cmd = [QEMU, "-L", SYSROOT, *[x for kv in env for x in ("-E", kv)], str(program),
           str(folder), str(THREADS)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{' '.join(cmd)} exited {run.returncode}:\n{run.stderr}"
    results = {}
    for name, (k, arrays, values) in cases.items():
        data, out, pos = open(folder / f"{name}.out", "rb").read(), [], 0
        for a in arrays:
            out.append(np.frombuffer(data[pos:pos + a.nbytes], a.dtype).reshape(a.shape))
            pos += a.nbytes
        assert pos == len(data)
        results[name] = out
    return results


def _cc(*args):
    run = subprocess.run([CROSS_CC, *map(str, args)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def _case(k, inputs, outputs, positive=False, arrays=None, values=None):
    """``(kernel, input and prefilled output arrays, symbolic values)`` for *k* on random
    inputs (or *arrays*) shaped like the concrete tensors *inputs*."""
    arrays = random_inputs(inputs, positive=positive) if arrays is None else arrays
    fill = [np.full(t.shape, np.nan if t.dtype.startswith("float") else 0, t.dtype)
            for t in outputs]
    return k, list(arrays) + fill, dict(values or {})


#: zoo operators with symbolic extents (as in tests/test_dynamic_shapes.py) and the values run
SYMBOLIC = [("gemm", {"M": 37, "N": 45}), ("softmax", {"N": 35}), ("conv2d", {"N": 2})]


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    """Every zoo operator under each schedule of RUN, some with symbolic extents, and the cast
    kernel: one object file, one AArch64 program, one qemu run;
    ``{name: (outputs got, outputs wanted, output tensors)}``."""
    folder = tmp_path_factory.mktemp("aarch64")
    cases, refs = {}, {}
    for op in sorted(ops.ZOO):
        for strategy in RUN:
            k, inputs, outputs, ref = _build(op, strategy)
            cases[k.name] = _case(k, inputs, outputs, positive=op in POSITIVE)
            refs[k.name] = (len(inputs), ref, outputs)
    for op, sizes in SYMBOLIC:
        ins, outs, _ = ops.ZOO[op](**{p: te.size_var(p.lower()) for p in sizes})
        name = f"{op}_symbolic_{'_'.join(sizes)}"
        k = build(strategies.tile_vectorize_parallel(outs), ins + outs, target=AARCH64,
                  name=name)
        assert k.signature.vars
        inputs, outputs, ref = ops.ZOO[op](**sizes)
        cases[name] = _case(k, inputs, outputs, values={p.lower(): v for p, v in sizes.items()})
        refs[name] = (len(inputs), ref, outputs)
    s, X, outs, ref = cast_kernel()
    k = build(s, X + outs, target=AARCH64, name="casts")
    cases["casts"] = _case(k, X, outs, arrays=[CAST_VALUES])
    refs["casts"] = (1, ref, outs)
    s, ins, outs, ref, arrays = arith_kernel()
    cases["arith"] = _case(build(s, ins + outs, target=AARCH64, name="arith"), ins, outs,
                           arrays=arrays)
    refs["arith"] = (len(ins), ref, outs)
    export_object([k for k, _, _ in cases.values()], folder / "kernels.o")
    (folder / "driver.c").write_text(driver_source(cases))
    _cc("-O1", "-o", folder / "run", folder / "driver.c", folder / "kernels.o", "-lgomp", "-lm")
    assert elf_header(open(folder / "run", "rb").read())["machine"] == EM_AARCH64
    got = _run_cases(folder, folder / "run", cases)
    return {name: (got[name][n:], ref(*cases[name][1][:n]), outputs)
            for name, (n, ref, outputs) in refs.items()}


def _compare(got, want, outputs):
    for g, w, t in zip(got, want, outputs):
        rtol = RTOL.get(t.dtype, 0)
        np.testing.assert_allclose(g, np.asarray(w, dtype=t.dtype), rtol=rtol, atol=rtol,
                                   err_msg=f"output {t.name}")


@needs_qemu
@pytest.mark.parametrize("strategy", RUN, ids=lambda f: f.__name__)
@pytest.mark.parametrize("op", sorted(ops.ZOO))
def test_zoo_kernel_runs_on_aarch64_like_numpy(zoo_run, op, strategy):
    _compare(*zoo_run[f"{op}_{strategy.__name__}"])


@needs_qemu
@pytest.mark.parametrize("op,sizes", SYMBOLIC, ids=[op for op, _ in SYMBOLIC])
def test_zoo_kernel_with_symbolic_extents_runs_on_aarch64_like_numpy(zoo_run, op, sizes):
    _compare(*zoo_run[f"{op}_symbolic_{'_'.join(sizes)}"])


@needs_qemu
def test_float_to_int_casts_on_aarch64_keep_einloops_one_semantics(zoo_run):
    got, want, outputs = zoo_run["casts"]
    for g, w, t in zip(got, want, outputs):
        np.testing.assert_array_equal(g, w, err_msg=f"cast to {t.dtype}")
    # the values AArch64's own conversion (fcvtzs) would saturate to are not what was stored
    assert got[0][CAST_VALUES.tolist().index(3e9)] == np.iinfo(np.int32).min
    if platform.machine() in ("x86_64", "AMD64"):       # the reference is NumPy's own there
        with np.errstate(invalid="ignore"):
            for g, t in zip(got, outputs):
                np.testing.assert_array_equal(g, CAST_VALUES.astype(t.dtype))


@needs_qemu
def test_integer_division_and_float16_on_aarch64_like_numpy(zoo_run):
    (q, r, f), (wq, wr, wf), _ = zoo_run["arith"]
    np.testing.assert_array_equal(q, wq)
    np.testing.assert_array_equal(r, wr)
    np.testing.assert_allclose(f.astype(np.float32), wf.astype(np.float32), rtol=2e-3, atol=2e-3)


@needs_qemu
def test_export_library_links_with_the_cross_compiler_and_runs_through_its_header(tmp_path):
    k, inputs, outputs, ref = _build("softmax", strategies.fuse_split_parallel)
    lib = export_library([k], tmp_path / "libsoftmax.so", header=True)
    assert_aarch64_elf(lib, ET_DYN, [kernel_symbol(k.name)])
    case = {k.name: _case(k, inputs, outputs)}
    (tmp_path / "driver.c").write_text(driver_source(case, header="libsoftmax.h"))
    _cc("-O1", "-I", tmp_path, "-o", tmp_path / "run", tmp_path / "driver.c",
        "-L", tmp_path, "-lsoftmax")
    got = _run_cases(tmp_path, tmp_path / "run", case, env=[f"LD_LIBRARY_PATH={tmp_path}"])
    _compare(got[k.name][len(inputs):], ref(*case[k.name][1][:len(inputs)]), outputs)


# loading: code of another architecture is refused by name -------------------------------------

def test_aarch64_features_are_checked_against_an_aarch64_cpuinfo():
    features = "+neon,+fp-armv8,+dotprod,+sve,+sve2,-lse,+nosuchfeature"
    flags = frozenset("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp sve".split())
    assert cpu.missing_features(features, flags, "aarch64") == ("sve2",)
    assert cpu.missing_features("+avx2", flags, "aarch64") == ()       # no x86 names there
    assert cpu.missing_features("+avx2,+sve", frozenset({"sse2"}), "x86_64") == ("avx2",)


def test_a_library_for_another_architecture_is_refused_before_dlopen(tmp_path):
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler (cc, gcc, clang) on PATH")
    foreign = "aarch64-linux-gnu" if cpu.host_arch() != "aarch64" else "x86_64-linux-gnu"
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    k = build(create_schedule(B), [A, B], name="double")

    def edit(meta):
        meta["target"]["triple"] = foreign
        return meta
    lib = export_library([k], tmp_path / "lib.so", edit_metadata=edit)
    with pytest.raises(LibraryError, match=rf"holds code for {foreign}, which this "
                                           rf"{cpu.host_arch()} machine cannot run"):
        runtime.load_module(lib)
    if CROSS_CC and foreign == "aarch64-linux-gnu":     # and a real AArch64 library
        a64, *_ = _build("gemm", strategies.default)
        with pytest.raises(LibraryError, match="holds code for aarch64-linux-gnu"):
            runtime.load_module(export_library([a64], tmp_path / "a64.so"))


# linking for another machine: which compiler, which libraries ----------------------------------

def test_without_a_cross_compiler_export_library_names_the_one_to_install(tmp_path, monkeypatch):
    k, *_ = _build("gemm", strategies.default)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))               # no compiler at all
    with pytest.raises(ToolchainError, match=r"looked for \$CC and aarch64-linux-gnu-gcc on PATH"
                                             r".*apt-get install gcc-aarch64-linux-gnu"):
        k.export_library(tmp_path / "lib.so")
    assert_aarch64_elf(k.export_object(tmp_path / "k.o"), ET_REL, [kernel_symbol(k.name)])


def test_a_parallel_kernel_for_macos_links_libgomp_and_a_failed_link_says_where_it_is(
        tmp_path, monkeypatch):
    host_cc = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if host_cc is None:
        pytest.skip("no C compiler (cc, gcc, clang) on PATH")
    inputs, outputs, _ = ops.gemm()
    k = build(strategies.tile_vectorize_parallel(outputs), inputs + outputs,
              target="llvm -mtriple=arm64-apple-macosx13.0.0", name="gemm_macos")
    assert k.parallel and k.owner.target.system == "darwin"
    objects = object_files([k])
    assert objects[0][:4] == b"\xcf\xfa\xed\xfe"          # Mach-O 64: its symbols are not read
    assert b"_einloop_metadata\0" in objects[0] and b"_einloop_gemm_macos\0" in objects[0]
    assert link_libraries(objects, parallel=True) == ["-lgomp", "-lm"]
    monkeypatch.setenv("CC", host_cc)                       # a Linux linker cannot read Mach-O
    with pytest.raises(ToolchainError, match=r"(?s)linking .* failed: .*-lgomp -lm.*parallel "
                                             r"kernels link libgomp, GCC's OpenMP runtime"):
        k.export_library(tmp_path / "libgemm.dylib")


def test_aarch64_ir_is_never_jit_compiled_here():
    """The worker-process path (ShippedKernel, object code made by this process's JIT) and
    timing refuse too, instead of running AArch64 code on this CPU."""
    from einloop.codegen import shipped
    from einloop.schedule import lower
    inputs, outputs, _ = ops.gemm()
    s = strategies.default(outputs)
    with pytest.raises(BuildError, match="compiled for aarch64-linux-gnu, which this process"):
        shipped.ship(lower(s, inputs + outputs, name="gemm_sk"), AARCH64)
    k, inputs, outputs, _ = _build("gemm", strategies.default)
    with pytest.raises(BuildError, match="cannot run"):
        k.time(*random_inputs(list(inputs) + list(outputs)))
