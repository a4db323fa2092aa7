"""A persistent compile cache: kernels' object code, reused by every later process.

JIT-compiling a kernel costs LLVM's O3 pipeline and instruction selection (100+ ms for a tiled
GEMM).  The machine code depends only on the unoptimised LLVM IR, the target (triple, CPU,
features), the LLVM that compiles it and einloop's version, so a sha256 of those names an entry.
An entry holds the MCJIT object file and what loading it needs: the entry symbol, whether it
runs thread teams, the target actually compiled for (a miscompile workaround may have dropped
features) and the optimised IR for ``get_source``.

Where: ``EINLOOP_CACHE_DIR``, else ``$XDG_CACHE_HOME/einloop``, else ``~/.cache/einloop``;
``EINLOOP_CACHE=0`` turns the cache off.  An entry is written to a temp file in the same
directory and renamed into place, so concurrent processes never see half an entry.  Each file
opens with a header (magic, schema, section lengths, sha256 of the rest); an entry failing that
check is deleted and rebuilt with a :class:`~einloop.errors.CacheWarning`, never loaded.

Size: at most ``EINLOOP_CACHE_MAX_MB`` (default 1024) megabytes.  A hit touches its entry's
modification time, and a store that takes the cache over the limit deletes the entries used
longest ago (as ccache does), so the cache keeps what is in use.  ``einloop cache`` shows it,
``einloop cache --clear`` empties it.
"""
from __future__ import annotations

from dataclasses import dataclass
import hashlib
import json
import os
from pathlib import Path
import struct
import tempfile
import threading
import warnings
import zlib

import llvmlite.binding as llvm

from ..errors import CacheWarning
from ..version import __version__
from .target import Target

SCHEMA = 1
_MAGIC = b"EINLOOPC"
_HEADER = struct.Struct("<8sIIQQ32s")   # magic, schema, meta, object and IR lengths, sha256
_SUFFIX = ".entry"
_OFF_VALUES = ("0", "off", "false", "no")
DEFAULT_MAX_MB = 1024
#: a store scans its directory at least every RESCAN_STORES stores of this process: other
#: processes write to the same cache, and their entries count toward the limit too (between
#: scans a store adds its own entry's size to the total the last scan found)
RESCAN_STORES = 64


@dataclass(frozen=True)
class CacheEntry:
    """The object code of one kernel and what loading it needs."""
    obj: bytes            # the ELF object MCJIT emitted (JIT code model)
    symbol: str           # the kernel's entry function
    parallel: bool        # does it launch libgomp thread teams?
    target: Target        # the target the object was generated for
    opt_ir: str           # the optimised LLVM IR (for get_source and asm)


@dataclass
class CacheStats:
    """What the cache did in this process: lookups that hit or missed, entries stored, and
    entries rejected as corrupt (tests read these to prove LLVM was skipped)."""
    hits: int = 0
    misses: int = 0
    stores: int = 0
    rejected: int = 0


stats = CacheStats()
_warned_dirs: set = set()
_warn_lock = threading.Lock()


def cache_dir() -> Path | None:
    """The cache directory, or None when ``EINLOOP_CACHE`` switches the cache off."""
    if os.environ.get("EINLOOP_CACHE", "1").strip().lower() in _OFF_VALUES:
        return None
    explicit = os.environ.get("EINLOOP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "einloop"


def entry_key(unopt_ir: str, target: Target, *options) -> str:
    """The sha256 naming the code for *unopt_ir* on *target* with codegen *options*."""
    h = hashlib.sha256()
    parts = (f"einloop compile cache {SCHEMA}", __version__,
             "llvm " + ".".join(map(str, llvm.llvm_version_info)), target.triple, target.cpu,
             target.features, repr(options), unopt_ir)
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def entry_path(key: str, directory: Path | None = None) -> Path | None:
    """Where the entry *key* lives (None when the cache is off)."""
    directory = directory if directory is not None else cache_dir()
    return None if directory is None else directory / f"v{SCHEMA}" / (key + _SUFFIX)


def load(key: str) -> CacheEntry | None:
    """The entry *key*, or None (a miss).  A corrupt entry is deleted with a warning."""
    path = entry_path(key)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        stats.misses += 1
        return None
    try:
        entry = decode(data)
    except ValueError as exc:
        stats.rejected += 1
        stats.misses += 1
        warnings.warn(f"compile cache entry {path} is corrupt ({exc}); it is deleted and the "
                      "kernel rebuilt", CacheWarning, stacklevel=3)
        _remove(path)
        return None
    stats.hits += 1
    try:
        os.utime(path)                  # recently used: the last to be evicted
    except OSError:
        pass
    return entry


def store(key: str, entry: CacheEntry) -> Path | None:
    """Write *entry* atomically under *key*; a cache that cannot be written is warned about
    once per directory and otherwise ignored (the kernel still builds)."""
    path = entry_path(key)
    if path is None:
        return None
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(encode(entry))
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            _remove(Path(tmp))
        _warn_unwritable(path.parent, exc)
        return None
    stats.stores += 1
    _account(path.parent, path, max_bytes())
    return path


_totals = {}                # directory -> [bytes in it as this process knows, stores since scan]
_totals_lock = threading.Lock()


def _account(directory: Path, path: Path, limit: int):
    """Keep *directory* within *limit* once *path* is written into it.  Scanning the directory
    costs a ``stat`` per entry (tens of milliseconds per build for a cache of a few thousand
    kernels, paid by every trial of a tuning job), so it is scanned, and the entries used
    longest ago evicted, only when this process's running total would pass the limit, on its
    first store, and every RESCAN_STORES stores."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    with _totals_lock:
        known = _totals.get(directory)
        if known is not None and known[1] < RESCAN_STORES and known[0] + size <= limit:
            known[0] += size
            known[1] += 1
            return
    _, total = _evict(directory, limit, keep=path)
    with _totals_lock:
        _totals[directory] = [total, 0]


def max_bytes() -> int:
    """The size limit: ``EINLOOP_CACHE_MAX_MB`` megabytes (a bad value is warned about and the
    default used: a cache setting never stops a build)."""
    raw = os.environ.get("EINLOOP_CACHE_MAX_MB", "").strip()
    if raw:
        try:
            mb = float(raw)
            if mb >= 0:
                return int(mb * (1 << 20))
        except ValueError:
            pass
        warnings.warn(f"EINLOOP_CACHE_MAX_MB={raw!r} is not a size in megabytes (a number >= 0);"
                      f" the compile cache keeps its default limit of {DEFAULT_MAX_MB} MB",
                      CacheWarning, stacklevel=4)
    return DEFAULT_MAX_MB << 20


def _entries(directory: Path) -> list:
    """``(mtime, size, path)`` of each entry in *directory*, oldest first."""
    found = []
    try:
        with os.scandir(directory) as it:
            for e in it:
                if e.name.endswith(_SUFFIX):
                    try:
                        st = e.stat()
                    except OSError:             # deleted meanwhile by another process
                        continue
                    found.append((st.st_mtime, st.st_size, Path(e.path)))
    except OSError:
        return []
    return sorted(found)


def evict(directory: Path, limit: int, keep: Path | None = None) -> int:
    """Delete the entries of *directory* used longest ago until they total at most *limit*
    bytes (never *keep*, the entry just written); the number deleted."""
    return _evict(directory, limit, keep)[0]


def _evict(directory, limit, keep):
    """:func:`evict`, and the bytes left: ``(deleted, total)``."""
    entries = _entries(directory)
    total = sum(size for _, size, _ in entries)
    deleted = 0
    for _, size, path in entries:
        if total <= limit:
            break
        if path == keep:
            continue
        _remove(path)
        total -= size
        deleted += 1
    return deleted, total


def info() -> tuple:
    """``(directory, entries, bytes)`` of the cache (directory None when it is off)."""
    path = entry_path("x")
    if path is None:
        return None, 0, 0
    entries = _entries(path.parent)
    return path.parent.parent, len(entries), sum(size for _, size, _ in entries)


def clear() -> int:
    """Delete every entry of the cache; the number deleted."""
    path = entry_path("x")
    if path is None:
        return 0
    entries = _entries(path.parent)
    for _, _, p in entries:
        _remove(p)
    with _totals_lock:
        _totals.pop(path.parent, None)
    return len(entries)


def encode(entry: CacheEntry) -> bytes:
    """The bytes of *entry* on disk: header, JSON metadata, object, zlib-compressed IR."""
    meta = json.dumps({"symbol": entry.symbol, "parallel": entry.parallel,
                       "cpu": entry.target.cpu, "features": entry.target.features,
                       "triple": entry.target.triple, "einloop": __version__}).encode()
    ir = zlib.compress(entry.opt_ir.encode(), 1)
    body = meta + entry.obj + ir
    header = _HEADER.pack(_MAGIC, SCHEMA, len(meta), len(entry.obj), len(ir),
                          hashlib.sha256(body).digest())
    return header + body


def decode(data: bytes) -> CacheEntry:
    """The entry in *data*; ValueError says why it is not a valid one."""
    if len(data) < _HEADER.size:
        raise ValueError(f"truncated: {len(data)} bytes, shorter than the header")
    magic, schema, n_meta, n_obj, n_ir, digest = _HEADER.unpack_from(data)
    if magic != _MAGIC or schema != SCHEMA:
        raise ValueError(f"not a schema-{SCHEMA} einloop cache entry")
    body = data[_HEADER.size:]
    if len(body) != n_meta + n_obj + n_ir:
        raise ValueError(f"truncated: {len(body)} bytes of data, the header says "
                         f"{n_meta + n_obj + n_ir}")
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("checksum mismatch")
    try:
        meta = json.loads(body[:n_meta])
        opt_ir = zlib.decompress(body[n_meta + n_obj:]).decode()
        target = Target(meta["cpu"], meta["features"], meta["triple"])
        return CacheEntry(body[n_meta:n_meta + n_obj], meta["symbol"], bool(meta["parallel"]),
                          target, opt_ir)
    except (ValueError, KeyError, TypeError, zlib.error) as exc:
        raise ValueError(f"unreadable metadata: {exc}") from None


def _remove(path: Path):
    try:
        path.unlink()
    except OSError:
        pass


def _warn_unwritable(directory: Path, exc: OSError):
    with _warn_lock:
        if directory in _warned_dirs:
            return
        _warned_dirs.add(directory)
    warnings.warn(f"cannot write the compile cache in {directory}: {exc}; kernels are compiled "
                  "anew each process (set EINLOOP_CACHE_DIR to a writable directory, or "
                  "EINLOOP_CACHE=0)", CacheWarning, stacklevel=4)
