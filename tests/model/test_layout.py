"""``SequenceLayout`` seen from the model: a flattened batch gives the padded batch's outputs and gradients for every
head, and a compiled step traces either layout without a graph break and recompiles a bounded number of times.

The padded eager path is the reference: a flattened batch and a compiled step must give the same numbers for the
real tokens (``flatten_batch`` itself: tests/data/test_flattening.py; export: tests/test_export.py).
"""

from __future__ import annotations

import random

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend
from transformers import DataCollatorWithFlattening

from mlm_suite import (
    MlmSuiteForMaskedLM,
    MlmSuiteForPairClassification,
    MlmSuiteForPreTraining,
    MlmSuiteForSentenceEmbedding,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.model.layout import SequenceLayout
from tests.helpers import ALL_HEADS, ARCHITECTURES, layout_config, padded_batch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@pytest.mark.parametrize("head", ALL_HEADS, ids=lambda head: head.__name__)
def test_flattened_batch_gives_the_padded_outputs_for_every_head(head, architecture):
    torch.manual_seed(0)
    model = head(layout_config(architecture)).eval()
    batch = padded_batch()
    del batch["labels"]
    flat = flatten_batch(batch)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        padded_out, flat_out = model(**batch), model(**flat)
    for name, value in padded_out.items():
        if value.dim() == 3 or name in ("start_logits", "end_logits"):  # per token
            torch.testing.assert_close(flat_out[name][0], value[real], atol=1e-5, rtol=1e-5, msg=name)
        else:  # per sequence: one row per flattened sequence, as one per padded row
            torch.testing.assert_close(flat_out[name], value, atol=1e-5, rtol=1e-5, msg=name)


def test_flattened_batch_pools_each_sequence_by_its_mean():
    torch.manual_seed(0)
    model = MlmSuiteForSequenceClassification(layout_config(classifier_pooling="mean")).eval()
    batch = padded_batch()
    del batch["labels"]
    with torch.no_grad():
        torch.testing.assert_close(model(**flatten_batch(batch)).logits, model(**batch).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", (MlmSuiteForMaskedLM, MlmSuiteForPreTraining), ids=lambda head: head.__name__)
def test_flattened_mlm_training_step_equals_the_padded_one(head):
    torch.manual_seed(0)
    model = head(layout_config()).train()
    batch = padded_batch()
    if head is MlmSuiteForPreTraining:
        batch["next_sentence_label"] = torch.tensor([0, 1, 1, 0])
    losses, grads = [], []
    for inputs in (batch, flatten_batch(batch)):
        model.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[1], losses[0])
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=name)


def test_masked_lm_positions_also_serve_a_padded_batch():
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(layout_config()).train()
    batch = padded_batch()
    positions = (batch["labels"].reshape(-1) != -100).nonzero().squeeze(1)  # flat indices into batch * seq
    without, with_positions = model(**batch), model(**batch, masked_lm_positions=positions)
    torch.testing.assert_close(with_positions.logits, without.logits)
    torch.testing.assert_close(with_positions.loss, without.loss)


def test_transformers_data_collator_with_flattening_feeds_the_model():
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(layout_config()).eval()
    sequences = [[5, 17, 33, 8, 9], [12, 40], [7, 7, 61, 22, 13, 50, 4]]
    features = [{"input_ids": ids} for ids in sequences]
    flat = DataCollatorWithFlattening(return_flash_attn_kwargs=True)(features)
    assert set(flat) >= {"cu_seq_lens_q", "max_length_q", "position_ids"}
    flat.pop("labels")
    padded = {"input_ids": torch.zeros(3, 7, dtype=torch.long), "attention_mask": torch.zeros(3, 7, dtype=torch.long)}
    for row, ids in enumerate(sequences):
        padded["input_ids"][row, : len(ids)] = torch.tensor(ids)
        padded["attention_mask"][row, : len(ids)] = 1
    with torch.no_grad():
        expected = model(**padded).logits[padded["attention_mask"].bool()]
        torch.testing.assert_close(model(**flat).logits[0], expected, atol=1e-5, rtol=1e-5)


def test_flattened_batch_rejects_padding_and_a_missing_bound():
    model = MlmSuiteModel(layout_config()).eval()
    flat = flatten_batch({"input_ids": torch.tensor([[5, 6, 7, 8]])})
    with pytest.raises(ValueError, match="pass neither attention_mask"):
        model(**flat, attention_mask=torch.ones(1, 4, dtype=torch.long))
    del flat["max_length_q"]
    with pytest.raises(ValueError, match="needs max_length_q"):
        model(**flat)
    with pytest.raises(ValueError, match="flattened batch"):
        SequenceLayout.from_offsets((2, 4), torch.tensor([0, 4], dtype=torch.int32), 4)


@pytest.mark.compile
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@pytest.mark.parametrize("head", (MlmSuiteForMaskedLM, MlmSuiteForPreTraining), ids=lambda head: head.__name__)
def test_mlm_training_step_compiles_without_a_graph_break(head, architecture):
    torch.manual_seed(0)
    model = head(layout_config(architecture)).train()
    batch = padded_batch()
    if head is MlmSuiteForPreTraining:
        batch["next_sentence_label"] = torch.tensor([0, 1, 1, 0])
    torch._dynamo.reset()
    for inputs in (flatten_batch(batch, 8), batch):  # flattened: padding-free; padded: the traced dense layout
        explanation = torch._dynamo.explain(model)(**inputs)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        assert explanation.graph_count == 1


@pytest.mark.compile
@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
def test_contrastive_training_step_compiles_without_a_graph_break(mode):
    from mlm_suite.training.retrieval import RetrievalCollator

    torch.manual_seed(0)
    model = MlmSuiteForSentenceEmbedding(layout_config(sentence_pooling=mode, normalize_embeddings=True)).train()
    batch = RetrievalCollator()([{"query": [5, 6, 7], "document": [8, 9, 10, 11], "negatives": [[12, 13]]},
                                 {"query": [14, 15], "document": [16]}])
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(**batch)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.slow
@pytest.mark.compile
def test_compiled_training_compiles_a_bounded_number_of_times_and_matches_eager():
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(layout_config()).train()
    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter)
    compiles = []
    shapes = [(4, 16), (8, 32), (3, 64), (16, 48), (2, 9), (5, 40), (8, 32), (1, 5), (1, 30), (6, 20)]
    for step, (rows, seq_len) in enumerate(shapes):
        lengths = [random.Random(step * 31 + row).randint(2, seq_len) for row in range(rows)]
        flat = flatten_batch(padded_batch(lengths, seq_len, seed=step), max_length_multiple=8)
        model.zero_grad()
        compiled_loss = compiled(**flat).loss
        compiled_loss.backward()
        compiled_grad = model.encoder.embeddings.word_embeddings.weight.grad.clone()
        model.zero_grad()
        eager_loss = model(**flat).loss
        eager_loss.backward()
        torch.testing.assert_close(compiled_loss, eager_loss)
        torch.testing.assert_close(compiled_grad, model.encoder.embeddings.word_embeddings.weight.grad)
        compiles.append(counter.frame_count)
    # The first batch compiles with static shapes, the second with its varying sizes dynamic; after
    # that only a batch of a single sequence compiles once more (dynamo specialises sizes of 1).
    assert compiles == [1, 2, 2, 2, 2, 2, 2, 3, 3, 3]


@pytest.mark.parametrize(
    "head", (MlmSuiteForSequenceClassification, MlmSuiteForPairClassification, MlmSuiteForTokenClassification),
    ids=lambda head: head.__name__,
)
def test_flattened_finetuning_step_equals_the_padded_one(head):
    """The fine-tuning collators' flattened batches (labels per row, or per token) train as the padded ones."""
    torch.manual_seed(0)
    model = head(layout_config()).train()
    batch = padded_batch()
    per_row = head is not MlmSuiteForTokenClassification
    if per_row:
        batch["labels"] = torch.tensor([0, 2, 1, 2])
    else:
        batch["labels"] = batch["labels"].clamp(max=2).masked_fill(batch["labels"] < 0, -100)
    flat = flatten_batch(batch, labels_per_row=per_row, masked_lm_positions=False)
    assert "masked_lm_positions" not in flat
    losses, grads = [], []
    for inputs in (batch, flat):
        model.zero_grad()
        loss = model(**inputs, num_items_in_batch=torch.tensor(7)).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[1], losses[0])
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=name)


@cuda
def test_cuda_flattened_training_step_has_no_host_synchronisation():
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(layout_config()).cuda().train()
    flat = {k: v.cuda() if torch.is_tensor(v) else v for k, v in flatten_batch(padded_batch(), 8).items()}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(**flat).loss.backward()  # warm-up: lazy initialisations may synchronise
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            model(**flat).loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
