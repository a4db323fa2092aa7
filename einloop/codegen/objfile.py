"""The external symbols an object file needs: what the JIT must resolve before code may run.

MCJIT does not fail when a symbol cannot be resolved: it leaves the call or address at 0.  The
JIT therefore reads the undefined symbols of each object it loads (the ELF symbol table; LLVM's
own libcalls, such as compiler-rt helpers, appear only there, never in the IR) and checks each.
"""
from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB = 2
_SHN_UNDEF = 0
_SECTION = struct.Struct("<IIQQQQIIQQ")     # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")          # Elf64_Sym


def undefined_symbols(obj: bytes):
    """Names of the symbols *obj* references but does not define.

    Returns None when *obj* is not a little-endian ELF64 object (other formats are not read).
    """
    if obj[:4] != _ELF_MAGIC or obj[4] != 2 or obj[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [_SECTION.unpack_from(obj, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != _SHT_SYMTAB:
            continue
        strtab = sections[link][4]
        for pos in range(offset, offset + size, entsize or _SYMBOL.size):
            name, _, _, shndx, _, _ = _SYMBOL.unpack_from(obj, pos)
            if shndx == _SHN_UNDEF and name:
                start = strtab + name
                names.add(obj[start:obj.index(b"\0", start)].decode())
    return sorted(names)
