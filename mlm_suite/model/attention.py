"""Self-attention: the layer, its kernels, and :func:`attention_backend`, the one place that chooses between
them (flash attention over variable-length sequences straight on the flat tokens, or a padded per-sequence grid
through transformers' ``AttentionInterface``). A layer sees the whole sequence or, in a sliding-window layer, the
tokens within its window. Part of the remote-code payload; the optional kernel import is guarded so remote-code
users without it still load. See docs/models.md.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .configuration_mlm_suite import MlmSuiteConfig
from .layout import SequenceLayout

try:  # torch >= 2.10
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # older torch: the padded grid serves every input
    varlen_attn = None

VARLEN_DTYPES = (torch.float16, torch.bfloat16)
# A sliding window takes varlen_attn's window_size (flash attention's inclusive (left, right) bounds), which the
# first torch releases with varlen_attn lack: their sliding-window layers run on the padded grid.
VARLEN_WINDOWS = varlen_attn is not None and "window_size" in inspect.signature(varlen_attn).parameters


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    layout: SequenceLayout | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention written out; returns ``(segments, len, heads, head_size)`` and the weights.

    With a ``layout`` the weights are returned as ``(batch, heads, seq, seq)`` and the output is
    computed from that very tensor, so gradients reach the attentions a user is handed.
    """
    scores = query @ key.transpose(-1, -2) * scaling  # (segments, heads, len, len)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = scores.float().softmax(dim=-1).to(query.dtype)
    if layout is not None:
        weights = layout.attention_to_batch(weights)  # (batch, heads, seq, seq)
        context = F.dropout(layout.attention_from_batch(weights), p=dropout, training=module.training) @ value
    else:
        context = F.dropout(weights, p=dropout, training=module.training) @ value
    return context.transpose(1, 2).contiguous(), weights


def attention_backend(
    implementation: str,
    reference: torch.Tensor,
    layout: SequenceLayout,
    dropout: float,
    output_attentions: bool,
    window: int | None = None,
) -> str:
    """``"varlen"``, ``"eager"`` or the ``AttentionInterface`` name to run on the padded grid.

    ``"varlen"`` (``torch.nn.attention.varlen.varlen_attn``, torch >= 2.10) runs on the flat
    ``(total, heads, head_size)`` tokens with the layout's ``cu_seqlens``, no padded grid at all: when the
    configured implementation is ``"sdpa"`` (the default), the tensors are fp16/bf16 on CUDA, attention
    dropout is off, no weights are asked for, the layout knows its segment offsets (not the traced dense
    layout) and, in a sliding-window layer (``window``: how far each side a query sees), the kernel takes a
    window. Otherwise the segments go through a padded ``(segments, heads, len, head_size)`` grid and the
    kernel registered under ``config._attn_implementation`` (``"sdpa"``, ``"eager"`` or any registered one),
    so ``model.set_attn_implementation`` switches it as for transformers' own models. Returning attention
    weights always runs eagerly.
    """
    if output_attentions:
        return "eager"
    if (
        implementation == "sdpa"
        and varlen_attn is not None
        and reference.is_cuda
        and reference.dtype in VARLEN_DTYPES
        and dropout == 0.0
        and layout.cu_seqlens is not None
        and (window is None or VARLEN_WINDOWS)
    ):
        return "varlen"
    return implementation


def self_attention(
    module: nn.Module,
    qkv: torch.Tensor,
    layout: SequenceLayout,
    dropout: float,
    output_attentions: bool,
    outputs_for: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(total, 3, heads, head_size)`` projections → ``(total, hidden)`` context, or the rows ``outputs_for``.

    Also returns the attention weights as ``(batch, heads, seq, seq)`` when ``output_attentions``.
    ``module`` is the attention layer (its ``config``, ``training``, ``head_size`` and ``window`` are read).
    """
    window = module.window
    backend = attention_backend(module.config._attn_implementation, qkv, layout, dropout, output_attentions, window)
    if backend == "varlen":
        # Every query is computed even when only the rows outputs_for are kept: queries must keep
        # the segment offsets, and the attention itself is a small part of the last layer.
        query, key, value = (part.contiguous() for part in qkv.unbind(1))  # three (total, heads, head_size)
        length = layout.max_segment_len
        bounds = {} if window is None else {"window_size": (window, window)}
        context = varlen_attn(query, key, value, layout.cu_seqlens, layout.cu_seqlens, length, length, **bounds)
        context = context.flatten(1)  # (total, hidden)
        return (context if outputs_for is None else context[outputs_for]), None
    # (segments, max_len, 3, heads, head_size) → three (segments, heads, max_len, head_size)
    query, key, value = layout.to_segments(qkv).permute(2, 0, 3, 1, 4).unbind(0)
    kernel = ALL_ATTENTION_FUNCTIONS.get_interface(backend, eager_attention_forward) if backend != "eager" else None
    context, weights = (kernel or eager_attention_forward)(
        module,
        query,
        key,
        value,
        layout.additive_attention_mask(query.dtype, window),
        dropout=dropout,
        scaling=module.head_size**-0.5,
        is_causal=False,
        layout=layout if output_attentions else None,
    )
    context = context.flatten(2)  # (segments, max_len, hidden)
    return layout.from_segments(context, outputs_for), weights if output_attentions else None


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class MlmSuiteSelfAttention(nn.Module):
    """Bidirectional multi-head self-attention with a fused QKV projection, over the whole sequence or, when the
    config makes layer ``layer`` a sliding-window one, over the tokens at most ``window`` positions away.

    The kernel is :func:`attention_backend`'s choice (varlen flash attention on CUDA, else the
    kernel of ``config._attn_implementation`` on a padded grid), so ``model.set_attn_implementation``
    switches it as it does for transformers' own models. Returning attention weights runs eagerly.
    """

    is_causal = False

    def __init__(self, config: MlmSuiteConfig, layer: int = 0):
        super().__init__()
        self.window = config.attention_window(layer)
        self.rope_theta = config.layer_rope_theta(layer)
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.use_bias)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)
        self.attention_dropout = config.attention_probs_dropout_prob
        self.config = config

    def forward(
        self,
        hidden: torch.Tensor,
        layout: SequenceLayout,
        rotary: tuple | None,
        output_attentions: bool,
        outputs_for: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every token attends; outputs are returned for the flat token indices ``outputs_for`` (all when None).

        Attention weights, when asked for, come back as ``(batch, heads, seq, seq)``.
        """
        total = hidden.shape[0]
        qkv = self.qkv(hidden).view(total, 3, self.num_heads, self.head_size)  # (total, 3, heads, head_size)
        if rotary is not None:
            cos, sin = rotary
            query, key = qkv[:, 0] * cos + rotate_half(qkv[:, 0]) * sin, qkv[:, 1] * cos + rotate_half(qkv[:, 1]) * sin
            qkv = torch.stack((query, key, qkv[:, 2]), dim=1)
        dropout = self.attention_dropout if self.training else 0.0
        context, weights = self_attention(self, qkv, layout, dropout, output_attentions, outputs_for)
        return self.out(context), weights


__all__ = [
    "MlmSuiteSelfAttention",
    "VARLEN_WINDOWS",
    "attention_backend",
    "eager_attention_forward",
    "self_attention",
    "varlen_attn",
]
