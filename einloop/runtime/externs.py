"""The C functions of external stages (``te.extern``): loading their libraries, finding them.

A kernel with an external stage calls its function by name.  Before the kernel's code is linked
(JIT) or its exported library opened, :func:`resolve` loads the function's library into the
process with its symbols global (``RTLD_GLOBAL``: an exported library's undefined reference
binds to it) and returns the function's address, or raises a clear error: the library is
missing or cannot be loaded, or it does not define the symbol.  Libraries stay loaded for the
life of the process (their code may be running in a kernel).

Symbols are process-wide: if two libraries loaded globally define the same name, an exported
library's references bind to the first one loaded, which :func:`check_not_shadowed` refuses
(the JIT binds each kernel to the address found in the library it names).
"""
from __future__ import annotations

import ctypes
import os
import threading

_libraries: dict = {}          # library path or name (None: the process) -> ctypes.CDLL
_lock = threading.Lock()


def _load(library, error, who):
    with _lock:
        lib = _libraries.get(library)
        if lib is not None:
            return lib
        if library is not None and os.sep in library and not os.path.isfile(library):
            what = "is a folder" if os.path.isdir(library) else "does not exist"
            raise error(f"{who}: the library {library} {what}; build the shared library that "
                        "defines the external function, or fix library= of its te.extern")
        try:
            lib = ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise error(f"{who}: the library {library} cannot be loaded ({exc}); give the path "
                        "of a shared library for this machine") from None
        _libraries[library] = lib
        return lib


def resolve(symbol: str, library, error, who: str) -> int:
    """The address of the C function *symbol* of *library* (a path or a loader-searched name;
    None: a symbol already loaded in the process), loading the library first; *error* (an
    exception class) is raised, its message starting with *who*, when that fails."""
    lib = _load(library, error, who)
    try:
        fn = getattr(lib, symbol)
    except AttributeError:
        if library is None:
            raise error(f"{who}: no library loaded in this process defines the external "
                        f"function {symbol}; pass library= (the shared library that defines "
                        "it) to te.extern") from None
        raise error(f"{who}: the library {library} does not define the external function "
                    f"{symbol} (is it declared extern \"C\" and not static?)") from None
    return ctypes.cast(fn, ctypes.c_void_p).value


def check_not_shadowed(symbol: str, library, address: int, error, who: str):
    """*error* unless the process's global lookup of *symbol* finds *address* (the function of
    *library*): a library loaded before with the same symbol global would take the references
    of a library opened now."""
    try:
        found = ctypes.cast(getattr(_load(None, error, who), symbol), ctypes.c_void_p).value
    except AttributeError:
        found = None
    if found != address:
        raise error(f"{who}: another library loaded in this process already defines "
                    f"{symbol}, and the kernels' calls would bind to it rather than to "
                    f"{library}'s; load the kernels in a process without it, or rename the "
                    "function")
