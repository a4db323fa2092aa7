"""The last-level cache size read from sysfs (``einloop.runtime.cpu``), on fake trees."""
import pytest

from einloop.runtime import cpu


def fake_tree(root, caches):
    for n, (level, kind, size) in enumerate(caches):
        d = root / f"index{n}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return str(root)


@pytest.mark.parametrize("caches, expect", [
    ([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
      (3, "Unified", "32768K")], 32 << 20),                       # a server x86 core
    ([(1, "Data", "64K"), (2, "Unified", "1M")], 1 << 20),          # no L3: the L2
    ([(1, "Instruction", "64K"), (4, "Unified", "128M"), (3, "Unified", "16M")], 128 << 20),
])
def test_the_highest_level_data_or_unified_cache_is_the_last_level(tmp_path, caches, expect):
    assert cpu.host_last_level_cache_bytes.__wrapped__(fake_tree(tmp_path, caches)) == expect


def test_unreadable_entries_are_skipped(tmp_path):
    root = fake_tree(tmp_path, [(2, "Unified", "1024K"), (3, "Unified", "lots")])
    (tmp_path / "index2").mkdir()                                   # no files at all
    assert cpu.host_last_level_cache_bytes.__wrapped__(root) == 1 << 20


def test_the_host_has_a_size_or_none():
    size = cpu.host_last_level_cache_bytes()
    assert size is None or size >= 64 * 1024
