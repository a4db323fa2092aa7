"""Workarounds for miscompiles in the LLVM that einloop ships (llvmlite 0.50, LLVM 22.1).

LLVM 22's X86CompressEVEX folds ``vpmov*2m %x, %k; kmov %k, %r`` into ``vmovmsk %x, %r`` and gets
it wrong in two ways: a VEX-encoded movmsk cannot name xmm16-31, so it silently reads another
register (llvm/llvm-project#191304), and a later ``kshiftr`` of the mask still reads the mask
whose definition the fold erased (#198197).  Vectorized integer code on AVX-512 hosts then
computes wrong lanes (an int8 gather reduction, a floor division by a data-dependent divisor).
``vpmov*2m`` exists only with AVX512BW or AVX512DQ and the fold only ever emits movmsk, so a
kernel whose code for such a target contains a movmsk is rebuilt for the same CPU without them.
"""
from __future__ import annotations

import re

import llvmlite.binding as llvm

_MASK_FEATURES = ("avx512bw", "avx512dq")
_MOVMSK = re.compile(r"\bvp?movmsk")


def evex_mask_fold_risk(mod, target) -> bool:
    """Might *target*'s code for the optimised module *mod* hold a miscompiled movmsk?

    The caller holds the JIT lock (the shared target machine emits the assembly).
    """
    if not target.is_x86 or all(target.lacks_feature(f) for f in _MASK_FEATURES):
        return False                    # an X86 backend fold: other targets never have it
    asm = target.target_machine().emit_assembly(llvm.parse_assembly(str(mod)))
    return _MOVMSK.search(asm) is not None


def without_mask_features(target):
    """*target* without the features whose instructions the broken fold rewrites."""
    return target.without(_MASK_FEATURES)
