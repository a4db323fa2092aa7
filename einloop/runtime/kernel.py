"""The callable users get back: argument checks, temp buffers, threads, sources, timing.

A :class:`Kernel` is native code at an address, called through ctypes with the C ABI every einloop
kernel has: ``int32 entry(void *arg0, ..., void *temp0, ..., int64 var0, ..., int32 nthreads)``,
returning nonzero when a buffer the kernel mallocs could not be allocated.  A shape may name
symbolic variables (``float32[n, 1024]``): each call binds every variable from the first argument
and dimension that has it, checks its other occurrences, sizes the temporaries from the values
and passes them, one int64 per variable; a signature without variables has no int64
parameters.  It knows its buffers from a :class:`~.signature.Signature` and keeps an *owner*
object alive (the JIT engine, or a loaded library) for as long as the code may run; it never
sees the compiler.

Calls go through ctypes, which releases the GIL for the duration of the kernel.  Everything
that can be decided once (expected dtypes and shapes, which arguments are written, the ctypes
prototype) is decided when the Kernel is made, to keep the per-call overhead small: a call with
fitting NumPy arrays runs a check written out for the signature (:mod:`.fastcall`), anything
else the general path here.

What a call accepts: one NumPy array per parameter, of exactly its dtype (native byte order),
shape, C order and aligned; the arrays the kernel writes must be writeable and share no memory
with any other argument (inputs may share memory with each other).  Any other object exporting
DLPack (``__dlpack__``: PyTorch, JAX, CuPy...) or the array interface is taken without a copy, on
a slower path that leaves the NumPy one untouched: it is viewed as NumPy (``np.from_dlpack(...,
copy=False)``; a producer of the legacy protocol is read from its DLTensor, the capsule held
until the call returns) and checked the same way; memory on another device than the CPU is refused, as is a strided tensor
(never copied silently).
Anything else raises :class:`ArgumentError` before the kernel runs.  Memory the call cannot get
(a temporary buffer, or a local buffer the kernel mallocs) raises :class:`KernelRuntimeError`.
"""
from __future__ import annotations

import ctypes
import enum
import math
import sys
from types import MappingProxyType

import numpy as np

from ..errors import ArgumentError, BuildError, InternalError, KernelRuntimeError
from .allocator import warm_allocator_once
from .fastcall import make_fast_call
from .signature import Signature, numpy_dtype
from .threads import team_threads
from .timing import Timing, time_callable
from .workspace import ALIGNMENT, WorkspacePool, allocate_workspace


class SourceFormat(enum.Enum):
    """The texts a kernel can show of itself (``Kernel.get_source``)."""
    LLVM = "llvm"                 # optimised LLVM IR
    LLVM_UNOPT = "llvm-unopt"     # LLVM IR as emitted
    ASM = "asm"                   # assembly
    IR = "ir"                     # einloop's loop IR


SOURCE_FORMATS = tuple(f.value for f in SourceFormat)


def _probe_data_offset():
    """Offset of the data pointer in NumPy's array object, if reading it there is verified."""
    probe = np.arange(4, dtype=np.int32)[1:]
    off = 2 * ctypes.sizeof(ctypes.c_void_p)       # PyObject_HEAD, then ``char *data``
    try:
        ok = ctypes.c_void_p.from_address(id(probe) + off).value == probe.ctypes.data
    except (ValueError, OverflowError):
        ok = False
    return off if ok else None


_DATA_OFFSET = _probe_data_offset()
_from_address = ctypes.c_void_p.from_address


_DL_CPU = 1
_DL_DEVICES = {2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
               10: "ROCm", 11: "ROCm host", 12: "ExtDev", 13: "CUDA managed", 14: "oneAPI",
               15: "WebGPU", 16: "Hexagon", 17: "MAIA"}


def _foreign_view(a, where):
    """A zero-copy NumPy view of *a* through DLPack or the array interface, or None when *a*
    exports neither; raises ArgumentError for memory on another device than the CPU."""
    if hasattr(type(a), "__dlpack__"):
        try:
            kind, index = a.__dlpack_device__()
        except Exception as exc:        # noqa: BLE001  (any failure of foreign code)
            raise ArgumentError(f"{where}: {type(a).__name__}.__dlpack_device__() failed: "
                                f"{exc}") from None
        if kind != _DL_CPU:
            device = _DL_DEVICES.get(kind, "non-CPU")
            raise ArgumentError(f"{where}: the {type(a).__name__} lives on {device} device "
                                f"{index} (DLPack device type {kind}); einloop kernels run on "
                                "the CPU: pass a copy in host memory (e.g. tensor.cpu())")
        try:
            return np.from_dlpack(a)
        except (BufferError, TypeError, ValueError, RuntimeError) as exc:
            raise ArgumentError(f"{where}: cannot view the {type(a).__name__} as an array "
                                f"through DLPack: {exc}") from None
    if hasattr(a, "__array_interface__") and not isinstance(a, np.generic):   # not a scalar
        return np.asarray(a)
    if hasattr(a, "__cuda_array_interface__"):
        raise ArgumentError(f"{where}: the {type(a).__name__} lives on a CUDA device; einloop "
                            "kernels run on the CPU: pass a copy in host memory")
    return None


def _dlpack_view(a):
    """NumPy's view of DLPack-exporting *a* under the versioned protocol, never a copy (NumPy's
    C import costs ~0.6 us above the producer's ``__dlpack__``; reading the DLTensor through
    ctypes ~3 us), or None: a legacy producer (no ``max_version``/``copy`` keywords), memory
    on another device, a dtype NumPy lacks (``_convert`` then tries the rest, and says why)."""
    try:
        return np.from_dlpack(a, copy=False)
    except Exception:           # noqa: BLE001  (foreign code; _convert reports it)
        return None


def _fits(p, a) -> bool:
    """Does array *a* meet parameter *p*'s checks (those :mod:`.fastcall` writes out)?  The
    flag bits required (C order, aligned, writeable if written) in one integer test.  Symbolic
    dimensions are left to the binding (``Kernel._bind``)."""
    return a.dtype == p.dtype and p.matches(a.shape) and a.flags.num & p.flags == p.flags


def _dtype_fix(want, got, via):
    """How to turn an array of dtype *got* into one of *want* (NumPy has no bfloat16: it is
    ml_dtypes'; a 16-bit integer array may hold bfloat16 bits, which a view reinterprets)."""
    if via is not None:
        return f"convert with a {want.name} copy, e.g. tensor.to(torch.{want.name})"
    if want.name != "bfloat16":
        return f"convert with .astype(np.{want.name})"
    fix = "convert with .astype(ml_dtypes.bfloat16)"
    if got.itemsize == 2 and got.kind in "iu":
        fix += "; if it holds bfloat16 bits, reinterpret it with .view(ml_dtypes.bfloat16)"
    return fix


def _shape_text(shape) -> str:
    """``(n, 1024)``: a shape as Python writes a tuple, variables by name."""
    return f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"


def _c_strides(shape) -> list:
    """C-order strides, in elements, of *shape*."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def _data_ptr(a):
    """Address of *a*'s first element; ``a.ctypes.data`` costs ~4x more per call."""
    if _DATA_OFFSET is None:
        return a.ctypes.data
    return ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value or 0


# NumPy's flag bits (``ndarray.flags.num``): one integer test instead of three flag lookups.
_C_CONTIGUOUS, _ALIGNED, _WRITEABLE = 0x1, 0x100, 0x400

# DLPack (dlpack.h, ABI of the legacy "dltensor" capsule): a DLManagedTensor starts with its
# DLTensor: data, device (int32 type, int32 id), int32 ndim, dtype (uint8 code, uint8 bits,
# uint16 lanes), int64 *shape, int64 *strides, uint64 byte_offset.  Read as six 64-bit words in
# one ctypes slice (cheaper than Structure fields or string_at): on a little-endian machine
# word 1's low half is the device type, word 2 is ndim | dtype << 32.
_DL_HEADER = ctypes.c_uint64 * 6
_DL_CODES = {"i": 0, "u": 1, "f": 2} if sys.byteorder == "little" else {}
_DL_BFLOAT = 4                  # kDLBfloat: PyTorch's and JAX's bfloat16 tensors
_CAPSULE_NAME = b"dltensor"
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)


def _dl_code(dtype):
    """DLPack's type code of NumPy *dtype* (None: no fast path for it)."""
    if not dtype.isnative or not _DL_CODES:
        return None
    return _DL_BFLOAT if dtype.name == "bfloat16" else _DL_CODES.get(dtype.kind)


def _dlpack_pointer(p, a):
    """``(address, capsule, shape)`` of DLPack-exporting *a* when its DLTensor fits *p* exactly
    (CPU, dtype, shape, C-contiguous strides, aligned; a symbolic dimension fits any extent), else
    None (then ``_convert`` decides).  For producers of the legacy protocol, whose capsules NumPy
    imports read-only.

    The capsule is not consumed (not renamed ``used_dltensor``): it keeps owning the managed
    tensor, and its destructor calls the producer's deleter when the last reference goes, which
    the caller keeps until the kernel has returned.
    """
    if p.dl_word is None:
        return None
    try:
        # no __dlpack_device__() first (2.5 us for a torch tensor): a CPU consumer passes no
        # stream, and the DLTensor names its device (checked below; elsewhere: _convert's
        # error, which asks __dlpack_device__ for the message)
        capsule = a.__dlpack__()
        tensor = _capsule_pointer(capsule, _CAPSULE_NAME)
    except Exception:           # noqa: BLE001  (foreign code; _convert reports it)
        return None
    data, device, word, shape, strides, offset = _DL_HEADER.from_address(tensor)[:]
    if device & 0xFFFFFFFF != _DL_CPU or word != p.dl_word:
        return None
    found = p.shape
    if p.symbolic:              # ndim >= 1: word holds ndim
        if not shape:
            return None
        found = tuple(p.dl_dims.from_address(shape)[:])
        if not p.matches(found) or strides and \
                p.dl_dims.from_address(strides)[:] != _c_strides(found):
            return None
    elif p.dl_dims is not None:
        if not shape:                           # malformed: never read address 0
            return None
        if strides == shape + p.dl_size:        # strides right after shape (NumPy does that)
            if p.dl_both.from_address(shape)[:] != p.dl_shape_strides:
                return None
        elif (p.dl_dims.from_address(shape)[:] != p.dl_shape
              or strides and p.dl_dims.from_address(strides)[:] != p.dl_strides):
            return None
    address = data + offset
    if address % p.dtype.itemsize:
        return None
    return address, capsule, found


class _Param:
    """A BufferSpec resolved for fast checks: position, NumPy dtype, byte size.

    A symbolic shape keeps its variables' names in ``shape``; ``var_axes`` gives each one's
    axis and index in the signature's vars, ``unit`` the bytes per unit of their product
    (``nbytes`` is None: :meth:`nbytes_for` sizes a call's binding)."""
    __slots__ = ("pos", "name", "dtype", "shape", "written", "nbytes", "flags", "dl_word",
                 "dl_dims", "dl_shape", "dl_strides", "dl_size", "dl_both", "dl_shape_strides",
                 "symbolic", "var_axes", "static_axes", "unit")

    def __init__(self, pos, spec, written, var_index=None):
        self.pos, self.name, self.written = pos, spec.name, written
        self.dtype = numpy_dtype(spec.dtype)
        self.shape = spec.shape
        self.var_axes = tuple((axis, var_index[d]) for axis, d in enumerate(self.shape)
                              if isinstance(d, str))
        self.static_axes = tuple((axis, d) for axis, d in enumerate(self.shape)
                                 if not isinstance(d, str))
        self.symbolic = bool(self.var_axes)
        self.unit = int(math.prod(d for _, d in self.static_axes)) * self.dtype.itemsize
        self.nbytes = None if self.symbolic else self.unit
        self.flags = _C_CONTIGUOUS | _ALIGNED | (_WRITEABLE if written else 0)
        # what a fitting DLTensor holds: ndim | dtype (code, bits, 1 lane) << 32 (None: no fast
        # path for this dtype), the shape and C strides (in elements) as lists of int64
        ndim = len(self.shape)
        code = _dl_code(self.dtype)
        self.dl_word = (None if code is None
                        else ndim | (code | self.dtype.itemsize * 8 << 8 | 1 << 16) << 32)
        self.dl_dims = ctypes.c_int64 * ndim if ndim else None
        self.dl_size, self.dl_both = 8 * ndim, ctypes.c_int64 * (2 * ndim)
        if self.symbolic:       # read per call (_dlpack_pointer)
            self.dl_shape = self.dl_strides = self.dl_shape_strides = None
        else:
            self.dl_shape, self.dl_strides = list(self.shape), _c_strides(self.shape)
            self.dl_shape_strides = self.dl_shape + self.dl_strides

    def matches(self, shape) -> bool:
        """Does *shape* have this parameter's rank and static extents?"""
        if not self.symbolic:
            return shape == self.shape
        return len(shape) == len(self.shape) and all(shape[a] == d for a, d in self.static_axes)

    def shape_for(self, values) -> tuple:
        """The concrete shape under the variables' *values* (in the signature's order)."""
        if not self.symbolic:
            return self.shape
        shape = list(self.shape)
        for axis, i in self.var_axes:
            shape[axis] = values[i]
        return tuple(shape)

    def nbytes_for(self, values) -> int:
        """The byte size under the variables' *values*."""
        if not self.symbolic:
            return self.nbytes
        return self.unit * math.prod(values[i] for _, i in self.var_axes)

    def describe(self):
        return f"{self.dtype.name}[{', '.join(map(str, self.shape))}]"


class Kernel:
    """A compiled kernel: ``kernel(*arrays)`` runs it on C-contiguous NumPy arrays in place.

    Parameters
    ----------
    name : str
        The kernel's name, for messages.
    signature : Signature
        Its arguments (call order), temporaries, written arguments and symbolic variables.
    address : int
        Address of its native entry point.
    owner : object
        Whatever keeps the code at *address* alive; held as long as the Kernel.
    parallel : bool
        Does it run thread teams (then calls pass ``num_threads``, else 1)?
    sources : mapping of SourceFormat (or its value) to str or a function returning str
        What ``get_source`` can show; functions are called on request.
    metadata : mapping, optional
        Anything else worth keeping (the target, versions); read-only as ``kernel.metadata``.
    """

    def __init__(self, name, signature: Signature, address, owner, *, parallel=False,
                 sources=None, metadata=None):
        if not address:
            raise InternalError(f"kernel {name}: no native code (entry address 0)")
        self.name = name
        self.signature = signature
        self.owner = owner
        self._address = address
        self.metadata = MappingProxyType(dict(metadata or {}))
        self._sources = {SourceFormat(f): text for f, text in (sources or {}).items()}
        written = signature.written
        self._vars = signature.vars
        var_index = {v.name: i for i, v in enumerate(self._vars)}
        self._params = tuple(_Param(i, b, w, var_index)
                             for i, (b, w) in enumerate(zip(signature.args, written)))
        self._written = tuple(p for p in self._params if p.written)
        # (written p, other q) pairs whose byte ranges must not overlap
        self._pairs = tuple((p, q) for p in self._written for q in self._params if q is not p)
        self._temps = tuple(_Param(i, t, False, var_index) for i, t in enumerate(signature.temps))
        self._workspaces = WorkspacePool()     # the blocks holding the temporaries of a call
        self._parallel = bool(parallel)
        n = len(self._params) + len(self._temps)
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * n),
                                 *([ctypes.c_int64] * len(self._vars)), ctypes.c_int32)
        self._cfunc = proto(address)
        self._num_threads = None
        self._fast_call = make_fast_call(self, self._params, self._pairs, bool(self._temps),
                                         self._cfunc, self._parallel, _DATA_OFFSET, self._vars)
        warm_allocator_once()

    @property
    def parallel(self) -> bool:
        """Does the kernel run thread teams?"""
        return self._parallel

    @property
    def address(self) -> int:
        """The address of its native entry point (valid as long as this Kernel lives):
        ``int32 f(void *arg..., void *temp..., int64 var..., int32 threads)``, nonzero when a
        buffer it mallocs could not be allocated."""
        return self._address

    @property
    def temp_nbytes(self) -> tuple:
        """The byte size of each temporary buffer a call passes after the arguments (None
        for one sized by a size variable)."""
        return tuple(t.nbytes for t in self._temps)

    @property
    def has_size_variables(self) -> bool:
        """Does a call bind size variables (then only its checked call can run it)?"""
        return bool(self._vars)

    # threads ---------------------------------------------------------------------------------
    @property
    def num_threads(self) -> int:
        """Threads for parallel loops: set per kernel, else ``EINLOOP_NUM_THREADS``/CPU count (1 in
        a forked child, see :func:`~.threads.team_threads`)."""
        return team_threads(self._num_threads)

    @num_threads.setter
    def num_threads(self, n):
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ArgumentError(f"num_threads must be a positive int or None, got {n!r}")
        self._num_threads = n

    # calling ---------------------------------------------------------------------------------
    def __call__(self, *arrays):
        return self._fast_call(arrays)

    def _call_general(self, arrays):
        """A call with any arguments: checks each (DLPack, array interface, the errors)."""
        keep = []                       # DLPack capsules / views: alive until the call returns
        ptrs, values = self._check(arrays, keep)
        self._invoke(ptrs, values)

    def call_addresses(self, addresses):
        """Run the kernel on raw data addresses, one per argument in order, with nothing
        checked: for a caller that has checked every argument itself (its dtype and shape
        are the kernel's, its memory C-contiguous and aligned to its element, and nothing the
        kernel writes overlaps another argument), as ``einloop.torch`` does for tensors of a
        signature it built the kernel for and outputs it allocated.  It spares the NumPy view
        and the checks of ``__call__``, which a model's custom ops pay on every kernel of every
        step.  Not for a kernel with size variables (their values are not given here)."""
        if self._vars:
            raise ArgumentError(f"kernel {self.name} has size variables; call it with arrays")
        self._invoke(list(addresses))

    def _invoke(self, ptrs, values=()):
        """Run the native code on the argument addresses *ptrs* (a list it extends) and the
        variables' *values*: the temporaries in a block taken for the call and given back
        after it, then the values and the thread count."""
        block = None
        if self._temps:
            block, temps = self._take_temps(values)
            ptrs += temps
        ptrs += values
        ptrs.append(team_threads(self._num_threads) if self._parallel else 1)
        failed = self._cfunc(*ptrs)
        if block is not None:
            self._give_temps(block)
        if failed:
            self.out_of_memory()

    def _temp_offsets(self, values=()):
        """Where each temporary lies in a call's block, and the block's size, in bytes, under
        the variables' *values*: one after the other, each at a multiple of ALIGNMENT."""
        offsets, end = [], 0
        for t in self._temps:
            offsets.append(end)
            end += -(-t.nbytes_for(values) // ALIGNMENT) * ALIGNMENT
        return offsets, end

    def _take_temps(self, values=()):
        """A block holding the temporaries of one call (sized by the variables' *values*) and
        their addresses; the caller gives the block back (``_give_temps``) once the call has
        returned, and later calls reuse it (:mod:`.workspace`)."""
        offsets, nbytes = self._temp_offsets(values)
        try:
            block = self._workspaces.take(nbytes)
        except (MemoryError, ValueError) as exc:
            raise self._no_memory_for_temps(values, exc) from None
        return block, [block.address + o for o in offsets]

    def _give_temps(self, block):
        self._workspaces.give(block)

    def _allocate_temps(self, values=()):
        """The temporaries of one call as NumPy arrays of their own, in a block not kept for
        later calls (for :meth:`time`, which holds them through all its calls)."""
        offsets, nbytes = self._temp_offsets(values)
        try:
            block = allocate_workspace(nbytes)
        except (MemoryError, ValueError) as exc:
            raise self._no_memory_for_temps(values, exc) from None
        start = block.address - block.array.ctypes.data
        return [block.array[start + o:start + o + t.nbytes_for(values)].view(t.dtype)
                .reshape(t.shape_for(values)) for t, o in zip(self._temps, offsets)]

    def _no_memory_for_temps(self, values, exc):
        sizes = []
        for t in self._temps:
            shape = t.shape_for(values)
            size = t.describe() if not t.symbolic else \
                f"{t.describe()} = {t.dtype.name}[{', '.join(map(str, shape))}]"
            sizes.append(f"{t.name} ({size}, {t.nbytes_for(values)} bytes)")
        which = "buffer" if len(sizes) == 1 else "buffers"
        return KernelRuntimeError(
            f"kernel {self.name}: cannot allocate its temporary {which} {', '.join(sizes)}: "
            f"{exc}; schedule it so that only a region is kept (compute_at inside a loop of "
            "its consumer)")

    def release_workspace(self):
        """Free the memory kept for the temporaries of later calls (the next call allocates
        it again)."""
        self._workspaces.clear()

    def out_of_memory(self):
        """Raise the error of a call whose native code returned nonzero (a buffer it mallocs
        could not be allocated)."""
        raise KernelRuntimeError(f"kernel {self.name}: a local buffer could not be allocated "
                                 "(malloc failed: out of memory or over the address-space "
                                 "limit); free memory, or compute_at the stage that owns it at "
                                 "an inner loop so that its region is smaller")

    def _check(self, arrays, keep):
        """Validate the arguments; return their data pointers (a new list) and the values of the
        signature's variables (a list, in its order).  What must stay alive while the kernel
        runs (DLPack capsules, views) is appended to *keep*."""
        params = self._params
        if len(arrays) != len(params):
            raise ArgumentError(f"kernel {self.name} takes {len(params)} arrays "
                                f"({self._shapes()}), got {len(arrays)}")
        ptrs = []
        off = _DATA_OFFSET
        bound = [None] * len(self._vars)        # per variable: (value, param, axis)
        for p, a in zip(params, arrays):
            # the fast path: a NumPy array of the exact dtype and shape, C order, aligned,
            # writeable if written (p.flags: the flag bits required)
            if (not p.symbolic and isinstance(a, np.ndarray)
                    and (a.dtype is p.dtype or a.dtype == p.dtype)
                    and a.shape == p.shape and a.flags.num & p.flags == p.flags):
                ptrs.append((_from_address(id(a) + off).value or 0) if off is not None
                            else a.ctypes.data)
                continue
            if p.symbolic and isinstance(a, np.ndarray) and _fits(p, a):
                ptr, shape = _data_ptr(a), a.shape
            else:
                ptr, shape = self._convert(p, a, keep)
            ptrs.append(ptr)
            if p.symbolic:
                self._bind(p, shape, bound)
        values = [b[0] for b in bound]
        # contiguous arrays of known size: overlap is a comparison of byte ranges
        for p, q in self._pairs:
            lo, other = ptrs[p.pos], ptrs[q.pos]
            if other < lo + p.nbytes_for(values) and lo < other + q.nbytes_for(values):
                raise ArgumentError(f"{self._where(p)}: the kernel writes this array but it "
                                    f"shares memory with argument {q.pos} ({q.name}); pass "
                                    "a separate output array")
        return ptrs, values

    def _bind(self, p, shape, bound):
        """Bind the variables of *p*'s dimensions that are still free to *shape*'s extents (in
        *bound*); check the others; ArgumentError naming the dimension and the values."""
        for axis, i in p.var_axes:
            got, var = shape[axis], self._vars[i]
            if bound[i] is None:
                if got < var.min_value:
                    why = ("is a size variable (at least 1)" if var.min_value == 1
                           else f"must be at least {var.min_value}")
                    raise ArgumentError(f"{self._where(p)}: dimension {axis} gives {var.name} "
                                        f"= {got}, but {var.name} {why}; the shapes are "
                                        f"{self._shapes()}")
                bound[i] = (got, p, axis)
            elif got != bound[i][0]:
                value, q, q_axis = bound[i]
                others = ", ".join(f"{v.name} = {b[0]}" for v, b in zip(self._vars, bound)
                                   if b is not None and v is not var)
                raise ArgumentError(
                    f"{self._where(p)}: dimension {axis} is {got}, but {var.name} = {value} "
                    f"(from argument {q.pos} ({q.name}), dimension {q_axis})"
                    f"{f'; also bound: {others}' if others else ''}; the shapes are "
                    f"{self._shapes()}")

    def _shapes(self):
        """``A: float32[n, 1024], B: float32[1024, 1024]``: the arguments, for messages."""
        return ", ".join(f"{p.name}: {p.describe()}" for p in self._params)

    def _where(self, p):
        return f"kernel {self.name}: argument {p.pos} ({p.name})"

    def _convert(self, p, a, keep):
        """``_check``'s slow path: the data address of a DLPack or array-interface object that
        fits *p*, from NumPy's zero-copy view of it or, for a producer of the legacy protocol,
        read from its DLTensor (the view or capsule goes into *keep*: it keeps the memory alive
        while the caller holds *keep*); returned with the shape found."""
        via = None
        if not isinstance(a, np.ndarray):
            if hasattr(type(a), "__dlpack__"):
                view = _dlpack_view(a)
                if view is not None and _fits(p, view):
                    keep.append(view)
                    return _data_ptr(view), view.shape
                found = _dlpack_pointer(p, a)
                if found is not None:
                    keep.append(found[1])
                    return found[0], found[2]
            view = _foreign_view(a, self._where(p))
            if view is not None:
                via, a = type(a).__name__, view
                if _fits(p, a):
                    keep.append(view)
                    return _data_ptr(view), view.shape
        self._explain(p, a, via)
        raise InternalError(f"{self._where(p)}: argument refused without a reason")

    def _explain(self, p, a, via=None):
        where = self._where(p)
        if via is not None:
            where = f"{where}, a {via} viewed without copying"
        if not isinstance(a, np.ndarray):
            raise ArgumentError(f"{where}: expected a numpy.ndarray of {p.describe()}, got "
                                f"{type(a).__name__}")
        if a.dtype != p.dtype:
            got = a.dtype.name
            if a.dtype.newbyteorder("=") == p.dtype:
                got = f"{got} in non-native byte order ({a.dtype.str!r})"
            raise ArgumentError(f"{where}: expected dtype {p.dtype.name}, got {got} "
                                f"({_dtype_fix(p.dtype, a.dtype, via)})")
        if not p.matches(a.shape):
            raise ArgumentError(f"{where}: expected shape {_shape_text(p.shape)}, got "
                                f"{a.shape}")
        if not a.flags.c_contiguous:
            fix = ("np.ascontiguousarray(...)" if via is None
                   else "a contiguous copy (e.g. tensor.contiguous())")
            raise ArgumentError(f"{where}: the array is not C-contiguous (a transposed or "
                                f"strided view, or Fortran order?); pass {fix} instead")
        if not a.flags.aligned:
            raise ArgumentError(f"{where}: the array's data is not aligned to its "
                                f"{p.dtype.itemsize}-byte elements (a view of a byte buffer at an "
                                "odd offset?); pass a copy (np.array(...))")
        if p.written and not a.flags.writeable:
            raise ArgumentError(f"{where}: the kernel writes this array but it is read-only")

    # sources and timing ----------------------------------------------------------------------
    def get_source(self, fmt="llvm") -> str:
        """The kernel as ``llvm`` (optimised IR), ``llvm-unopt``, ``asm`` or ``ir`` (loop IR)."""
        try:
            key = SourceFormat(fmt)
        except ValueError:
            raise BuildError(f"unknown source format {fmt!r}; valid formats: "
                             f"{', '.join(repr(f) for f in SOURCE_FORMATS)}") from None
        text = self._sources.get(key)
        if text is None:
            have = ", ".join(repr(f.value) for f in self._sources) or "none"
            raise BuildError(f"kernel {self.name} was made without its {key.value!r} source "
                             f"(available: {have})")
        return text() if callable(text) else text

    def time(self, *arrays, number=1, repeat=3, min_repeat_ms=0, warmup=1,
             before=None) -> Timing:
        """Time the kernel on *arrays*: ``repeat`` measurements of ``number`` calls each.

        With ``min_repeat_ms``, ``number`` grows until one measurement lasts that long.
        Argument checks and temp allocation happen once, outside the measured calls.
        *before*: called, untimed, before each timed call (:func:`~.timing.time_callable`).
        """
        keep = []                       # held by run(): capsules / views of foreign arrays
        ptrs, values = self._check(arrays, keep)
        temps = self._allocate_temps(values)
        args = (*ptrs, *[_data_ptr(t) for t in temps], *values,
                self.num_threads if self._parallel else 1)
        f = self._cfunc

        def run():
            keep  # noqa: B018  (the closure holds the arguments' memory)
            if f(*args):
                self.out_of_memory()
        return time_callable(run, number, repeat, min_repeat_ms, warmup, before)

    def __repr__(self):
        return f"<einloop.Kernel {self.name}({self._shapes()})>"
