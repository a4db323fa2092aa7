"""A C header for an exported library, made from its metadata alone (no compiler needed).

Each kernel is declared with the ABI of :mod:`.kernel`: one pointer per argument (``const`` for
those it only reads), one per temporary buffer the caller allocates, one ``int64_t`` per symbolic
variable of the shapes, then the thread count; it returns 0, or nonzero when a buffer it mallocs
could not be allocated.  A comment per argument gives its shape (variables by name) and dtype,
and macros give each buffer's element count (a function of the variables it depends on).
"""
from __future__ import annotations

import os
import re

_C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t",
            "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t",
            "uint32": "uint32_t", "uint64": "uint64_t", "bool": "uint8_t",
            "float16": "uint16_t",     # IEEE half bits: C has no portable half type
            # the top 16 bits of a float32 (C has no bfloat16): (uint32_t)bits << 16 is the float
            "bfloat16": "uint16_t"}


def _macro(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text).upper()


def _param(spec, role: str, const: bool, last: bool) -> str:
    ctype = _C_TYPES.get(spec["dtype"], "void")
    shape = ", ".join(map(str, spec["shape"]))
    decl = f"{'const ' if const else ''}{ctype} *{spec['name']}"
    return f"    {decl + ('' if last else ','):<36}/* {role}: {spec['dtype']}[{shape}] */"


def _count(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _size_macro(prefix: str, shape) -> str:
    """``#define P_SIZE 4096``, or ``#define P_SIZE(n) ((int64_t)(n) * 1024)`` for a shape
    with variables."""
    names = list(dict.fromkeys(d for d in shape if isinstance(d, str)))
    if not names:
        return f"#define {prefix}_SIZE {_count(shape)}"
    static = _count(d for d in shape if not isinstance(d, str))
    factors = [f"(int64_t)({d})" for d in shape if isinstance(d, str)]
    if static != 1:
        factors.append(str(static))
    return f"#define {prefix}_SIZE({', '.join(names)}) ({' * '.join(factors)})"


def _var_param(v: dict) -> str:
    low = v.get("min", 0)
    role = "size variable" if low == 1 else "symbolic extent"
    return f"    {'int64_t ' + v['name'] + ',':<36}/* {role}: {v['name']} >= {low} */"


def kernel_declaration(k: dict) -> str:
    """The C declaration (with comments and size macros) of metadata kernel entry *k*."""
    outputs = set(k["outputs"])
    threads = "parallel, runs nthreads threads" if k["parallel"] else \
        "serial (nthreads is ignored; pass 1)"
    notes = ["Arrays are C-contiguous, aligned to their element size; outputs must not overlap "
             "other arguments."]
    if k["temps"]:
        notes.append("Temporaries: the caller allocates them (contents need not be initialised).")
    if k.get("vars"):
        notes.append(f"Pass the extents {', '.join(v['name'] for v in k['vars'])} the arrays "
                     "have (the _SIZE macros give element counts).")
    if any(spec["dtype"] == "bfloat16" for spec in k["args"] + k["temps"]):
        notes.append("bfloat16 elements are uint16_t: the top half of a float32's bits (widen "
                     "with (uint32_t)x << 16 and memcpy to a float; outputs are rounded to "
                     "nearest even).")
    for e in k.get("externs") or ():
        notes.append(f"Calls the external function {e['symbol']}"
                     + (f" of {e['library']}: link with that library too." if e.get("library")
                        else ": link with a library that defines it."))
    notes.append("Returns 0, or nonzero when a buffer the kernel mallocs could not be "
                 "allocated. */")
    lines = [f"/* kernel {k['name']}: {threads}."] + [f"   {note}" for note in notes]
    for spec in k["args"] + k["temps"]:
        lines.append(_size_macro(f"{_macro(k['symbol'])}_{_macro(spec['name'])}",
                                 spec["shape"]))
    params = [(a, "output" if a["name"] in outputs else "input", a["name"] not in outputs)
              for a in k["args"]] + [(t, "temporary", False) for t in k["temps"]]
    lines.append(f"int32_t {k['symbol']}(")
    lines += [_param(spec, role, const, False) for spec, role, const in params]
    lines += [_var_param(v) for v in k.get("vars", ())]
    lines.append("    int32_t nthreads);")
    return "\n".join(lines)


def header_text(meta: dict, library_name: str) -> str:
    """The whole header for a library's metadata *meta*."""
    guard = f"EINLOOP_{_macro(os.path.splitext(library_name)[0])}_H"
    target = meta.get("target", {})
    parts = [f"/* {library_name}: kernels exported by einloop {meta.get('einloop_version')} "
             f"(metadata schema {meta.get('schema')}).",
             f"   Compiled for {target.get('triple', '?')}, CPU {target.get('cpu', '?')}: run it "
             "on a CPU with the same features.",
             "   Link with the library (and libgomp if a kernel is parallel). */",
             f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>", "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    for k in meta.get("kernels", []):
        parts += [kernel_declaration(k), ""]
    parts += ["#ifdef __cplusplus", "}", "#endif", "", f"#endif  /* {guard} */", ""]
    return "\n".join(parts)


def write_header(library, path=None) -> str:
    """Write the C header of *library* (a path or a loaded Module) to *path* (default: the
    library's path with ``.h``); return the header's path."""
    from .library import read_metadata
    lib_path = os.fspath(getattr(library, "path", library))
    meta = getattr(library, "metadata", None) or read_metadata(lib_path)
    return write_header_for(meta, lib_path, path)


def write_header_for(meta: dict, lib_path, path=None) -> str:
    """Write the header of metadata *meta* for the library at *lib_path*."""
    lib_path = os.fspath(lib_path)
    path = os.fspath(path) if path is not None else os.path.splitext(lib_path)[0] + ".h"
    with open(path, "w", encoding="utf-8") as f:
        f.write(header_text(meta, os.path.basename(lib_path)))
    return path
