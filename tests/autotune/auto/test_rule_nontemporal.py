"""Rule 6's streaming stores: a stage computed at the root that writes a tensor at least as
large as the machine's last-level cache may write it with ``s[T].nontemporal()``; on by
default, searched, never for a reduction or a smaller tensor, and every config computes what
NumPy does.  The machine states its cache, so the tests hold whatever the host's is."""
import dataclasses
import random

import pytest

import ops
from rule_ops import AVX2, check_steps, gemm_relu, kinds, steps_of
from einloop.autotune.space.sketch import MachineModel, generate_space
from einloop.autotune.space.sketch.rules import NONTEMPORAL_CHOICES
from einloop.errors import ArgumentError

#: AVX2, 2 cores, with a 64 KiB last-level cache: small operators write "beyond the cache"
SMALL_CACHE = dataclasses.replace(AVX2, cache_bytes=64 * 1024)


def streaming_knobs(sp):
    return sorted(name for name in sp.config_space.knobs if name.endswith(".nontemporal"))


def test_an_output_beyond_the_cache_streams_by_default():
    ins, outs, ref = ops.elementwise_chain(300, 230)           # 270 KiB written
    sp = generate_space(outs, SMALL_CACHE)
    (name,) = streaming_knobs(sp)
    assert sp.config_space.knobs[name].entities[0].val == NONTEMPORAL_CHOICES[0] == 1
    seed = sp.seed_configs(1)[0]
    steps = sp.steps(seed)
    assert kinds(steps).count("nontemporal") == 1
    check_steps(steps, ins, outs, ref)
    off = steps_of(sp, **{name.replace(".", "__"): 0})
    assert "nontemporal" not in kinds(off)
    check_steps(off, ins, outs, ref)


def test_the_same_output_within_the_cache_has_no_knob():
    ins, outs, ref = ops.elementwise_chain(300, 230)
    assert streaming_knobs(generate_space(outs, AVX2)) == []   # 32 MiB assumed


def test_a_gemm_epilogue_beyond_the_cache_may_stream_and_the_reduction_never():
    ins, outs, ref = gemm_relu(96, 200, 16, output_gemm=True)  # C and R: 75 KiB each
    sp = generate_space(outs, SMALL_CACHE)
    assert streaming_knobs(sp) == ["R.nontemporal"]            # C is the tiled reduction
    cs = sp.config_space
    rng = random.Random(3)
    for index in rng.sample(range(len(cs)), min(10, len(cs))):
        check_steps(sp.steps(cs.get(index)), ins, outs, ref)


def test_the_cache_size_comes_from_the_machine_model():
    host = MachineModel.of("llvm")
    foreign = MachineModel.of("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1")
    assert host.cache_bytes >= 64 * 1024 and foreign.cache_bytes >= 64 * 1024   # any CPU
    with pytest.raises(ArgumentError, match="cache_bytes must be a positive int"):
        MachineModel(8, 16, 2, cache_bytes=0)


@pytest.mark.parametrize("op, sizes", [("softmax", (200, 333)), ("layer_norm", (170, 401)),
                                       ("elementwise_chain", (300, 230))])
def test_sampled_configs_with_and_without_streaming_compute_the_same(op, sizes):
    ins, outs, ref = getattr(ops, op)(*sizes)
    sp = generate_space(outs, SMALL_CACHE)
    assert streaming_knobs(sp)
    cs = sp.config_space
    rng = random.Random(11)
    streamed = plain = 0
    for index in rng.sample(range(len(cs)), min(12, len(cs))):
        steps = sp.steps(cs.get(index))
        if "nontemporal" in kinds(steps):
            streamed += 1
        else:
            plain += 1
        check_steps(steps, ins, outs, ref)
    assert streamed > 0 and plain > 0
