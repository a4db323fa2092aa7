"""The decompositions the backend traces ATen graphs with: PyTorch's core-ATen set, and fused
native operators einloop would otherwise leave to PyTorch whole.

``nn.TransformerEncoderLayer`` in inference takes a fast path, one native call
(``aten._transformer_encoder_layer_fwd``) that has no decomposition in PyTorch; here it is
written out in ATen operators (projections, softmax attention, layer norms, feed-forward), so
the backend fuses and tunes its parts like any other model's.  With an attention mask it is
left to PyTorch (the decomposition returns ``NotImplemented``).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                   mask_type=None):
    if mask is not None or src.dim() != 3:
        return NotImplemented
    batch, seq, _ = src.shape
    head = embed_dim // num_heads

    def attention(x):
        qkv = F.linear(x, qkv_weight, qkv_bias).view(batch, seq, 3, num_heads, head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(head))
        out = torch.matmul(torch.softmax(scores, -1), v)
        return F.linear(out.transpose(1, 2).reshape(batch, seq, embed_dim), proj_weight,
                        proj_bias)

    def feed_forward(x):
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    def norm(x, w, b):
        return F.layer_norm(x, (embed_dim,), w, b, eps)

    if norm_first:
        x = src + attention(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attention(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


def _flash_attention_cpu(query, key, value, dropout_p=0.0, is_causal=False, attn_mask=None,
                         scale=None):
    """``_scaled_dot_product_flash_attention_for_cpu``: ``(softmax(q k^T * scale) v,
    logsumexp of the scaled scores per query)``.  PyTorch's own decomposition returns the
    attention weights where the op returns the log-sum-exp, which its backward reads: with it,
    training graphs got wrong gradients.

    As the op does: ``scale`` 0 is a scale (only None means 1/sqrt(d)); fewer key and value
    heads than query heads are shared by groups of query heads (``enable_gqa``), each key head
    by the query heads next to each other; a query whose every key is masked out attends to
    nothing (its output is 0, not the NaN of a softmax over no keys)."""
    if dropout_p != 0.0:
        return NotImplemented
    heads, kv_heads = query.shape[-3] if query.dim() > 2 else 1, \
        key.shape[-3] if key.dim() > 2 else 1
    if heads != kv_heads:
        if kv_heads == 0 or heads % kv_heads:
            return NotImplemented
        key = key.repeat_interleave(heads // kv_heads, dim=-3)
        value = value.repeat_interleave(heads // kv_heads, dim=-3)
    d = query.shape[-1]
    scores = torch.matmul(query, key.transpose(-2, -1)) * \
        (1.0 / math.sqrt(d) if scale is None else scale)
    if is_causal:
        n, m = scores.shape[-2], scores.shape[-1]
        keep = torch.ones(n, m, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
            else scores + attn_mask
        # a row with no key left: zero weights, and the log-sum-exp the op gives it (0: its
        # backward then finds zero probabilities there, where -inf would make NaN of them)
        weights = aten._safe_softmax(scores, -1)
        lse = torch.logsumexp(scores, -1)
        return torch.matmul(weights, value), lse.masked_fill(lse == float("-inf"), 0.0)
    return torch.matmul(torch.softmax(scores, -1), value), torch.logsumexp(scores, -1)


def decompositions() -> dict:
    """ATen overload -> decomposition, for ``aot_autograd(decompositions=...)``."""
    from torch._decomp import core_aten_decompositions
    table = dict(core_aten_decompositions())
    table.pop(aten._safe_softmax.default, None)         # lowered whole: one softmax, no any()
    table.pop(aten.embedding_dense_backward.default, None)  # lowered whole: a scatter
    table.pop(aten.index_add.default, None)                  # lowered whole: a scatter and an add
    table[aten._transformer_encoder_layer_fwd.default] = _encoder_layer
    table[aten._scaled_dot_product_flash_attention_for_cpu.default] = _flash_attention_cpu
    return table
