"""Which instruction-set features this CPU has, read without LLVM.

An exported library records the LLVM features its code was generated for (``+avx2,+fma,...``);
before loading it, the runtime checks that the host has each of them, so that a library built
on a newer CPU raises an error instead of dying of SIGILL.  The host's features come from the
``flags`` line of ``/proc/cpuinfo`` (Linux); :data:`LLVM_TO_CPUINFO` maps LLVM's feature names
to those flags (x86's ``flags`` line), :data:`AARCH64_LLVM_TO_CPUINFO` on AArch64 (its
``Features`` line).  Features missing from the table (or a host without ``/proc/cpuinfo``)
cannot be checked and are skipped: the check refuses only what it knows to be absent.  Code for
another architecture is refused before any feature is looked at (:func:`foreign_arch`).
"""
from __future__ import annotations

import functools
import os

#: LLVM x86 feature name -> the Linux /proc/cpuinfo flag that says the CPU has it.
LLVM_TO_CPUINFO = {
    "sse": "sse", "sse2": "sse2", "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1",
    "sse4.2": "sse4_2", "sse4a": "sse4a", "avx": "avx", "avx2": "avx2", "fma": "fma",
    "fma4": "fma4", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2", "lzcnt": "abm",
    "popcnt": "popcnt", "movbe": "movbe", "aes": "aes", "pclmul": "pclmulqdq", "sha": "sha_ni",
    "adx": "adx", "rdrnd": "rdrand", "rdseed": "rdseed", "cx16": "cx16", "xsave": "xsave",
    "xsaveopt": "xsaveopt", "xsavec": "xsavec", "xsaves": "xsaves", "fsgsbase": "fsgsbase",
    "clflushopt": "clflushopt", "clwb": "clwb", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq",
    "gfni": "gfni", "avxvnni": "avx_vnni", "avx512f": "avx512f", "avx512cd": "avx512cd",
    "avx512bw": "avx512bw", "avx512dq": "avx512dq", "avx512vl": "avx512vl",
    "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2",
    "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16", "avx512vp2intersect": "avx512_vp2intersect",
    "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}


#: LLVM AArch64 feature name -> the Linux /proc/cpuinfo ``Features`` word that says the CPU has it.
AARCH64_LLVM_TO_CPUINFO = {
    "fp-armv8": "fp", "neon": "asimd", "crc": "crc32", "aes": "aes", "sha2": "sha2",
    "sha3": "sha3", "sm4": "sm4", "lse": "atomics", "rdm": "asimdrdm", "dotprod": "asimddp",
    "fullfp16": "asimdhp", "fp16fml": "asimdfhm", "rcpc": "lrcpc", "jsconv": "jscvt",
    "complxnum": "fcma", "ccpp": "dcpop", "sve": "sve", "sve2": "sve2", "i8mm": "i8mm",
    "bf16": "bf16", "f32mm": "svef32mm", "f64mm": "svef64mm", "flagm": "flagm", "ssbs": "ssbs",
    "sb": "sb", "bti": "bt", "mte": "mte", "rand": "rng",
}

#: the feature table of each architecture (named as in LLVM triples)
TABLES = {"x86_64": LLVM_TO_CPUINFO, "aarch64": AARCH64_LLVM_TO_CPUINFO}
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def normal_arch(name: str) -> str:
    """An architecture as LLVM triples name it: ``AMD64`` -> ``x86_64``, ``arm64`` ->
    ``aarch64``."""
    name = name.lower()
    return _ARCH_ALIASES.get(name, name)


def host_arch() -> str:
    """This machine's architecture, as LLVM triples name it (``os.uname``: importing
    ``platform`` would cost the runtime's import a millisecond)."""
    machine = (os.uname().machine if hasattr(os, "uname")
               else os.environ.get("PROCESSOR_ARCHITECTURE", ""))
    return normal_arch(machine)


def foreign_arch(triple: str):
    """The architecture of *triple* when it is not this machine's (its code cannot run
    here), else None; an empty triple is not judged."""
    arch = normal_arch(triple.split("-")[0]) if triple else ""
    return arch if arch and arch != host_arch() else None


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
    """The features an LLVM feature string turns on: ``"+avx2,-avx512f"`` -> ``("avx2",)``."""
    return tuple(f[1:] for f in features.split(",") if f.startswith("+"))


def missing_features(features: str, flags=None, arch=None) -> tuple:
    """The features of LLVM string *features* that the host (or *flags*, of a CPU of
    architecture *arch*, by default the host's) is known to lack."""
    flags = host_flags() if flags is None else flags
    table = TABLES.get(arch or host_arch(), {})
    if flags is None:
        return ()
    return tuple(f for f in required_features(features)
                 if f in table and table[f] not in flags)
