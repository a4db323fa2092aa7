"""einloop's AMX tensor intrinsics: ``tdpbusd`` (u8 x s8 -> s32) and ``tdpbf16ps`` (bf16 x bf16
-> f32) on Intel's tile registers (Sapphire Rapids and later).

An AMX tile register holds 16 rows of 64 bytes; ``tdpbusd`` multiplies a 16 x 64 u8 tile of A
by a 16 x 64 s8 tile of B laid out in groups of four (row ``k/4`` holds, per output column,
its four k values) and adds into a 16 x 16 int32 tile of C: 16 K x 16 K = 16384 multiply-adds
per instruction.  ``tdpbf16ps`` does the same with bfloat16 pairs into float32.

Speed decides the semantics.  A call that loaded and stored its C tile around a single
``tdpbusd`` would spend more time moving C than computing, so each intrinsic here covers a
*2 x 2 block* of 16 x 16 accumulators (a 32 x 32 output tile) over a K depth of *ksteps*
64-byte steps: its body loads the four C tiles once, then per step two A tiles and two B tiles
(each used twice) and four multiply-adds, and stores C once (the reset form zeroes the C tiles
in their registers instead of loading them), straight-line SSA on LLVM's
``x86_amx`` type (4 accumulators + 2 + 2 operands = the 8 tile registers).  LLVM inserts the
tile configuration (``ldtilecfg``) in each function that uses tiles, from the constant shapes.

The intrinsics are *strided* (:class:`~einloop.te.tensor_intrin.TensorIntrin`): each tile is
16 rows of 64 contiguous bytes wherever its rows lie, since a tile load takes a row stride, so
the operands are declared by tile (two row tiles, two column tiles, *ksteps* K steps) and the
call gets each operand's strides.  With ``g`` values of K per 4-byte group (4 int8, 2 bf16) and
``E = 16 g`` values per 64-byte row:

- int8 (``x86.amx.u8s8_i32_32x32xK``, K = 64 * ksteps)::

      C[ti, ii, tj, jj] += sum_{ks, kq, gg} int32(A[ti, ii, ks, 4*kq + gg])
                                            * int32(B[ks, kq, tj, 4*jj + gg])
      A: uint8 [2, 16, ksteps, 64]   B: int8 [ksteps, 16, 2, 64]   C: int32 [2, 16, 2, 16]

  output row ``16 ti + ii``, column ``16 tj + jj``, K index ``64 ks + 4 kq + gg``: a B row
  holds, for 16 columns, their four K values side by side (the VNNI layout);

- bf16 (``x86.amx.bf16_f32_32x32xK``, K = 32 * ksteps): the same with pairs,
  ``A: bfloat16 [2, 16, ksteps, 32]``, ``B: bfloat16 [ksteps, 16, 2, 32]``, ``C: float32``; the
  products and sums are float32 (the instruction's rounding of its two-term sums may differ
  from a sequential float32 sum in the last bits, as any reordering of a float sum does).

so a GEMM tensorizes a 32 x 32 output block split into tiles of 16 and its K loop split into
``(ksteps, 16, g)``, reading A where each row's 64-byte pieces are contiguous (a row-major A as
it is, or packed so that each 16 x 64-byte tile is dense) and B packed in 16-column panels
grouped by ``g`` along K.  The int8 one is exact (int32 wraps as NumPy's does; ``tdpbusd`` does
not saturate).

Running AMX code needs the Linux permission request :func:`einloop.runtime.amx.request`
(made when a kernel that uses these intrinsics is loaded).
"""
from __future__ import annotations

import re

from .. import te
from ..errors import BuildError
from ..ir import dtypes
from ..runtime import amx as amx_runtime
from ..te.tensor_intrin import TensorIntrin
from .target import Target

#: the rows and columns of output tiles an AMX intrinsic covers (2 x 2 tiles of 16 x 16)
ROWS = COLS = 32
#: K depths offered, in 64-byte steps
KSTEPS = (1, 2, 4, 8, 16)

_DECLARE = (
    "declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)\n"
    "declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)\n"
    "declare x86_amx @llvm.x86.tilezero.internal(i16, i16)\n"
    "declare x86_amx @llvm.x86.{op}.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)")

#: (LLVM intrinsic, features, A/B dtype, C dtype, elements per 4 bytes)
_KINDS = {
    "u8s8": ("tdpbusd", ("amx-tile", "amx-int8"), ("uint8", "int8"), "int32", 4),
    "bf16": ("tdpbf16ps", ("amx-tile", "amx-bf16"), ("bfloat16", "bfloat16"), "float32", 2),
}


def _body(op, ksteps, sizes, reset=False) -> str:
    """LLVM lines: C's 2 x 2 tiles loaded (*reset*: zeroed in the tile registers), *ksteps*
    steps of 2 A + 2 B tiles and 4 *op*s, C stored.  *sizes*: the bytes of an element of C, A
    and B; the tiles' byte offsets and row strides come from the strides parameters."""
    lines = []
    n = [0]

    def offset(terms, size):
        """An i64 value: the bytes of sum(coefficient * stride parameter) elements."""
        value = None
        for c, p in terms:
            if not c:
                continue
            n[0] += 1
            lines.append(f"  %t{n[0]} = mul i64 %{p}, {c * size}")
            if value is not None:
                lines.append(f"  %t{n[0]}.s = add i64 {value}, %t{n[0]}")
                value = f"%t{n[0]}.s"
            else:
                value = f"%t{n[0]}"
        return "0" if value is None else value

    def load(name, base, terms, row, size, zero=False):
        """Tile *name*: its pointer and row stride, then the tile loaded (*zero*: zeroed in
        its register instead, the pointer and stride kept for the store)."""
        lines.append(f"  %{name}.p = getelementptr i8, ptr %{base}, i64 {offset(terms, size)}")
        lines.append(f"  %{name}.rs = mul i64 %{base}.s{row}, {size}")
        lines.append(f"  %{name} = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)"
                     if zero else f"  %{name} = call x86_amx @llvm.x86.tileloadd64.internal("
                     f"i16 16, i16 64, ptr %{name}.p, i64 %{name}.rs)")

    c_size, a_size, b_size = sizes
    for r in range(2):
        for c in range(2):
            load(f"c{r}{c}.0", "out", [(r, "out.s0"), (c, "out.s2")], 1, c_size, zero=reset)
    for s in range(ksteps):
        for r in range(2):
            load(f"a{r}.{s}", "in0", [(r, "in0.s0"), (s, "in0.s2")], 1, a_size)
        for c in range(2):
            load(f"b{c}.{s}", "in1", [(s, "in1.s0"), (c, "in1.s2")], 1, b_size)
        for r in range(2):
            for c in range(2):
                lines.append(f"  %c{r}{c}.{s + 1} = call x86_amx @llvm.x86.{op}.internal(i16 16, "
                             f"i16 64, i16 64, x86_amx %c{r}{c}.{s}, x86_amx %a{r}.{s}, "
                             f"x86_amx %b{c}.{s})")
    for r in range(2):
        for c in range(2):
            lines.append(f"  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, "
                         f"ptr %c{r}{c}.0.p, i64 %c{r}{c}.0.rs, x86_amx %c{r}{c}.{ksteps})")
    lines.append("  ret void")
    return "\n".join(lines) + "\n"


def _declare(kind, ksteps) -> TensorIntrin:
    op, features, (a_dtype, b_dtype), c_dtype, g = _KINDS[kind]
    row = 16 * g                                  # K values in a 64-byte row
    A = te.placeholder((2, 16, ksteps, row), a_dtype, name="A")
    B = te.placeholder((ksteps, 16, 2, row), b_dtype, name="B")
    ks = te.reduce_axis((0, ksteps), name="ks")
    kq = te.reduce_axis((0, 16), name="kq")
    gg = te.reduce_axis((0, g), name="gg")
    C = te.compute((2, 16, 2, 16), lambda ti, ii, tj, jj: te.sum(
        A[ti, ii, ks, kq * g + gg].astype(c_dtype) * B[ks, kq, tj, jj * g + gg].astype(c_dtype),
        axis=[ks, kq, gg]), name="C")
    sizes = tuple(dtypes.bits(t) // 8 for t in (c_dtype, a_dtype, b_dtype))
    return TensorIntrin(f"x86.amx.{kind}_{c_dtype[0]}{c_dtype[-2:]}_32x32x{row * ksteps}", C,
                        _body(op, ksteps, sizes), _DECLARE.format(op=op), features,
                        reset_body=_body(op, ksteps, sizes, reset=True), strides=True)


#: the int8 intrinsics by K depth (elements): {64: ..., 128: ..., ..., 1024: ...}
U8S8 = {64 * n: _declare("u8s8", n) for n in KSTEPS}
#: the bf16 intrinsics by K depth (elements): {32: ..., ..., 512: ...}
BF16 = {32 * n: _declare("bf16", n) for n in KSTEPS}
#: every AMX intrinsic einloop ships
SHIPPED = tuple(U8S8.values()) + tuple(BF16.values())
#: the LLVM features any of them needs
FEATURES = ("amx-tile", "amx-int8", "amx-bf16")


def k_depth(intrin) -> int:
    """The K depth (elements) one call of AMX intrinsic *intrin* reduces over."""
    n = 1
    for iv in intrin.op.reduce_axis:
        n *= iv.extent
    return n


def group(intrin) -> int:
    """Elements of K per 4-byte group in B's layout: 4 for int8, 2 for bf16."""
    return intrin.op.reduce_axis[-1].extent


def is_amx(intrin) -> bool:
    """Is *intrin* one of einloop's AMX intrinsics?"""
    return any(intrin is t for t in SHIPPED)


def uses_amx(features) -> bool:
    """Does code needing LLVM *features* (names, or a ``+a,-b`` string) use AMX tiles?"""
    if isinstance(features, str):
        features = [f[1:] for f in features.split(",") if f.startswith("+")]
    return any(f.startswith("amx-") for f in features)


#: LLVM IR that uses tiles: the tile type, or an intrinsic of the tile unit (names LLVM 22 has)
_TILE_IR = re.compile(r"\bx86_amx\b|@llvm\.x86\.(?:tile|ldtilecfg|sttilecfg|tdp|tcmm|tcvt|ttdp|"
                      r"ttrans|tmm)")
#: the multiply instructions of each AMX unit, as LLVM's intrinsics name them
_UNITS = (("amx-int8", re.compile(r"@llvm\.x86\.t\w*dpb[su][su]d")),
          ("amx-bf16", re.compile(r"@llvm\.x86\.t\w*dpbf16ps")))


def features_used(text) -> tuple:
    """The AMX features the kernel of LLVM IR *text* runs (``amx-tile`` and the units it
    multiplies with), ``()`` when it uses no tiles: what its library must record and what
    loading it must get permission for."""
    if not _TILE_IR.search(text):
        return ()
    return ("amx-tile",) + tuple(f for f, pattern in _UNITS if pattern.search(text))


def require(text, name):
    """Before kernel *name* (LLVM IR *text*) is loaded in this process: nothing when it uses no
    AMX, else Linux's permission (asked once per process), or a BuildError saying why this
    machine cannot run it (the CPU lacks an AMX unit it uses, or the kernel refuses)."""
    used = features_used(text)
    if not used:
        return
    missing = amx_runtime.missing_units(used)
    why = (f"this CPU lacks {', '.join(missing)}" if missing else amx_runtime.request())
    if why is not None:
        raise BuildError(f"kernel {name} uses AMX tile instructions ({', '.join(used)}), which "
                         f"cannot run in this process: {why}; build it on a machine with AMX "
                         "(Sapphire Rapids or later, Linux 5.16 or later), or tensorize with an "
                         "intrinsic of this CPU's (einloop.codegen.intrinsics.for_target)")


def for_target(target="llvm", kind="u8s8") -> dict:
    """The AMX intrinsics of *kind* (``"u8s8"`` or ``"bf16"``) by K depth, when *target* is
    known to have the features; else ``{}``."""
    target = Target.parse(target) if isinstance(target, str) else target
    table = U8S8 if kind == "u8s8" else BF16
    features = _KINDS[kind][1]
    return dict(table) if all(target.has_feature(f) for f in features) else {}
