"""Flattened batches: every sequence of a padded batch laid end to end in one ``(1, total)`` row, in the format of
transformers' ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` plus the masked positions
(docs/performance.md).

The batch carries its offsets (``cu_seq_lens_q``, ``max_length_q``) and ``masked_lm_positions``, so the model
reads no tensor values to lay tokens out: ``torch.compile`` traces the step without a graph break and a CUDA step
needs no host synchronisation. Each document of a packed row becomes a sequence of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from mlm_suite.model.layout import first_real_column, segment_starts

IGNORE_INDEX = -100
_PER_TOKEN = ("input_ids", "token_type_ids", "labels")


def sequence_offsets(lengths: torch.Tensor, max_length_multiple: int | None = None) -> dict[str, Any]:
    """``cu_seq_lens_q/k`` and ``max_length_q/k`` of sequences of ``lengths`` (``max_length`` rounded up to a
    multiple of ``max_length_multiple`` when given)."""
    cu_seq_lens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)  # (num_sequences + 1,)
    max_length = int(lengths.max()) if lengths.numel() else 0
    if max_length_multiple:
        max_length = -(-max_length // max_length_multiple) * max_length_multiple
    return dict(cu_seq_lens_q=cu_seq_lens, cu_seq_lens_k=cu_seq_lens, max_length_q=max_length, max_length_k=max_length)


def flatten_sequences(
    sequences: Sequence[Sequence[int]], token_type_ids: Sequence[Sequence[int]] | None = None
) -> dict[str, Any]:
    """Token-id lists (and their segment ids) → one flattened batch, positions counting from 0 in each sequence."""
    if not sequences or any(len(sequence) == 0 for sequence in sequences):
        raise ValueError("every sequence of a batch needs at least one token")
    lengths = torch.tensor([len(sequence) for sequence in sequences])
    batch = {
        "input_ids": torch.tensor([token for sequence in sequences for token in sequence])[None],
        "position_ids": torch.cat([torch.arange(length) for length in lengths.tolist()])[None],
        **sequence_offsets(lengths),
    }
    if token_type_ids is not None:
        batch["token_type_ids"] = torch.tensor([segment for row in token_type_ids for segment in row])[None]
    return batch


def flatten_batch(
    batch: Mapping[str, torch.Tensor],
    max_length_multiple: int | None = None,
    labels_per_row: bool = False,
    masked_lm_positions: bool = True,
) -> dict:
    """A padded ``(batch, seq)`` batch → a flattened one (see the module).

    Args:
        batch: ``input_ids`` and optionally ``attention_mask``, ``token_type_ids``,
            ``position_ids``, ``document_ids``, ``labels``, ``next_sentence_label``.
        max_length_multiple: round ``max_length_q`` up to a multiple of this, so that
            ``torch.compile`` sees few distinct values (it is only an upper bound for the layout).
        labels_per_row: ``labels`` hold one target (or one row of targets) per sequence, as a
            classifier's do, and are kept as they are; otherwise one per token, flattened.
        masked_lm_positions: with per-token ``labels``, add the flat indices of the labelled tokens
            (the MLM heads' sparse prediction reads them instead of searching the labels).

    Raises:
        ValueError: a ``next_sentence_label`` (or per-row ``labels``) per row when rows hold several
            documents, or keys the flattened form cannot carry.
    """
    unknown = set(batch) - {*_PER_TOKEN, "attention_mask", "position_ids", "document_ids", "next_sentence_label"}
    if unknown:
        raise ValueError(f"cannot flatten a batch with {sorted(unknown)}; it holds one value per row or token")
    input_ids = batch["input_ids"]
    rows, columns = input_ids.shape
    real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(input_ids, dtype=torch.bool)
    position_ids, document_ids = batch.get("position_ids"), batch.get("document_ids")
    starts = segment_starts(real, position_ids, document_ids)  # (rows, columns)
    token_index = real.reshape(-1).nonzero().squeeze(1)  # (total,) flat index of each real token
    segment_of_token = starts.reshape(-1)[token_index].cumsum(0) - 1  # (total,)
    lengths = torch.bincount(segment_of_token)  # (num_sequences,)
    offsets = sequence_offsets(lengths, max_length_multiple)
    cu_seq_lens = offsets["cu_seq_lens_q"]

    if position_ids is not None:
        positions = position_ids.reshape(-1)[token_index]
    elif document_ids is not None:  # offset within the document, as the padded layout gives
        positions = torch.arange(token_index.numel(), device=input_ids.device) - cu_seq_lens.long()[segment_of_token]
    else:  # the column counted from the row's first real token, as the padded layout gives
        positions = (torch.arange(columns, device=input_ids.device) - first_real_column(real)).reshape(-1)[token_index]
    per_token = [key for key in _PER_TOKEN if key in batch and not (key == "labels" and labels_per_row)]
    flat = {key: batch[key].reshape(-1)[token_index][None] for key in per_token}
    flat.update(position_ids=positions[None], **offsets)
    if "labels" in flat and masked_lm_positions:
        flat["masked_lm_positions"] = (flat["labels"][0] != IGNORE_INDEX).nonzero().squeeze(1)
    row_labels = {"next_sentence_label": "NSP pairs", "labels": "classified sequences"}
    for key, what in row_labels.items():
        if key in batch and key not in flat:
            if lengths.numel() != rows:
                raise ValueError(
                    f"{key} holds one label per row ({rows}), but the rows hold {lengths.numel()} "
                    f"sequences: {what} cannot be packed"
                )
            flat[key] = batch[key]
    return flat


def pad_flattened(batch: dict[str, Any], tokens: int, pad_token_id: int, pad_token_type_id: int = 0) -> dict[str, Any]:
    """A flattened batch padded to exactly ``tokens`` tokens, so that every batch has the static shape ``(1, tokens)``.

    The padding is laid out as extra sequences of at most ``max_length_q`` tokens each (the bound stays true); they
    are never labelled, so the loss and ``num_items_in_batch`` count the real masked tokens only.
    """
    total = batch["input_ids"].shape[1]
    if total > tokens:
        raise ValueError(f"a flattened batch of {total} tokens does not fit in {tokens}")
    room = tokens - total
    if room == 0:
        return batch
    chunk = max(1, batch["max_length_q"])
    lengths = torch.tensor([chunk] * (room // chunk) + ([room % chunk] if room % chunk else []))  # (pad sequences,)
    padded = dict(batch)
    fill = {"input_ids": pad_token_id, "token_type_ids": pad_token_type_id, "labels": IGNORE_INDEX}
    for key, value in fill.items():
        if key in batch:
            padded[key] = F.pad(batch[key], (0, room), value=value)
    pad_positions = torch.cat([torch.arange(length) for length in lengths.tolist()])  # (room,)
    padded["position_ids"] = torch.cat([batch["position_ids"], pad_positions[None].to(batch["position_ids"])], dim=1)
    cu_seq_lens = torch.cat([batch["cu_seq_lens_q"], (total + lengths.cumsum(0)).to(torch.int32)])
    padded.update(cu_seq_lens_q=cu_seq_lens, cu_seq_lens_k=cu_seq_lens)
    return padded


__all__ = ["flatten_batch", "flatten_sequences", "pad_flattened", "sequence_offsets"]
