"""Kernels loaded from a shared library that ``export_library`` wrote: no compiler, no tuning log.

An exported library defines one C function per kernel (the ABI of :mod:`.kernel`) and carries
its metadata as JSON in a section ``.einloop_metadata`` (also exported as the symbol
``einloop_metadata``, with its length in ``einloop_metadata_size``).  :func:`load_module` reads
that JSON from the file *before* opening the library, so that a wrong schema, an unknown einloop
version or a CPU without a feature the code needs is refused with :class:`LibraryError` instead
of running code that dies of SIGILL; libgomp is loaded with einloop's spin policy before a
library with parallel kernels pulls it in.  Each kernel becomes an ordinary :class:`Kernel`.
"""
from __future__ import annotations

import ctypes
import json
import os
import struct

from ..errors import BuildError, LibraryError
from ..version import __version__
from . import amx, blas, cpu, externs, gomp
from .dispatch import DispatchKernel
from .kernel import Kernel
from .signature import BufferSpec, Signature, VarSpec, numpy_dtype

#: the metadata layout this runtime reads and ``export_library`` writes.
SCHEMA = 1
#: the schema of libraries with kernels of symbolic extents (an older runtime refuses them by
#: their schema instead of misreading their shapes); this runtime reads both.
SCHEMA_SYMBOLIC = 2
#: the schema of libraries with bfloat16 buffers (an older runtime, which has no bfloat16 dtype,
#: refuses them by their schema); this runtime reads all three.
SCHEMA_BFLOAT16 = 3
SCHEMAS = (SCHEMA, SCHEMA_SYMBOLIC, SCHEMA_BFLOAT16)
SECTION = ".einloop_metadata"
SYMBOL = "einloop_metadata"

_ELF_HEADER = struct.Struct("<4sBBBBB7sHHIQQQIHHHHHH")
_ELF_SECTION = struct.Struct("<IIQQQQIIQQ")


def _major(version: str) -> str:
    return str(version).split(".")[0]


def _elf_section(data: bytes, wanted: str):
    """The bytes of section *wanted* of little-endian ELF64 *data*, or None if it has none.

    Raises ValueError when *data* is not such a file or is cut short.
    """
    if len(data) < _ELF_HEADER.size or data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    fields = _ELF_HEADER.unpack_from(data)
    shoff, shentsize, shnum, shstrndx = fields[12], fields[17], fields[18], fields[19]
    if shoff == 0 or shnum == 0 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        raise ValueError("its section table is missing or lies beyond the end of the file "
                         "(truncated?)")
    sections = [_ELF_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]
    for name, _, _, _, offset, size, *_ in sections:
        end = data.find(b"\0", names_at + name)
        if data[names_at + name:end].decode("ascii", "replace") == wanted:
            if offset + size > len(data):
                raise ValueError(f"section {wanted} lies beyond the end of the file (truncated?)")
            return data[offset:offset + size]
    return None


def _symbol_metadata(path):
    """The metadata JSON read through the dynamic loader (files that are not ELF)."""
    try:
        lib = ctypes.CDLL(path)
        size = ctypes.c_uint64.in_dll(lib, SYMBOL + "_size").value
        return bytes((ctypes.c_char * size).in_dll(lib, SYMBOL))
    except (OSError, ValueError) as exc:
        raise LibraryError(f"{path} is not a shared library einloop can open ({exc}); give a "
                           "library written by export_library") from None


def read_metadata(path) -> dict:
    """The metadata *path* carries, checked for a schema and einloop version this runtime
    reads; LibraryError otherwise."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else "does not exist"
        raise LibraryError(f"kernel library {path} {what}; give the .so file export_library "
                           "wrote")
    with open(path, "rb") as f:
        data = f.read()
    try:
        raw = _elf_section(data, SECTION)
    except ValueError as exc:
        if data[:4] == b"\x7fELF":
            raise LibraryError(f"{path} is a damaged ELF file: {exc}; export the library "
                               "again") from None
        raw = _symbol_metadata(path)
    if raw is None:
        raise LibraryError(f"{path} is a shared library without einloop metadata (no section "
                           f"{SECTION}): it was not written by einloop's export_library")
    try:
        meta = json.loads(raw.rstrip(b"\0").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LibraryError(f"{path}: its einloop metadata is not valid JSON ({exc}); export "
                           "the library again") from None
    _check_versions(path, meta)
    return meta


def _check_versions(path, meta):
    if not isinstance(meta, dict) or meta.get("schema") not in SCHEMAS:
        got = meta.get("schema") if isinstance(meta, dict) else None
        raise LibraryError(f"{path}: einloop metadata schema {got!r}, but this runtime reads "
                           f"schemas {', '.join(map(str, SCHEMAS))}; export it with this "
                           f"einloop ({__version__})")
    version = str(meta.get("einloop_version", "?"))
    if _major(version) != _major(__version__):
        raise LibraryError(f"{path} was exported by einloop {version}, which this einloop "
                           f"({__version__}) cannot load (major versions differ); export it "
                           "again with this version, or load it with einloop "
                           f"{_major(version)}.x")


def check_cpu(path, meta, flags=None):
    """LibraryError if the library's code is for another architecture, or the host lacks a CPU
    feature it was generated for."""
    target = meta.get("target", {})
    arch = cpu.foreign_arch(target.get("triple", ""))
    if arch:
        raise LibraryError(f"{path} holds code for {target['triple']}, which this "
                           f"{cpu.host_arch()} machine cannot run; load it on an {arch} machine, "
                           "or export the kernels built for this one (target='llvm')")
    missing = cpu.missing_features(target.get("features", ""), flags)
    if missing:
        raise LibraryError(f"{path} was compiled for CPU {target.get('cpu', '?')} with features "
                           f"this CPU lacks: {', '.join(missing)}; export it on this machine or "
                           "for a target without them (build(..., target='llvm -mcpu=NAME'))")


def check_amx(path, meta):
    """LibraryError if the library's code uses AMX tiles (its features list ``amx-tile``) and
    this process cannot get Linux's permission for them (:func:`.amx.request`)."""
    if "+amx-tile" not in meta.get("target", {}).get("features", "").split(","):
        return
    why = amx.request()
    if why is not None:
        raise LibraryError(f"{path}: its kernels use AMX tiles, which this process cannot use: "
                           f"{why}; export kernels without AMX intrinsics for this machine")


def _spec(d) -> BufferSpec:
    try:
        numpy_dtype(d["dtype"])
    except TypeError:
        raise LibraryError(f"buffer {d['name']!r} has dtype {d['dtype']!r}, which this einloop "
                           f"({__version__}) does not know; load the library with the einloop "
                           "that exported it") from None
    return BufferSpec(d["name"], d["dtype"], tuple(d["shape"]))


def signature_from_json(d) -> Signature:
    """The Signature of a kernel's metadata entry (see :func:`signature_to_json`); an entry
    without ``vars`` has none."""
    return Signature(tuple(_spec(a) for a in d["args"]), tuple(_spec(t) for t in d["temps"]),
                     tuple(d["outputs"]),
                     tuple(VarSpec(v["name"], v.get("min", 0)) for v in d.get("vars", ())))


def signature_to_json(sig: Signature) -> dict:
    """A Signature as JSON-able data: argument and temp specs (a symbolic dimension is its
    variable's name), written argument names and, if any, the variables in ABI order
    (``[{"name": "n", "min": 1}]``); a static signature's entry is what it always was."""
    def spec(b):
        return {"name": b.name, "dtype": b.dtype, "shape": list(b.shape)}
    d = {"args": [spec(a) for a in sig.args], "temps": [spec(t) for t in sig.temps],
         "outputs": list(sig.outputs)}
    if sig.vars:
        d["vars"] = [{"name": v.name, "min": v.min_value} for v in sig.vars]
    return d


class Module:
    """The kernels of one loaded library, by name: ``m["gemm"]``, ``m.gemm``; a library of one
    kernel is also callable as that kernel."""

    def __init__(self, path, lib, kernels: dict, metadata: dict):
        self.path, self._lib, self.metadata = path, lib, metadata
        self.kernels = kernels

    @property
    def names(self) -> tuple:
        return tuple(self.kernels)

    def __getitem__(self, name) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise LibraryError(f"{self.path} has no kernel {name!r}; it has "
                               f"{', '.join(map(repr, self.kernels))}") from None

    def __getattr__(self, name):
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"module {self.__dict__.get('path')!r} has no kernel {name!r}")

    def __contains__(self, name):
        return name in self.kernels

    def __iter__(self):
        return iter(self.kernels.values())

    def __len__(self):
        return len(self.kernels)

    def __call__(self, *arrays):
        tables = [k for k in self.kernels.values() if isinstance(k, DispatchKernel)]
        if len(tables) == 1:            # one operator compiled from several schedules
            return tables[0](*arrays)
        if len(self.kernels) != 1:
            raise LibraryError(f"{self.path} holds {len(self.kernels)} kernels "
                               f"({', '.join(self.kernels)}); call one by name: m[name](...)")
        return next(iter(self.kernels.values()))(*arrays)

    def __repr__(self):
        return f"<einloop.runtime.Module {self.path}: {', '.join(self.kernels)}>"


def load_externs(path, entries):
    """Load the libraries of the external functions (``te.extern``) the kernels of *entries*
    call, globally, so that the library's references to them bind when it is opened;
    LibraryError naming the kernel, the function and the library when one is missing.

    A library is looked for where it was when the kernels were built, then beside *path* under
    its file name (deployed together, the two need not keep the build machine's folders)."""
    for k in entries:
        for e in k.get("externs") or ():
            try:
                symbol, library = e["symbol"], e.get("library")
            except (KeyError, TypeError):
                raise LibraryError(f"{path}: the external functions of kernel "
                                   f"{k.get('name')!r} are damaged in its metadata ({e!r}); "
                                   "export it again") from None
            who = f"{path} (kernel {k.get('name')!r} calls {symbol})"
            found = _beside(path, library)
            try:
                address = externs.resolve(symbol, found, LibraryError, who)
            except LibraryError as exc:
                if found is library and library is not None and os.sep in library:
                    raise LibraryError(f"{exc} (also looked for "
                                       f"{os.path.basename(library)} beside {path})") from None
                raise
            library = found
            if library is not None:
                externs.check_not_shadowed(symbol, library, address, LibraryError, who)


def _beside(path, library):
    """*library*, or the file of its name in *path*'s folder when it is a path that does not
    exist but that file does."""
    if library is None or os.sep not in library or os.path.isfile(library):
        return library
    near = os.path.join(os.path.dirname(path), os.path.basename(library))
    return near if os.path.isfile(near) else library


def load_module(path) -> Module:
    """Load a library written by ``export_library``: its kernels, checked against this CPU.

    Raises
    ------
    LibraryError
        The file is missing, damaged, not an einloop library, of another schema or einloop
        major version, its code needs CPU features this machine lacks, or a library of the
        external functions its kernels call (``te.extern``, listed in the metadata as
        ``externs``) is missing or does not define them.
    """
    path = os.path.abspath(os.fspath(path))
    meta = read_metadata(path)
    check_cpu(path, meta)
    check_amx(path, meta)
    entries = meta.get("kernels") or []
    if any(k.get("parallel") for k in entries):
        gomp.gomp_runtime()              # libgomp under einloop's spin policy, before dlopen
    load_externs(path, entries)
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise LibraryError(f"{path} cannot be loaded: {exc}") from None
    if any(k.get("parallel") for k in entries):
        bridge = getattr(lib, blas.BRIDGE_SYMBOL, None)    # absent in older libraries
        if bridge is not None:
            blas.set_bridge(ctypes.cast(bridge, ctypes.c_void_p).value, lib)
        blas.share_blas_threads()
    kernels = {}
    for k in entries:
        try:
            address = ctypes.cast(getattr(lib, k["symbol"]), ctypes.c_void_p).value
        except AttributeError:
            raise LibraryError(f"{path}: kernel {k['name']!r} is listed in its metadata but its "
                               f"symbol {k['symbol']} is missing; export it again") from None
        kernels[k["name"]] = Kernel(
            k["name"], signature_from_json(k), address, lib, parallel=bool(k.get("parallel")),
            metadata={"target": k.get("target", ""), "library": path,
                      "einloop_version": meta.get("einloop_version")})
    for d in meta.get("dispatch") or []:
        try:
            kernels[d["name"]] = DispatchKernel(d["name"], d["names"],
                                                [(sizes, kernels[k]) for sizes, k in d["cases"]])
        except (KeyError, TypeError, ValueError) as exc:
            raise LibraryError(f"{path}: its dispatch table {d.get('name', '?')!r} is damaged "
                               f"({exc!r}); export it again") from None
    return Module(path, lib, kernels, meta)


def export_library(kernels, path, header=False) -> str:
    """Write built kernels into one shared library at *path* (``load_module`` reads it).

    The runtime has no compiler: this asks the kernels' own (``CompiledKernel.export_together``,
    present on kernels that ``einloop.build`` made).
    """
    kernels = [kernels] if isinstance(kernels, (Kernel, DispatchKernel)) else list(kernels)
    export = getattr(kernels[0], "export_together", None) if kernels else None
    if export is None:
        raise BuildError("export_library takes kernels built in this process "
                           f"(einloop.build), got {kernels!r}")
    return export(kernels, path, header=header)
