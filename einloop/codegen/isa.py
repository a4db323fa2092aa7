"""Which instruction-set features a target's code may use, asked of LLVM itself.

For the host, LLVM lists every feature on or off (``+avx2,-avx512f,...``).  A named CPU
(``-mcpu=skylake-avx512``) lists only what ``-mattr`` adds, and llvmlite cannot list what the
CPU name implies.  Rather than a table of CPU names that goes stale with every LLVM release,
einloop compiles a few probe functions for the target (its CPU and ``-mattr`` together, so
implications such as ``+avx512f`` => AVX2 are LLVM's own) and reads the assembly: each probe is
plain IR whose lowering shows one feature (a 16 x float add lands in a zmm register only with
AVX512F, an 8 x i32 add in one ymm instruction only with AVX2, ``llvm.fma`` becomes ``vfmadd``
only with FMA...).  No probe uses an intrinsic of a feature, so a probe never fails to select.

The probed features are the ones the auto-scheduler's machine model and the exported libraries'
CPU check need; a named CPU's other features stay unknown (neither on nor off).  AMX's tile
units show in no plain IR: they are probed by compiling their intrinsics in a child process
(:data:`CHILD_PROBES`), for CPUs of their generation only.
"""
from __future__ import annotations

import functools
import re
import subprocess
import sys
import threading

import llvmlite.binding as llvm

_VNNI_PROBE = ("<4 x i32> @probe(<8 x i16> %a, <8 x i16> %b, <4 x i32> %c) {"
               " %p = call <4 x i32> @llvm.x86.sse2.pmadd.wd(<8 x i16> %a, <8 x i16> %b)\n"
               " %r = add <4 x i32> %p, %c\n ret <4 x i32> %r }\n"
               "declare <4 x i32> @llvm.x86.sse2.pmadd.wd(<8 x i16>, <8 x i16>)")

#: feature -> (IR of a function ``@probe`` showing it, regex its assembly matches iff present);
#: ``#0`` lets the backend use 512-bit registers even where the CPU prefers 256-bit vectors
PROBES = {
    "avx": ("<8 x float> @probe(<8 x float> %a, <8 x float> %b) {"
            " %r = fadd <8 x float> %a, %b\n ret <8 x float> %r }", r"vaddps\s+%ymm"),
    "avx2": ("<8 x i32> @probe(<8 x i32> %a, <8 x i32> %b) {"
             " %r = add <8 x i32> %a, %b\n ret <8 x i32> %r }", r"vpaddd\s+%ymm"),
    "fma": ("<4 x float> @probe(<4 x float> %a, <4 x float> %b, <4 x float> %c) {"
            " %r = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %b,"
            " <4 x float> %c)\n ret <4 x float> %r }\n"
            "declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)",
            r"vfmadd\d{3}ps"),
    "f16c": ("<4 x float> @probe(<4 x half> %a) {"
             " %r = fpext <4 x half> %a to <4 x float>\n ret <4 x float> %r }", r"vcvtph2ps"),
    "sse4.1": ("<4 x i32> @probe(<4 x i32> %a, <4 x i32> %b) {"
               " %r = mul <4 x i32> %a, %b\n ret <4 x i32> %r }", r"pmulld"),
    "sse4.2": ("<2 x i1> @probe(<2 x i64> %a, <2 x i64> %b) {"
               " %r = icmp sgt <2 x i64> %a, %b\n ret <2 x i1> %r }", r"pcmpgtq"),
    "popcnt": ("i64 @probe(i64 %a) { %r = call i64 @llvm.ctpop.i64(i64 %a)\n ret i64 %r }\n"
               "declare i64 @llvm.ctpop.i64(i64)", r"\bpopcnt"),
    "bmi2": ("i64 @probe(i64 %a, i64 %b) { %r = shl i64 %a, %b\n ret i64 %r }", r"\bshlx"),
    "avx512f": ("<16 x float> @probe(<16 x float> %a, <16 x float> %b) #0 {"
                " %r = fadd <16 x float> %a, %b\n ret <16 x float> %r }", r"%zmm"),
    "avx512bw": ("<64 x i8> @probe(<64 x i8> %a, <64 x i8> %b) #0 {"
                 " %r = add <64 x i8> %a, %b\n ret <64 x i8> %r }", r"vpaddb\s+%zmm"),
    "avx512dq": ("<8 x i64> @probe(<8 x double> %a) #0 {"
                 " %r = fptosi <8 x double> %a to <8 x i64>\n ret <8 x i64> %r }",
                 r"vcvttpd2qq"),
    "avx512vl": ("<4 x i32> @probe(<4 x float> %a) {"
                 " %r = fptoui <4 x float> %a to <4 x i32>\n ret <4 x i32> %r }",
                 r"vcvttps2udq\s+%xmm"),
    # rounding float32 to bfloat16 is one vcvtneps2bf16 with AVX512-BF16 (on zmm: AVX-NE-CONVERT
    # has only the VEX ymm form); without it, integer arithmetic on the bits
    "avx512bf16": ("<16 x i16> @probe(<16 x float> %a) #0 {"
                   " %r = fptrunc <16 x float> %a to <16 x bfloat>\n"
                   " %b = bitcast <16 x bfloat> %r to <16 x i16>\n ret <16 x i16> %b }",
                   r"vcvtneps2bf16\s+%zmm"),
    "avx512fp16": ("<8 x half> @probe(<8 x half> %a, <8 x half> %b) {"
                   " %r = fadd <8 x half> %a, %b\n ret <8 x half> %r }", r"vaddph"),
    # VNNI: LLVM folds a pmaddwd (SSE2, so always selectable) and an add into vpdpwssd, VEX
    # encoded ({vex}) with AVX-VNNI, EVEX without; a CPU with both prefers VEX, so the AVX-512
    # VNNI probe turns AVX-VNNI off first (PROBE_FEATURES)
    "avxvnni": (_VNNI_PROBE, r"\{vex\}\s*vpdpwssd"),
    "avx512vnni": (_VNNI_PROBE, r"(?<!\})\s+vpdpwssd"),
}
#: features added to the target's for one probe
PROBE_FEATURES = {"avx512vnni": "-avxvnni"}
_ATTRS = 'attributes #0 = { "min-legal-vector-width"="512" }'

_AMX_DECLARE = ("declare x86_amx @llvm.x86.tilezero.internal(i16, i16)\n"
                "declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)\n")


def _amx_probe(op):
    """A function multiplying zero tiles with *op* (None: only zeroing one) and storing the
    result."""
    mul = ("" if op is None else
           f" %r = call x86_amx @llvm.x86.{op}.internal(i16 16, i16 64, i16 64, x86_amx %z,"
           " x86_amx %z, x86_amx %z)\n")
    decl = ("" if op is None else
            f"declare x86_amx @llvm.x86.{op}.internal(i16, i16, i16, x86_amx, x86_amx, "
            "x86_amx)\n")
    return (_AMX_DECLARE + decl + "define void @probe(ptr %p) {\n"
            " %z = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)\n" + mul
            + " call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %p, i64 64, "
            f"x86_amx {'%z' if op is None else '%r'})\n ret void\n}}\n")


#: features that plain IR never shows (AMX's tile units: only their own intrinsics use them),
#: probed by compiling such a use in a child process, since LLVM aborts a process whose code
#: it cannot select; asked only of a CPU the in-process probes show to be of AMX's generation
#: (AVX512-FP16, which every CPU with AMX has) and only where the feature list does not say
CHILD_PROBES = {"amx-tile": _amx_probe(None), "amx-int8": _amx_probe("tdpbusd"),
                "amx-bf16": _amx_probe("tdpbf16ps")}
_CHILD_GATE = "avx512fp16"
#: a child process's script (``python -c CHILD_COMPILE triple cpu features opt``): compiles
#: the module on stdin for that target at that optimisation level; exits non-zero (or dies, as
#: LLVM aborts on an instruction it cannot select) if LLVM cannot
CHILD_COMPILE = """
import sys
import llvmlite.binding as llvm
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
triple, cpu, features, opt = sys.argv[1:5]
mod = llvm.parse_assembly(sys.stdin.read())
mod.triple = triple
llvm.Target.from_triple(triple).create_target_machine(
    cpu=cpu, features=features, opt=int(opt)).emit_assembly(mod)
"""

_lock = threading.Lock()
_probed: dict = {}


@functools.lru_cache(maxsize=None)
def child_probe(triple: str, cpu: str, features: str, names: tuple) -> dict:
    """``{feature: True/False}`` for the features *names* of :data:`CHILD_PROBES`: whether
    LLVM compiles their probe for the target, each in a child process (run side by side); a
    child that cannot be run or times out leaves its feature out (unknown)."""
    procs = {}
    for name in names:
        try:
            procs[name] = subprocess.Popen(
                [sys.executable, "-c", CHILD_COMPILE, triple, cpu, features, "0"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            continue
    got = {}
    for name, proc in procs.items():
        try:
            proc.communicate(CHILD_PROBES[name], timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            continue
        got[name] = proc.returncode == 0
    return got


def is_x86(triple: str) -> bool:
    return re.match(r"(x86_64|i[3-6]86|amd64)", triple) is not None


def probe(triple: str, cpu: str, features: str) -> dict:
    """``{feature: bool}`` for every feature of :data:`PROBES` on the x86 target (*triple*,
    *cpu*, *features*), each from the assembly LLVM generates for its probe (cached)."""
    key = (triple, cpu, features)
    with _lock:
        got = _probed.get(key)
        if got is None:
            target = llvm.Target.from_triple(triple)
            machines = {}
            got = {}
            for name, (body, pattern) in PROBES.items():
                extra = PROBE_FEATURES.get(name, "")
                tm = machines.get(extra)
                if tm is None:
                    tm = machines[extra] = target.create_target_machine(
                        cpu=cpu, features=",".join(f for f in (features, extra) if f), opt=2)
                mod = llvm.parse_assembly(f"define {body}\n{_ATTRS}\n")
                mod.triple = triple
                got[name] = re.search(pattern, tm.emit_assembly(mod)) is not None
            _probed[key] = got
        return got


@functools.lru_cache(maxsize=None)
def complete(triple: str, cpu: str, features: str) -> str:
    """*features* with each probed feature on (``+``) or off (``-``) as LLVM generates code for
    the target: added where it is not named (a named CPU's), replaced where the list says
    otherwise (``-avx512f`` also turns off the listed ``+avx512bw``, which needs it).
    Unchanged off x86.  Cached: every build asks (the EVEX workaround, the machine model)."""
    if not is_x86(triple):
        return features
    found = dict(probe(triple, cpu, features))
    listed = {f[1:] for f in features.split(",") if f}
    if found.get(_CHILD_GATE):
        ask = tuple(n for n in CHILD_PROBES if n not in listed)
        if ask:
            found.update(child_probe(triple, cpu, features, ask))
    kept = [f for f in features.split(",") if f and f[1:] not in found]
    return ",".join(kept + [("+" if on else "-") + name for name, on in found.items()])
