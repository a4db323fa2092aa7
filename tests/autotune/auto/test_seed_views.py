"""The first seed config inlines a chain of layout views into its last view: an attention
kernel reading ``qkv[0]`` squeezed, reshaped and permuted into heads (the shapes
``nn.TransformerEncoderLayer`` gives the torch.compile backend) must not copy Q, K and V once
per view at every tile of its products.  Results equal the default schedule's."""
import numpy as np

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


def test_first_seed_copies_no_view_but_the_last_of_a_chain():
    tensors = attention()
    task = AutoTask.of_tensors(tensors)
    s, args = task.instantiate(task.seed_configs(1)[0])
    code = str(lower(s, args))
    copied = [line.split()[1].rstrip(":") for line in code.splitlines()
              if line.strip().startswith("allocate")]
    views = [c for c in copied if c.split("_")[-1] in ("slice", "squeeze", "reshape")]
    assert views == [], f"views copied by the first seed: {views}\n{code}"

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, S, B, H * D), dtype=np.float32)
    got, want = (np.empty((B * H, S, D), np.float32) for _ in range(2))
    build(s, args)(x, got)
    build(create_schedule(tensors[-1]), tensors)(x, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
