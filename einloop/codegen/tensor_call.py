"""Code for :class:`~einloop.ir.stmt.IntrinsicCall`: a tensorized loop nest as one call of the
tensor intrinsic's LLVM function (``s[T].tensorize``, :mod:`einloop.te.tensor_intrin`).

The call passes a pointer to each tile's first element.  The function itself is LLVM IR text of
the intrinsic's: llvmlite's module cannot hold text, so the kernel module only declares it while
emitting, and :func:`appendix` turns the declarations into the definitions (with the ``declare``
lines of the LLVM intrinsics they call that the module lacks) when the module becomes text.  The
functions are ``internal`` and ``alwaysinline``: O3 inlines each call and keeps the accumulator
tile in registers across the reduction loop around it.

A target that is not known to have every feature an intrinsic needs is refused before LLVM sees
the code: LLVM aborts the process on an instruction it cannot select (and a user's intrinsic is
compiled alone first, :mod:`.intrin_check`, in case its declared features are wrong).
"""
from __future__ import annotations

from llvmlite import ir

from ..errors import BuildError, InternalError
from ..ir import stmt as L
from .intrin_check import check_intrinsic
from . import amx
from .intrinsics import SHIPPED, VARIANTS
from .irtypes import I64, PTR, VOID, add_string_attr, mem_type
from .memory import element_ptr


def emit_intrinsic_call(em, s: L.IntrinsicCall):
    """Emit *s* at the builder's position of FunctionEmitter *em*."""
    if em.vec is not None:
        raise InternalError(f"codegen: tensor intrinsic {s.symbol} inside a vectorized loop; "
                            "tensorize and the vectorize pass should have refused it")
    _check_features(em.k.target, s)
    check_intrinsic(s, em.k.target, trusted=_shipped(s))
    strides = s.strides or ((),) * len(s.buffers)
    fn = em.k.module.globals.get(s.symbol)
    if fn is None:
        fnty = ir.FunctionType(VOID, [t for st in strides for t in [PTR] + [I64] * len(st)])
        fn = ir.Function(em.k.module, fnty, name=s.symbol)
        em.k.intrinsics[s.symbol] = s
    if amx.uses_amx(s.features):
        # a call between tile instructions makes LLVM reload the tile configuration after it
        # (ldtilecfg, slow): keep the accumulator's zeroing a loop of stores, not a memset call
        add_string_attr(em.b.function, "no-builtin-memset", "true")
        em.tiles = True
    args = []
    for buf, ix, st in zip(s.buffers, s.indices, strides):
        args.append(element_ptr(em.b, em.buffer_ptr(buf), em.expr(ix), mem_type(buf.dtype)))
        args += [ir.Constant(I64, x) for x in st]
    em.b.call(fn, args)


def _check_features(target, s):
    missing = [f for f in s.features if not target.has_feature(f)]
    if missing:
        name = s.symbol.removeprefix("einloop.tensorize.")
        raise BuildError(
            f"tensor intrinsic {name} needs the CPU feature(s) {', '.join(missing)}, which target "
            f"{target} does not have (or einloop cannot tell); build for a target that has them "
            f"(e.g. 'llvm -mcpu=NAME' of such a CPU, or 'llvm -mattr=+{missing[0]}'), or "
            "tensorize with an intrinsic of this target's (einloop.codegen.intrinsics."
            "for_target)")


def _shipped(s) -> bool:
    """Is *s* a call of one of einloop's own intrinsics (whose features are known right)?"""
    return any((s.symbol, s.definition) in ((t.symbol, t.definition),
                                            (t.reset_symbol, t.reset_definition))
               for t in SHIPPED + VARIANTS + amx.SHIPPED)


def appendix(module: ir.Module, calls: dict) -> str:
    """Remove from *module* the declarations of the intrinsics' functions (*calls*: symbol ->
    an IntrinsicCall) and return the text that defines them, to go after the module's."""
    if not calls:
        return ""
    for symbol in calls:
        module.globals.pop(symbol, None)
    declared = set(module.globals)
    lines = []
    for s in calls.values():
        for line in s.declarations:
            name = line.split("@", 1)[1].split("(", 1)[0].strip().strip('"')
            if name in declared:
                continue
            declared.add(name)
            lines.append(line)
        lines.append(s.definition)
    return "\n" + "\n".join(lines) + "\n"
