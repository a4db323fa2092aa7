"""Which instruction-set features this CPU has, and how large its last-level cache is, read
without LLVM.

An exported library records the LLVM features its code was generated for (``+avx2,+fma,...``);
before loading it, the runtime checks that the host has each of them, so that a library built
on a newer CPU raises an error instead of dying of SIGILL.  The host's features come from the
``flags`` line of ``/proc/cpuinfo`` (Linux); :data:`LLVM_TO_CPUINFO` maps LLVM's feature names
to those flags (x86's ``flags`` line), :data:`AARCH64_LLVM_TO_CPUINFO` on AArch64 (its
``Features`` line).  Features missing from the table (or a host without ``/proc/cpuinfo``)
cannot be checked and are skipped: the check refuses only what it knows to be absent.  Code for
another architecture is refused before any feature is looked at (:func:`foreign_arch`).

The tables hold the features LLVM may use when it generates code from plain IR, as einloop's
kernels are: vector and scalar arithmetic, conversions, bit manipulation.  Instructions reached
only through their own intrinsics (rdrand/rdseed, xsave, AES, SHA, CLMUL, cmpxchg16b), which
einloop never emits, are not required: a CPU may have them and still have its kernel clear them
(Linux clears RDSEED on CPUs where it is unreliable), so requiring them would refuse a library
on the very machine that exported it.  AMX is in the table, but an exported library lists its
features only when its kernels run AMX instructions (einloop's AMX tensor intrinsics), not
because the CPU it was exported for has them.
"""
from __future__ import annotations

import functools
import os

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
    "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}


#: LLVM AArch64 feature name -> the Linux /proc/cpuinfo ``Features`` word that says the CPU has it.
AARCH64_LLVM_TO_CPUINFO = {
    "fp-armv8": "fp", "neon": "asimd", "lse": "atomics", "rdm": "asimdrdm",
    "dotprod": "asimddp", "fullfp16": "asimdhp", "fp16fml": "asimdfhm", "jsconv": "jscvt",
    "complxnum": "fcma", "sve": "sve", "sve2": "sve2", "i8mm": "i8mm", "bf16": "bf16",
    "f32mm": "svef32mm", "f64mm": "svef64mm",
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


def required_features(features: str, arch=None) -> tuple:
    """The features of its architecture's table (*arch*, by default the host's) that an LLVM
    feature string turns on, i.e. what code generated for it may use:
    ``"+avx2,-avx512f,+rdseed"`` -> ``("avx2",)`` on x86-64."""
    table = TABLES.get(arch or host_arch(), {})
    return tuple(f[1:] for f in features.split(",") if f.startswith("+") and f[1:] in table)


def missing_features(features: str, flags=None, arch=None) -> tuple:
    """The features of LLVM string *features* that the host (or *flags*, of a CPU of
    architecture *arch*, by default the host's) is known to lack."""
    flags = host_flags() if flags is None else flags
    arch = arch or host_arch()
    if flags is None:
        return ()
    table = TABLES.get(arch, {})
    return tuple(f for f in required_features(features, arch) if table[f] not in flags)


#: where Linux describes the first CPU's caches, one ``indexN`` folder per cache
CACHE_SYSFS = "/sys/devices/system/cpu/cpu0/cache"


@functools.lru_cache(maxsize=None)
def host_last_level_cache_bytes(root=CACHE_SYSFS):
    """The size in bytes of this machine's last-level data cache (the highest level of
    *root*'s data or unified caches: the L3 of most x86 CPUs), or None where it cannot be
    read (no sysfs, a VM that hides it)."""
    best = None
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        entries = []
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(root, entry, "level"), encoding="ascii") as f:
                level = int(f.read())
            with open(os.path.join(root, entry, "type"), encoding="ascii") as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "size"), encoding="ascii") as f:
                size = _sysfs_size(f.read())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size and (best is None or level >= best[0]):
            best = (level, size)
    if best is not None:
        return best[1]
    try:                                        # glibc's view (0 where it does not know)
        size = os.sysconf("SC_LEVEL3_CACHE_SIZE") or os.sysconf("SC_LEVEL2_CACHE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return size if size and size > 0 else None


def _sysfs_size(text):
    """``"32768K"`` -> 33554432; sysfs writes sizes with a K or M suffix."""
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KkMmGg")) * scale
