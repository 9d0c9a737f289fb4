"""``OneBufferCollator``: a batch collated in a loader worker reaches the training process as views of one buffer,
equal to the batch the collator made, through the worker's pipe or as one shared-memory file; in the training process
itself the batch is the collator's, untouched."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from mlm_suite.training.worker_batches import PIPE_BYTES, OneBufferCollator, in_one_buffer, views_of


def mixed_batch(features: list[int], length: int = 7) -> dict:
    """Every kind of value a collator returns: tensors of several dtypes and shapes (a 0-d and an empty one too)."""
    rows = torch.tensor(features)
    return {
        "input_ids": rows[:, None] * 100 + torch.arange(length),  # (B, length) int64
        "attention_mask": torch.ones(len(features), length, dtype=torch.int32),
        "special_tokens_mask": rows[:, None] % 2 == 0,  # bool
        "labels": rows.float() / 3,  # float32, (B,)
        "scores": rows.to(torch.bfloat16)[:, None].expand(-1, 3),  # not contiguous
        "max_length_q": torch.tensor(7),  # 0-d
        "no_rows": torch.zeros(0, 4, dtype=torch.int64),
        "cu_seq_lens": [0, 7],  # not a tensor: passed as it is
    }


def assert_same_batch(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            assert torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


def test_in_one_buffer_keeps_every_value_and_shares_one_buffer():
    batch = mixed_batch([3, 4, 5])
    packed = views_of(*in_one_buffer(batch))
    assert_same_batch(packed, batch)
    tensors = [value for value in packed.values() if isinstance(value, torch.Tensor)]
    assert len({tensor.untyped_storage().data_ptr() for tensor in tensors}) == 1
    packed["input_ids"][0, 0] = -1  # views of their own buffer, not of the collator's tensors
    assert batch["input_ids"][0, 0] == 300
    sparse = torch.eye(2).to_sparse()  # not a dense tensor: passed as it is
    assert views_of(*in_one_buffer({"sparse": sparse, "ids": torch.ones(2)}))["sparse"] is sparse


def test_in_the_training_process_the_collators_batch_is_returned_untouched():
    batch = {"input_ids": torch.ones(2, 3)}
    assert OneBufferCollator(lambda features: batch)([0, 1]) is batch


def large_batch(features: list[int]) -> dict:
    return mixed_batch(features, length=PIPE_BYTES // 8)  # over PIPE_BYTES: one shared-memory file


@pytest.mark.multiprocess
@pytest.mark.parametrize("collate", [mixed_batch, large_batch], ids=["through the pipe", "as one shared-memory file"])
def test_a_workers_batch_arrives_as_one_buffer_equal_to_the_collators(collate):
    loader = DataLoader(list(range(12)), batch_size=3, num_workers=1, collate_fn=OneBufferCollator(collate))
    batches = list(loader)
    assert len(batches) == 4
    for index, batch in enumerate(batches):
        assert_same_batch(batch, collate(list(range(3 * index, 3 * index + 3))))
        storages = {value.untyped_storage().data_ptr() for value in batch.values() if isinstance(value, torch.Tensor)}
        assert len(storages) == 1  # one transfer per batch, not one shared-memory file per tensor
        assert batch["input_ids"].untyped_storage().is_shared() == (collate is large_batch)
