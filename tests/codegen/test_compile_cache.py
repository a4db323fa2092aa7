"""The persistent compile cache: a kernel built again, in any process, loads its object code."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from einloop import build, create_schedule, te
from einloop.codegen import cache, jit
from einloop.codegen.target import Target
from einloop.errors import CacheWarning

from isolated import TESTS_DIR

CHILD = """
import json
import numpy as np
from einloop import te, create_schedule, build
from einloop.codegen import cache, jit

if {forbid_llvm}:
    def no_llvm(*args, **kwargs):
        raise AssertionError("LLVM optimised or generated code despite a cache hit")
    jit._optimise_for = jit.link = no_llvm
n = {n}
A = te.placeholder((n, n), name="A")
B = te.placeholder((n, n), name="B")
k = te.reduce_axis((0, n), name="k")
C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
s = create_schedule(C)
i, j = s[C].op.axis
jo, ji = s[C].split(j, factor=8)
s[C].reorder(i, jo, s[C].op.reduce_axis[0], ji)
s[C].parallel(i)
s[C].vectorize(ji)
f = build(s, [A, B, C])
rng = np.random.default_rng(0)
a = rng.random((n, n), dtype=np.float32)
b = rng.random((n, n), dtype=np.float32)
c = np.zeros((n, n), np.float32)
f(a, b, c)
np.testing.assert_allclose(c, a @ b, rtol=1e-5)
print(json.dumps({{"hits": cache.stats.hits, "misses": cache.stats.misses,
                  "stores": cache.stats.stores, "parallel": f.parallel,
                  "asm": "ret" in f.get_source("asm"), "llvm": "define" in f.get_source("llvm")}}))
"""


def child(cache_dir, forbid_llvm=False, n=48, **env):
    """Popen of a fresh interpreter building a parallel GEMM with *cache_dir* as its cache."""
    code = textwrap.dedent(CHILD.format(forbid_llvm=forbid_llvm, n=n))
    environ = dict(os.environ, EINLOOP_CACHE_DIR=str(cache_dir), PYTHONPATH=TESTS_DIR, **env)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environ)


def result(proc, timeout=180):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def entries(cache_dir):
    return sorted((cache_dir / f"v{cache.SCHEMA}").iterdir())


# a fresh in-process view of the cache -------------------------------------------------------

# the fixture ``fresh`` (an empty compile cache, zeroed stats) is in tests/conftest.py


def add_kernel(n=37, target="llvm"):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    return build(create_schedule(B), [A, B], target=target)


def check_add(f, n=37):
    a = np.arange(n, dtype=np.float32)
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_array_equal(b, a * 2 + 1)


def forget_in_process(monkeypatch):
    monkeypatch.setattr(jit, "_cache", {})


# tests ----------------------------------------------------------------------------------------

def test_second_build_in_a_fresh_process_loads_the_object_without_llvm(tmp_path):
    first = result(child(tmp_path))
    assert (first["hits"], first["misses"], first["stores"]) == (0, 1, 1)
    assert first["parallel"]
    [entry] = entries(tmp_path)
    # the second process would fail if LLVM's optimiser or code generator ran at all
    second = result(child(tmp_path, forbid_llvm=True))
    assert (second["hits"], second["misses"], second["stores"]) == (1, 0, 0)
    assert second["asm"] and second["llvm"]
    assert entries(tmp_path) == [entry]


def test_in_process_hit_gives_the_same_kernel_and_sources(fresh, monkeypatch):
    f = add_kernel()
    forget_in_process(monkeypatch)
    g = add_kernel()
    assert (cache.stats.hits, cache.stats.stores) == (1, 1)
    check_add(g)
    assert g.get_source("llvm") == f.get_source("llvm")
    assert g.get_source("llvm-unopt") == f.get_source("llvm-unopt")
    assert g.metadata["target"] == f.metadata["target"]


def test_other_ir_or_target_misses(fresh, monkeypatch):
    add_kernel(n=37)
    add_kernel(n=41)                                  # other IR
    forget_in_process(monkeypatch)
    check_add(add_kernel(n=37, target="llvm -mattr=-fma"))    # other features
    assert (cache.stats.hits, cache.stats.misses) == (0, 3)
    assert len(entries(fresh)) == 3


def test_key_covers_version_target_and_ir(monkeypatch):
    t = Target.parse("llvm")
    key = cache.entry_key("ir", t, True)
    assert key == cache.entry_key("ir", t, True)
    assert key != cache.entry_key("ir ", t, True)
    assert key != cache.entry_key("ir", t, False)
    assert key != cache.entry_key("ir", Target(t.cpu, t.features + ",-fma", t.triple), True)
    assert key != cache.entry_key("ir", Target("x86-64", t.features, t.triple), True)
    monkeypatch.setattr(cache, "__version__", "999.0")
    assert key != cache.entry_key("ir", t, True)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_corrupt_entry_is_rebuilt_with_a_warning_never_loaded(fresh, monkeypatch, damage):
    add_kernel()
    [path] = entries(fresh)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[:len(data) - 100]
    elif damage == "empty":
        data = b""
    else:
        data = b"\x7fELF" + os.urandom(200)
    path.write_bytes(bytes(data))
    forget_in_process(monkeypatch)
    with pytest.warns(CacheWarning, match="corrupt .*deleted and the kernel rebuilt"):
        f = add_kernel()
    check_add(f)
    assert (cache.stats.hits, cache.stats.rejected, cache.stats.stores) == (0, 1, 2)
    entry = cache.decode(path.read_bytes())             # rewritten, valid
    assert entry.symbol and entry.obj[:4] == b"\x7fELF"


def test_truncation_is_named_in_the_warning(fresh, monkeypatch):
    add_kernel()
    [path] = entries(fresh)
    path.write_bytes(path.read_bytes()[:-1])
    forget_in_process(monkeypatch)
    with pytest.warns(CacheWarning, match="truncated"):
        check_add(add_kernel())


def test_two_processes_filling_the_cache_at_once(tmp_path):
    procs = [child(tmp_path, n=56) for _ in range(2)]
    outs = [result(p) for p in procs]
    assert all(o["misses"] + o["hits"] == 1 for o in outs)
    [path] = entries(tmp_path)                          # one entry, no temp files left
    assert cache.decode(path.read_bytes()).parallel
    assert result(child(tmp_path, forbid_llvm=True, n=56))["hits"] == 1


def test_off_switch(fresh, monkeypatch):
    monkeypatch.setenv("EINLOOP_CACHE", "0")
    assert cache.cache_dir() is None
    check_add(add_kernel())
    assert not any(fresh.iterdir())
    assert cache.stats == cache.CacheStats()


def test_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("EINLOOP_CACHE", raising=False)
    monkeypatch.delenv("EINLOOP_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "einloop"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / ".cache" / "einloop"


def test_unwritable_cache_warns_once_and_still_builds(fresh, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("EINLOOP_CACHE_DIR", str(blocker))
    monkeypatch.setattr(cache, "_warned_dirs", set())
    with pytest.warns(CacheWarning, match="cannot write the compile cache"):
        check_add(add_kernel(n=23), n=23)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        check_add(add_kernel(n=29), n=29)


def test_over_the_size_limit_the_entries_used_longest_ago_go(fresh, monkeypatch):
    for n in (11, 13, 17):
        add_kernel(n=n)
    old, middle, new = sorted(entries(fresh), key=lambda p: p.stat().st_mtime)
    size = old.stat().st_size
    # the oldest entry is used again (a hit touches it): the middle one is now the coldest
    forget_in_process(monkeypatch)
    os.utime(old, (1, 1))
    os.utime(middle, (2, 2))
    os.utime(new, (3, 3))
    check_add(add_kernel(n=11), n=11)
    assert cache.stats.hits == 1 and old.stat().st_mtime > 3
    # room for about three entries: the fourth store evicts the coldest one
    monkeypatch.setenv("EINLOOP_CACHE_MAX_MB", str(3.5 * size / 2**20))
    add_kernel(n=19)
    left = entries(fresh)
    assert middle not in left and old in left and new in left and len(left) == 3


def test_stores_scan_the_directory_on_the_first_every_rescan_and_over_the_limit(fresh,
                                                                                monkeypatch):
    scans = []
    real = cache._entries
    monkeypatch.setattr(cache, "_entries", lambda d: scans.append(d) or real(d))
    monkeypatch.setattr(cache, "RESCAN_STORES", 3)
    for n in (11, 13, 17, 19, 23):
        add_kernel(n=n)
    assert len(scans) == 2                  # the first store, then the fourth (3 stores later)
    size = max(p.stat().st_size for p in entries(fresh))
    monkeypatch.setenv("EINLOOP_CACHE_MAX_MB", str(5.5 * size / 2**20))
    add_kernel(n=29)                        # would pass the limit as this process counts it
    assert len(scans) == 3 and len(entries(fresh)) == 5


def test_a_limit_below_one_entry_keeps_the_entry_just_written(fresh, monkeypatch):
    monkeypatch.setenv("EINLOOP_CACHE_MAX_MB", "0")
    add_kernel(n=11)
    add_kernel(n=13)
    assert len(entries(fresh)) == 1


def test_a_bad_size_limit_warns_and_keeps_the_default(fresh, monkeypatch):
    monkeypatch.setenv("EINLOOP_CACHE_MAX_MB", "lots")
    with pytest.warns(CacheWarning, match=r"EINLOOP_CACHE_MAX_MB='lots' is not a size"):
        check_add(add_kernel(n=23), n=23)
    assert len(entries(fresh)) == 1


def test_cli_shows_and_clears_the_cache(fresh, capsys):
    from einloop.cli import main
    add_kernel(n=11)
    add_kernel(n=13)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert f"compile cache {fresh}: 2 entries" in out and "of 1024 MB" in out
    assert main(["cache", "--clear"]) == 0
    assert "deleted 2 entries" in capsys.readouterr().out
    assert entries(fresh) == []
