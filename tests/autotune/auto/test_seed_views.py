"""The first seed config inlines a chain of layout views into its last view: an attention
kernel reading ``qkv[0]`` squeezed, reshaped and permuted into heads (the shapes
``nn.TransformerEncoderLayer`` gives the torch.compile backend) must not copy Q, K and V once
per view at every tile of its products.  Results equal the default schedule's."""
import numpy as np
import pytest

from einloop import build, create_schedule, lower, nn, te
from einloop.autotune.task.auto import AutoTask

S, B, H, D = 24, 2, 2, 16          # sequence, batch, heads, head size


def _heads(qkv, which, name):
    """``qkv[which]`` [S, B, H*D] as [B*H, S, D], through views only."""
    x = nn.slice_axis(qkv, 0, which, which + 1, name=f"{name}_slice")
    x = nn.squeeze(x, 0, name=f"{name}_squeeze")
    x = nn.reshape(x, (S, B * H, D), name=f"{name}_reshape")
    return nn.permute(x, (1, 0, 2), name=f"{name}_permute")


def attention():
    qkv = te.placeholder((3, S, B, H * D), name="qkv")
    q, k, v = (_heads(qkv, n, name) for n, name in enumerate("qkv"))
    scores = nn.matmul(q, nn.permute(k, (0, 2, 1), name="kt"), name="scores")
    return [qkv, nn.matmul(nn.softmax(scores, -1), v, name="out")]


def _first_seed(tensors, target="llvm", cores=None):
    """(schedule, args, lowered code) of the first seed config of *tensors*' task."""
    task = AutoTask.of_tensors(tensors, target, cores)
    s, args = task.instantiate(task.seed_configs(1)[0])
    return s, args, str(lower(s, args))


def _check_equals_default(tensors, s, args):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, S, B, H * D), dtype=np.float32)
    got, want = (np.empty((B * H, S, D), np.float32) for _ in range(2))
    build(s, args)(x, got)
    build(create_schedule(tensors[-1]), tensors)(x, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _allocations(code):
    """Buffer name -> indentation of its ``allocate`` line."""
    return {line.split()[1].rstrip(":"): len(line) - len(line.lstrip())
            for line in code.splitlines() if line.strip().startswith("allocate")}


def test_first_seed_copies_no_view_but_the_last_of_a_chain():
    tensors = attention()
    s, args, code = _first_seed(tensors)
    views = [c for c in _allocations(code) if c.split("_")[-1] in ("slice", "squeeze", "reshape")]
    assert views == [], f"views copied by the first seed: {views}\n{code}"
    _check_equals_default(tensors, s, args)


@pytest.mark.parametrize("target, cores", [("llvm", None), ("llvm -mcpu=znver3", 2),
                                           ("llvm -mcpu=sapphirerapids", 1)])
def test_first_seed_copies_k_transposed_per_block_and_reads_q_and_v_in_place(target, cores):
    """The scores' columns run along K's rows: read through the views, each vector of K.T
    would be a gather.  The first seed copies the block of K.T each iteration of the
    product's parallel loop reads (in cache while it is read), and reads Q (broadcast along
    the columns) and V (contiguous along them) in place, no copy at all; for this machine and
    for an AVX2 and an AVX-512 one (the seed's schedule then runs here, on the host)."""
    tensors = attention()
    s, args, code = _first_seed(tensors, target, cores)
    allocs = _allocations(code)
    parallel = next(line for line in code.splitlines() if line.strip().startswith("parallel for"))
    assert "kt" in allocs and allocs["kt"] > len(parallel) - len(parallel.lstrip()), code
    assert not {"q_permute", "v_permute"} & set(allocs), code
    _check_equals_default(tensors, s, args)
