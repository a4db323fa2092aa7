"""What a target's code may use, however the target is spelled: the host, ``-mcpu=NAME`` (whose
features LLVM knows but llvmlite does not list: asked of LLVM by probes, einloop.codegen.isa),
``-mattr`` edits; and the auto-scheduler's machine model read from them."""
import llvmlite.binding as llvm
import pytest

from einloop.autotune.space.sketch import MachineModel
from einloop.codegen import Target, isa
from einloop.errors import ArgumentError


@pytest.mark.parametrize("spec, on, off", [
    ("llvm -mcpu=skylake-avx512", ["avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq",
                                   "avx512vl"], ["avx512fp16", "avx512bf16"]),
    ("llvm -mcpu=sapphirerapids", ["avx512f", "avx512fp16", "avx512bf16"], []),
    ("llvm -mcpu=cooperlake", ["avx512f", "avx512vnni", "avx512bf16"], ["avx512fp16"]),
    ("llvm -mcpu=alderlake", ["avx2", "avxvnni"], ["avx512f", "avx512bf16"]),
    ("llvm -mcpu=haswell", ["avx", "avx2", "fma", "f16c", "bmi2"], ["avx512f", "avx512bw",
                                                                     "avx512bf16"]),
    ("llvm -mcpu=x86-64", [], ["avx", "avx2", "fma", "f16c", "avx512f"]),
    ("llvm -mcpu=x86-64-v3", ["avx2", "fma"], ["avx512f"]),
    ("llvm -mcpu=x86-64 -mattr=+avx512f", ["avx512f", "avx2", "fma"], ["avx512bw"]),
    ("llvm -mcpu=skylake-avx512 -mattr=+avx2,-avx512f", ["avx2"], ["avx512f", "avx512bw"]),
])
def test_a_named_cpu_has_the_features_llvm_generates_code_for(spec, on, off):
    t = Target.parse(spec)
    assert all(t.has_feature(f) for f in on), t.full_features()
    assert all(t.lacks_feature(f) and not t.has_feature(f) for f in off), t.full_features()
    assert t.features == Target.parse(spec).features      # the spelling itself is unchanged


def test_the_host_features_are_llvms_list_and_probes_agree_with_it():
    """On the host, LLVM's own list and the probes say the same for every probed feature."""
    host = Target.parse("llvm")
    listed = {f[1:]: f[0] == "+" for f in llvm.get_host_cpu_features().flatten().split(",") if f}
    for name in isa.PROBES:
        if name in listed:
            assert host.has_feature(name) == listed[name], name


def test_removing_a_feature_removes_those_that_need_it():
    """``-avx512f`` on the host also turns off the listed ``+avx512bw`` (LLVM does)."""
    t = Target.parse("llvm -mattr=-avx512f")
    assert t.lacks_feature("avx512f") and t.lacks_feature("avx512bw")


@pytest.mark.parametrize("spec, lanes, registers", [
    ("llvm -mcpu=skylake-avx512", 16, 32), ("llvm -mcpu=znver4", 16, 32),
    ("llvm -mcpu=haswell", 8, 16), ("llvm -mcpu=x86-64-v3", 8, 16),
    ("llvm -mcpu=x86-64", 4, 16), ("llvm -mcpu=x86-64 -mattr=+avx512f", 16, 32),
    ("llvm -mcpu=skylake-avx512 -mattr=-avx512f", 8, 16)])
def test_the_machine_model_reads_lanes_and_registers_from_the_target(spec, lanes, registers):
    m = MachineModel.of(spec, cores=3)
    assert (m.lanes, m.registers, m.cores) == (lanes, registers, 3)


def test_the_host_model_follows_the_host_features():
    m = MachineModel.of("llvm")
    host = Target.parse("llvm")
    assert m.lanes == (16 if host.has_feature("avx512f") else 8 if host.has_feature("avx") else 4)
    assert m.registers == (32 if m.lanes == 16 else 16)


def test_the_model_cores_are_the_threads_a_kernel_gets(monkeypatch):
    """EINLOOP_NUM_THREADS (what the thread runtime starts) unless the cores are given."""
    monkeypatch.setenv("EINLOOP_NUM_THREADS", "3")
    assert MachineModel.of("llvm -mcpu=haswell").cores == 3
    assert MachineModel.of("llvm -mcpu=haswell", cores=64).cores == 64
    monkeypatch.delenv("EINLOOP_NUM_THREADS")
    # the CPUs this process may use, or PyTorch's thread count once einloop.torch is imported
    from einloop.runtime import default_num_threads
    assert MachineModel.of("llvm").cores == default_num_threads()


@pytest.mark.parametrize("bad", [0, -2, 2.0, "4", True])
def test_a_bad_core_count_is_an_argument_error(bad):
    with pytest.raises(ArgumentError, match="cores must be a positive int"):
        MachineModel.of("llvm -mcpu=haswell", cores=bad)
