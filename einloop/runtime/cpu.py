"""Which instruction-set features this CPU has, read without LLVM.

An exported library records the LLVM features its code was generated for (``+avx2,+fma,...``);
before loading it, the runtime checks that the host has each of them, so that a library built
on a newer CPU raises an error instead of dying of SIGILL.  The host's features come from the
``flags`` line of ``/proc/cpuinfo`` (Linux); :data:`LLVM_TO_CPUINFO` maps LLVM's feature names
to those flags.  Features missing from the table (or a host without ``/proc/cpuinfo``) cannot be
checked and are skipped: the check refuses only what it knows to be absent.

The table holds the features LLVM may use when it generates code from plain IR, as einloop's
kernels are: vector and scalar arithmetic, conversions, bit manipulation.  Instructions reached
only through their own intrinsics (rdrand/rdseed, xsave, AES, SHA, CLMUL, AMX, cmpxchg16b), which
einloop never emits, are not required: a CPU may have them and still have its kernel clear them
(Linux clears RDSEED on CPUs where it is unreliable), so requiring them would refuse a library
on the very machine that exported it.
"""
from __future__ import annotations

import functools

#: LLVM x86 feature name -> the Linux /proc/cpuinfo flag that says the CPU has it (the features
#: code generated from plain IR may use; see the module docstring)
LLVM_TO_CPUINFO = {
    "sse": "sse", "sse2": "sse2", "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1",
    "sse4.2": "sse4_2", "sse4a": "sse4a", "avx": "avx", "avx2": "avx2", "fma": "fma",
    "fma4": "fma4", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2", "lzcnt": "abm",
    "popcnt": "popcnt", "movbe": "movbe", "gfni": "gfni", "avxvnni": "avx_vnni",
    "avx512f": "avx512f", "avx512cd": "avx512cd",
    "avx512bw": "avx512bw", "avx512dq": "avx512dq", "avx512vl": "avx512vl",
    "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2",
    "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16", "avx512vp2intersect": "avx512_vp2intersect",
}


@functools.lru_cache(maxsize=None)
def host_flags(path="/proc/cpuinfo"):
    """The CPU flags of the first processor in *path*, or None where they cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def required_features(features: str) -> tuple:
    """The features of :data:`LLVM_TO_CPUINFO` an LLVM feature string turns on (what code
    generated for it may use): ``"+avx2,-avx512f,+rdseed"`` -> ``("avx2",)``."""
    return tuple(f[1:] for f in features.split(",")
                 if f.startswith("+") and f[1:] in LLVM_TO_CPUINFO)


def missing_features(features: str, flags=None) -> tuple:
    """The features of LLVM string *features* that the host (or *flags*) is known to lack."""
    flags = host_flags() if flags is None else flags
    if flags is None:
        return ()
    return tuple(f for f in required_features(features) if LLVM_TO_CPUINFO[f] not in flags)
