"""The attention backend choice (``attention.attention_backend``) and, where a GPU is present, the varlen kernel
against the dense grid (also in sliding-window layers) and HF BERT (CI has none)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mlm_suite import MlmSuiteModel
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.model import attention
from mlm_suite.model.layout import SequenceLayout
from tests.helpers import LAYOUT_VOCAB, layout_config, padded_batch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_varlen_is_chosen_only_where_it_applies(monkeypatch):
    monkeypatch.setattr(attention, "varlen_attn", object())
    layout = SimpleNamespace(cu_seqlens=torch.tensor([0, 3], dtype=torch.int32))
    cuda_bf16 = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16)
    choose = attention.attention_backend
    assert choose("sdpa", cuda_bf16, layout, 0.0, False) == "varlen"
    assert choose("sdpa", SimpleNamespace(is_cuda=True, dtype=torch.float16), layout, 0.0, False) == "varlen"
    assert choose("sdpa", SimpleNamespace(is_cuda=True, dtype=torch.float32), layout, 0.0, False) == "sdpa"
    assert choose("sdpa", SimpleNamespace(is_cuda=False, dtype=torch.bfloat16), layout, 0.0, False) == "sdpa"
    assert choose("sdpa", cuda_bf16, layout, 0.1, False) == "sdpa"  # varlen_attn has no dropout
    assert choose("sdpa", cuda_bf16, layout, 0.0, True) == "eager"  # attention weights
    assert choose("eager", cuda_bf16, layout, 0.0, False) == "eager"
    assert choose("sdpa", cuda_bf16, SimpleNamespace(cu_seqlens=None), 0.0, False) == "sdpa"  # traced dense layout
    monkeypatch.setattr(attention, "VARLEN_WINDOWS", True)
    assert choose("sdpa", cuda_bf16, layout, 0.0, False, window=2) == "varlen"  # a sliding-window layer
    monkeypatch.setattr(attention, "VARLEN_WINDOWS", False)  # a varlen_attn without window_size
    assert choose("sdpa", cuda_bf16, layout, 0.0, False, window=2) == "sdpa"
    assert choose("sdpa", cuda_bf16, layout, 0.0, False) == "varlen"
    monkeypatch.setattr(attention, "varlen_attn", None)  # torch < 2.10
    assert choose("sdpa", cuda_bf16, layout, 0.0, False) == "sdpa"


@cuda
def test_cuda_varlen_equals_the_grid_in_bf16_and_hf_bert_in_fp32():
    from transformers import BertConfig, BertModel

    from mlm_suite.conversion.bert import convert_bert_state_dict

    torch.manual_seed(0)
    sizes = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    bert = BertModel(BertConfig(vocab_size=LAYOUT_VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **sizes))
    model = MlmSuiteModel(layout_config("bert", **sizes))
    model.load_state_dict(convert_bert_state_dict(bert.state_dict(), 2))
    bert, model = bert.cuda().eval(), model.cuda().eval()
    batch = {k: v.cuda() for k, v in padded_batch().items() if k != "labels"}
    real = batch["attention_mask"].bool()
    flat = {k: v.cuda() if torch.is_tensor(v) else v for k, v in flatten_batch(batch).items()}
    with torch.no_grad():
        reference = bert(**batch).last_hidden_state[real]
        torch.testing.assert_close(model(**batch).last_hidden_state[real], reference, atol=1e-4, rtol=1e-4)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert attention.attention_backend("sdpa", reference.bfloat16(), model.layout((1, 29), "cuda", **{
                "cu_seq_lens": flat["cu_seq_lens_q"], "max_length": flat["max_length_q"]}), 0.0, False) == "varlen"
            varlen_padded = model(**batch).last_hidden_state[real].float()
            varlen_flat = model(**flat).last_hidden_state[0].float()
            model.set_attn_implementation("eager")
            grid = model(**batch).last_hidden_state[real].float()
            model.set_attn_implementation("sdpa")
    torch.testing.assert_close(varlen_padded, grid, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(varlen_flat, grid, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(grid, reference, atol=1e-1, rtol=1e-1)


@cuda
def test_cuda_varlen_sliding_window_sees_what_the_grid_s_window_mask_lets_through():
    """varlen_attn's window_size (inclusive bounds either side) against the grid's mask, on sharp random attention
    where the window changes the result far beyond bf16's tolerance."""
    assert attention.VARLEN_WINDOWS, "this torch's varlen_attn has no window_size: sliding layers run on the grid"
    config = layout_config("modernbert")
    config._attn_implementation = "sdpa"
    layer = attention.MlmSuiteSelfAttention(config, 0).cuda().eval()  # layer 0: sliding, 2 tokens either side
    lengths = torch.tensor([11, 6, 9, 3])
    cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32).cuda()
    layout = SequenceLayout.from_offsets((1, int(lengths.sum())), cu_seqlens, int(lengths.max()))
    generator = torch.Generator("cuda").manual_seed(0)
    qkv = 3 * torch.randn(int(lengths.sum()), 3, layer.num_heads, layer.head_size, device="cuda", generator=generator)
    qkv = qkv.bfloat16()
    assert attention.attention_backend(config._attn_implementation, qkv, layout, 0.0, False, layer.window) == "varlen"
    varlen = attention.self_attention(layer, qkv, layout, 0.0, False)[0].float()
    config._attn_implementation = "eager"
    grid = attention.self_attention(layer, qkv, layout, 0.0, False)[0].float()
    layer.window = None
    full = attention.self_attention(layer, qkv, layout, 0.0, False)[0].float()
    torch.testing.assert_close(varlen, grid, atol=2e-2, rtol=2e-2)
    assert (grid - full).abs().max() > 0.2


@cuda
def test_cuda_packed_documents_stay_isolated_under_varlen():
    torch.manual_seed(0)
    model = MlmSuiteModel(layout_config()).cuda().eval()
    first, second = torch.randint(5, LAYOUT_VOCAB, (1, 7)).cuda(), torch.randint(5, LAYOUT_VOCAB, (1, 5)).cuda()
    packed = flatten_batch({"input_ids": torch.cat([first, second], dim=1).cpu(),
                            "document_ids": torch.tensor([[0] * 7 + [1] * 5])})
    packed = {k: v.cuda() if torch.is_tensor(v) else v for k, v in packed.items()}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        together = model(**packed).last_hidden_state[0].float()
        alone = torch.cat([model(input_ids=first).last_hidden_state[0], model(input_ids=second).last_hidden_state[0]]).float()
    torch.testing.assert_close(together, alone, atol=3e-2, rtol=3e-2)
