"""``flatten_batch``: a padded batch laid end to end as one row with sequence offsets, and the masking collator's
flattened batches (the model's side of the same numbers is in tests/model/test_layout.py)."""

from __future__ import annotations

import random

import pytest
import torch

from mlm_suite.data.pretraining import DataCollatorForMaskedLM
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.model.layout import SequenceLayout
from tests.helpers import padded_batch


def test_flatten_batch_lays_sequences_end_to_end_with_offsets_and_labelled_positions():
    batch = padded_batch()
    flat = flatten_batch(batch, max_length_multiple=8)
    real = batch["attention_mask"].bool()
    assert torch.equal(flat["input_ids"][0], batch["input_ids"][real])
    assert torch.equal(flat["token_type_ids"][0], batch["token_type_ids"][real])
    assert flat["cu_seq_lens_q"].tolist() == [0, 11, 17, 26, 29] and flat["cu_seq_lens_q"].dtype == torch.int32
    assert flat["max_length_q"] == 16 and flat["max_length_k"] == 16  # 11 rounded up to a multiple of 8
    assert flat["position_ids"][0].tolist() == [*range(11), *range(6), *range(9), *range(3)]
    labelled = flat["labels"][0] != -100
    assert torch.equal(flat["masked_lm_positions"], labelled.nonzero().squeeze(1))
    assert flatten_batch(batch)["max_length_q"] == 11


def test_flatten_batch_keeps_the_padded_positions_with_left_padding():
    batch = padded_batch(left=True)
    flat = flatten_batch(batch)
    layout = SequenceLayout.from_inputs(tuple(batch["input_ids"].shape), torch.device("cpu"), batch["attention_mask"])
    assert torch.equal(flat["position_ids"][0], layout.positions)
    assert flat["position_ids"][0].tolist() == [*range(11), *range(6), *range(9), *range(3)]  # from each row's start


def test_flatten_batch_makes_each_packed_document_a_sequence():
    input_ids = torch.arange(1, 11).view(1, 10)
    position_ids = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3, 0]])
    flat = flatten_batch({"input_ids": input_ids, "position_ids": position_ids})
    assert flat["cu_seq_lens_q"].tolist() == [0, 3, 5, 9, 10] and flat["max_length_q"] == 4
    documents = {"input_ids": input_ids, "document_ids": torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2, 3]])}
    assert flatten_batch(documents)["position_ids"].tolist() == position_ids.tolist()
    with pytest.raises(ValueError, match="NSP pairs cannot be packed"):
        flatten_batch({"input_ids": input_ids, "position_ids": position_ids, "next_sentence_label": torch.tensor([0])})
    with pytest.raises(ValueError, match="cannot flatten"):
        flatten_batch({"input_ids": input_ids, "pixel_values": input_ids})


def test_flatten_batch_refuses_row_labels_of_packed_rows():
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long), "position_ids": torch.tensor([[0, 1, 0, 1]]),
             "labels": torch.tensor([1])}
    with pytest.raises(ValueError, match="classified sequences cannot be packed"):
        flatten_batch(batch, labels_per_row=True)


def test_masking_collator_flattens_with_the_same_masks(tokenizer):
    features = [
        {"input_ids": [tokenizer.cls_token_id, *random.Random(row).choices(range(2000, 3000), k=length), tokenizer.sep_token_id],
         "example_index": row}
        for row, length in enumerate((9, 4, 14))
    ]
    padded = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.3, seed=3)(features)
    flat = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.3, seed=3, flatten=True, pad_to_multiple_of=8)(features)
    real = padded["attention_mask"].bool()
    assert torch.equal(flat["input_ids"][0], padded["input_ids"][real])
    assert torch.equal(flat["labels"][0], padded["labels"][real])
    assert flat["max_length_q"] == 16 and flat["cu_seq_lens_q"].tolist() == [0, 11, 17, 33]
