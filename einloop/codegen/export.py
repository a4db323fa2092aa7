"""Exporting built kernels: an object file or a shared library that carries its own metadata.

Route: each kernel's optimised LLVM module (what the JIT ran) is parsed again, its entry renamed
to ``einloop_<name>`` and every other definition made internal, so that kernels never clash; the
modules of one target are linked into one, with the metadata (JSON in a section and symbol read
by :mod:`einloop.runtime.library`) and the compiler-rt helpers of :mod:`.compiler_rt` (hidden:
the library needs no libgcc or compiler-rt); LLVM emits one position-independent object per
target; the system C compiler links them with ``-shared`` (plus libgomp when a kernel launches
thread teams, and libm).  Without a C compiler, :func:`export_object` still writes the object.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import BuildError, InternalError, ToolchainError
from ..runtime.cpu import required_features
from ..runtime.header import write_header_for
from ..runtime.library import (SCHEMA, SCHEMA_BFLOAT16, SCHEMA_SYMBOLIC, SECTION, SYMBOL,
                               signature_to_json)
from ..version import __version__
from . import amx, blas_bridge, compiler_rt, extern, team
from .compiled import Compiled
from .llvm import llvm_lock
from .objfile import undefined_symbols
from .target import Target, llvm_target

COMPILERS = ("cc", "gcc", "clang")
_IDENT = re.compile(r"[^A-Za-z0-9_]")
_machines: dict = {}


def kernel_symbol(name: str) -> str:
    """The exported C symbol of kernel *name*: ``einloop_`` and the name as an identifier."""
    return "einloop_" + _IDENT.sub("_", name)


def _compiled(kernel) -> Compiled:
    owner = getattr(kernel, "owner", None)
    if not isinstance(owner, Compiled):
        raise BuildError(f"cannot export {kernel!r}: only kernels compiled in this process "
                         "(einloop.build) carry the code to export; a kernel loaded from a "
                         "library is exported already")
    return owner


def _check_names(kernels):
    seen = {}
    for k in kernels:
        sym = kernel_symbol(k.name)
        if sym in seen:
            raise BuildError(f"two kernels exported together are both named {k.name!r} (symbol "
                             f"{sym}); give each its own name: build(s, args, name='...')")
        seen[sym] = k


def aot_machine(target: Target):
    """A TargetMachine for position-independent shared-library code (not the JIT's)."""
    tm = _machines.get(target)
    if tm is None:
        tm = _machines[target] = llvm_target(target.triple).create_target_machine(
            cpu=target.cpu, features=target.features, opt=3, reloc="pic", codemodel="default")
    return tm


def kernel_module(kernel):
    """*kernel*'s optimised module with its entry renamed and every other definition internal."""
    c = _compiled(kernel)
    mod = llvm.parse_assembly(c.opt_ir)
    symbol = kernel_symbol(kernel.name)
    entry = mod.get_function(c.symbol)
    entry.name = symbol
    for value in list(mod.functions) + list(mod.global_variables):
        if not value.is_declaration and value.name != symbol:
            value.linkage = llvm.Linkage.internal
    return mod


def expand(items) -> tuple:
    """``(kernels, dispatch)``: the kernels of *items* (Kernels and DispatchKernels, whose
    kernels are exported each under its own name) and the dispatch tables to write beside them
    (``load_module`` makes a DispatchKernel of each again)."""
    from ..runtime.dispatch import DispatchKernel
    kernels, dispatch = [], []
    for item in items:
        if isinstance(item, DispatchKernel):
            kernels.extend(item.kernels)
            dispatch.append({"name": item.name, "names": list(item.names),
                             "cases": [[list(sizes), k.name] for sizes, k in item.cases]})
        else:
            kernels.append(item)
    return kernels, dispatch


def metadata(items) -> dict:
    """What the library says about itself: schema, einloop version, target, kernels (and the
    dispatch tables of kernels with symbolic extents compiled from several schedules)."""
    kernels, dispatch = expand(items)
    _check_externs(kernels)
    targets = [_compiled(k).target for k in kernels]
    triples = sorted({t.triple for t in targets})
    if len(triples) != 1:
        raise BuildError(f"kernels for different triples ({', '.join(triples)}) cannot share a "
                         "library; export one library per triple")
    # AMX only where a kernel runs it: the target's own say nothing of the code
    features = sorted({f for t in targets for f in required_features(t.full_features(), t.arch)
                       if not amx.uses_amx([f])}
                      | {f for k in kernels for f in amx.features_used(_compiled(k).unopt_ir)})
    symbolic = bool(dispatch) or any(k.signature.vars for k in kernels)
    bf16 = any(b.dtype == "bfloat16" for k in kernels
               for b in k.signature.args + k.signature.temps)
    schema = SCHEMA_BFLOAT16 if bf16 else SCHEMA_SYMBOLIC if symbolic else SCHEMA
    return {"schema": schema, "einloop_version": __version__,
            "target": {"triple": triples[0], "cpu": targets[0].cpu,
                       "features": ",".join("+" + f for f in features)},
            "kernels": [{"name": k.name, "symbol": kernel_symbol(k.name),
                         "parallel": bool(k.parallel), "target": str(_compiled(k).target),
                         **signature_to_json(k.signature), **_externs_json(k)}
                        for k in kernels],
            **({"dispatch": dispatch} if dispatch else {})}


def _check_externs(kernels):
    """BuildError when kernels exported together call one symbol of two libraries: in the
    loading process the symbol binds to one function (:mod:`einloop.runtime.externs`)."""
    seen = {}
    for k in kernels:
        for e in _externs_json(k).get("externs", ()):
            other = seen.setdefault(e["symbol"], e["library"])
            if other != e["library"]:
                raise BuildError(f"the kernels exported together call the external function "
                                 f"{e['symbol']} of two libraries ({other or 'the process'} "
                                 f"and {e['library'] or 'the process'}); a library's calls "
                                 "bind to one function of a name: export them separately")


def _externs_json(kernel) -> dict:
    """``{"externs": [{"symbol": ..., "library": ...}]}`` for a kernel that calls external
    functions (``te.extern``), which the runtime loads before the library; else nothing."""
    func = getattr(kernel, "func", None)
    pairs = extern.externs_of(func) if func is not None else ()
    if not pairs:
        return {}
    return {"externs": [{"symbol": sym, "library": lib} for sym, lib in pairs]}


def _metadata_module(meta: dict, target: Target):
    """The metadata as a constant symbol (how the runtime reads it through the dynamic loader),
    also in a section of its own in ELF files (read without loading them).  Mach-O and COFF
    name sections otherwise (``__DATA,name``; at most 8 characters): there the symbol alone
    carries it."""
    data = json.dumps(meta, sort_keys=True).encode("utf-8") + b"\0"
    m = ir.Module(name="einloop_metadata")
    m.triple = target.triple
    arr = ir.ArrayType(ir.IntType(8), len(data))
    blob = ir.GlobalVariable(m, arr, SYMBOL)
    blob.global_constant = True
    if target.system not in ("darwin", "windows"):
        blob.section = SECTION
    blob.initializer = ir.Constant(arr, bytearray(data))
    size = ir.GlobalVariable(m, ir.IntType(64), SYMBOL + "_size")
    size.global_constant, size.initializer = True, ir.Constant(ir.IntType(64), len(data))
    return llvm.parse_assembly(str(m))


def _helpers_module(triple: str):
    mod = llvm.parse_assembly(compiler_rt.HELPERS_IR)
    mod.triple = triple
    for fn in mod.functions:
        fn.visibility = llvm.Visibility.hidden
    return mod


def _bridge_module(triple: str):
    """:mod:`.blas_bridge`'s code, for a library with a parallel kernel: a process that only
    loads the library runs OpenBLAS's threaded calls on its pool too (einloop.runtime.blas)."""
    mod = llvm.parse_assembly(blas_bridge.BRIDGE_IR)
    mod.triple = triple
    return mod


def _team_module(target):
    """:mod:`.team`'s code, for a library's group of Linux kernels with a parallel loop
    (hidden, and one copy kept where several groups have it)."""
    mod = llvm.parse_assembly(team.team_ir(target.is_x86))
    mod.triple = target.triple
    for value in list(mod.functions) + list(mod.global_variables):
        if value.name in team.PUBLIC or value.name in team.GLOBALS:
            value.linkage = llvm.Linkage.linkonce_odr
            value.visibility = llvm.Visibility.hidden
    return mod


def object_files(kernels, edit_metadata=None) -> list:
    """One object (bytes) per distinct target of *kernels*; the first also holds the metadata
    (after *edit_metadata*, a function dict -> dict, if given: tests simulate other builds)."""
    items = list(kernels)
    kernels, _ = expand(items)
    if not kernels:
        raise BuildError("nothing to export: give at least one built kernel")
    _check_names(kernels)
    meta = metadata(items)
    if edit_metadata is not None:
        meta = edit_metadata(meta)
    groups: dict = {}
    for k in kernels:
        groups.setdefault(_compiled(k).target, []).append(k)
    objects = []
    with llvm_lock:
        for i, (target, members) in enumerate(groups.items()):
            mod = kernel_module(members[0])
            for k in members[1:]:
                mod.link_in(kernel_module(k))
            if i == 0:
                mod.link_in(_metadata_module(meta, target))
                mod.link_in(_helpers_module(target.triple))
                if any(k.parallel for k in kernels):
                    mod.link_in(_bridge_module(target.triple))
            if target.system == "linux" and any(k.parallel for k in members):
                mod.link_in(_team_module(target))
            try:
                mod.verify()
            except RuntimeError as exc:
                raise InternalError(f"export: the linked module is invalid: {exc}") from None
            objects.append(aot_machine(target).emit_object(mod))
    return objects


def export_object(kernels, path, edit_metadata=None) -> str:
    """Write *kernels* (one Kernel or a list, all for one target) as one relocatable object
    file, metadata included; needs no C compiler.  Returns *path*."""
    kernels = [kernels] if not isinstance(kernels, (list, tuple)) else list(kernels)
    objects = object_files(kernels, edit_metadata)
    if len(objects) != 1:
        raise BuildError("these kernels were compiled for different targets, which one object "
                         "file cannot hold; export a library, or one object per target")
    _write_atomic(path, objects[0])
    return os.fspath(path)


def cross_compilers(target: Target) -> tuple:
    """The C compilers that link for *target* when it is another machine's: the GNU cross
    compiler named by its triple (``aarch64-linux-gnu-gcc``, Debian's gcc-aarch64-linux-gnu),
    with and without the vendor part (``aarch64-unknown-linux-gnu`` -> ``aarch64-linux-gnu``)."""
    parts = target.triple.split("-")
    names = ["-".join(parts)]
    if len(parts) == 4:
        names.append("-".join(parts[:1] + parts[2:]))
    return tuple(f"{n}-gcc" for n in names)


def find_compiler(target: Target | None = None) -> list:
    """The C compiler command that links for *target* (default: this machine): ``$CC``, else
    the first of cc, gcc, clang on PATH; for another machine's target, ``$CC``, else its GNU
    cross compiler (:func:`cross_compilers`)."""
    names = COMPILERS if target is None or target.is_native else cross_compilers(target)
    cc = os.environ.get("CC")
    if cc and shutil.which(shlex.split(cc)[0]):
        return shlex.split(cc)
    for name in names:
        found = shutil.which(name)
        if found:
            return [found]
    hint = ("apt-get install gcc, or clang" if names is COMPILERS else
            f"on Debian, apt-get install gcc-{names[-1][:-4]}, or set $CC to a compiler that "
            f"links for {target.triple}")
    raise ToolchainError("export_library links with a C compiler, but none was found (looked "
                         f"for $CC and {', '.join(names)} on PATH); install one (e.g. {hint}), "
                         "or write an object file with export_object(path) and link it yourself")


def link_libraries(objects, parallel=False) -> list:
    """The libraries the objects need: libgomp for thread teams, libm for float64 math.

    Thread teams show in ELF objects as undefined ``GOMP_``/``omp_`` symbols; *parallel* says so
    for objects of other formats (Mach-O, COFF), whose symbols are not read.
    """
    needed = {s for obj in objects for s in undefined_symbols(obj) or ()}
    gomp = parallel or any(s.startswith(("GOMP_", "omp_")) for s in needed)
    return (["-lgomp"] if gomp else []) + ["-lm"]


def _link_hint(target: Target, libraries) -> str:
    """What to try when linking failed: libgomp is GCC's, which only Linux has by default."""
    if "-lgomp" not in libraries or target.system == "linux":
        return ""
    return ("\nparallel kernels link libgomp, GCC's OpenMP runtime, which this system's default "
            "compiler may lack (Apple's clang does): set $CC to a GCC that has it (e.g. "
            "Homebrew's gcc-14), or export_object(path) and link against an OpenMP runtime with "
            "the GOMP_ entry points (LLVM's libomp, -lomp)")


def export_library(kernels, path, header=False, edit_metadata=None) -> str:
    """Write *kernels* (a Kernel or a list) as one shared library at *path*.

    Parameters
    ----------
    kernels : Kernel or list of Kernel
        Built kernels (``einloop.build``), each with its own name: the library exports each as
        ``einloop_<name>``, and ``runtime.load_module(path)[name]`` finds it.
    path : str or PathLike
    header : bool
        Also write a C header (*path* with ``.h``) declaring each kernel.
    edit_metadata : callable, optional
        Changes the embedded metadata dict before it is written (for tests).

    Raises ToolchainError when no C compiler is found (export_object needs none).
    """
    kernels = [kernels] if not isinstance(kernels, (list, tuple)) else list(kernels)
    flat, _ = expand(kernels)
    target = _compiled(flat[0]).target if flat else None
    cc = find_compiler(target)
    objects = object_files(kernels, edit_metadata)
    libraries = link_libraries(objects, any(k.parallel for k in flat))
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.TemporaryDirectory(prefix="einloop-export-") as tmp:
        names = []
        for i, obj in enumerate(objects):
            names.append(os.path.join(tmp, f"kernels{i}.o"))
            with open(names[-1], "wb") as f:
                f.write(obj)
        out = os.path.join(tmp, "lib.so")
        cmd = [*cc, "-shared", "-o", out, *names, *libraries]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise ToolchainError(f"linking {path} failed: {' '.join(cmd)}\n{run.stderr.strip()}"
                                 + _link_hint(target, libraries))
        with open(out, "rb") as f:
            _write_atomic(path, f.read(), folder)
    if header:
        meta = metadata(kernels) if edit_metadata is None else edit_metadata(metadata(kernels))
        write_header_for(meta, path)
    return path


def _write_atomic(path, data: bytes, folder=None):
    """Write through a temp file and rename: a process running the old library keeps its
    mapping intact, and no reader ever sees half a file.  A missing folder is created."""
    folder = folder or os.path.dirname(os.path.abspath(os.fspath(path)))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".einloop-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
