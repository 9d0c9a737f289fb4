"""Fast padding collators for fine-tuning: the batches of transformers' padding collators, without
``tokenizer.pad``'s per-row Python loop (docs/data.md).

:class:`DataCollatorForPadding` replaces ``DataCollatorWithPadding`` and :class:`DataCollatorForTokenLabels`
``DataCollatorForTokenClassification``: each returns exactly the batch of the collator it replaces (keys, order,
dtypes, values). Inputs outside the fast path (other tensor types or padding strategies, 2-D masks ...) go to the
transformers collator itself, so they still give its batch or its error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import torch
from transformers import BatchEncoding, PreTrainedTokenizerBase
from transformers.utils import PaddingStrategy, to_py_obj

from mlm_suite.data.flattening import flatten_batch

__all__ = ["DataCollatorForPadding", "DataCollatorForTokenLabels"]

# The per-token keys tokenizer.pad pads besides the main input and the attention mask, with their pad values
# (None: the tokenizer's pad_token_type_id).
_PADDED_EXTRAS = {"token_type_ids": None, "special_tokens_mask": 1}
# Padded keys whose rows often hold one value throughout.
_OFTEN_UNIFORM = ("attention_mask", "token_type_ids")


# ---------------------------------------------------------------------------------------------------- helpers
# Shared with mlm_suite.data.pretraining.masking (the MLM collator pads the same way).


def column_values(features: Sequence[Mapping[str, Any]], key: str, lengths: np.ndarray) -> np.ndarray:
    """``(T,)`` int64: the ``key`` rows of all ``features`` end to end (``T = lengths.sum()``)."""
    try:
        rows = list(map(itemgetter(key), features))
    except KeyError:
        raise ValueError(f"'{key}' is present in some features but not in all") from None
    return concatenate_rows(rows, key, lengths)


def concatenate_rows(rows: Sequence[Any], key: str, lengths: np.ndarray) -> np.ndarray:
    """``(T,)`` int64: ``rows`` (lists, tuples, arrays or tensors of ``lengths`` entries each) end to end."""
    _check_lengths(rows, key, lengths.tolist())
    return _concatenate(rows, int(lengths.sum()))


def _check_lengths(rows: Sequence[Any], key: str, lengths: list[int]) -> None:
    if list(map(len, rows)) != lengths:
        raise ValueError(f"{key} must have one entry per input id")


def _concatenate(rows: Sequence[Any], total: int) -> np.ndarray:
    """``(total,)`` int64: ``rows`` end to end, ``total`` entries in all."""
    if _only_type(rows, list):
        # Rows as datasets gives them: one pass over the Python ints, no array or tensor per row.
        return np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=total)
    return np.concatenate([np.asarray(row, dtype=np.int64) for row in rows])  # arrays, tensors, tuples


def scatter_rows(values: np.ndarray, real: np.ndarray, fill: int | bool) -> np.ndarray:
    """``(B, L)``: ``values`` ``(T,)`` at the ``real`` positions (row by row, in order), ``fill`` elsewhere."""
    out = np.full(real.shape, fill, dtype=values.dtype)
    out[real] = values
    return out


def real_positions(lengths: np.ndarray, length: int, padding_side: str) -> np.ndarray:
    """``(B, L)`` bool: where rows of ``lengths`` tokens go in a batch padded to ``length`` on ``padding_side``."""
    columns = np.arange(length)
    if padding_side == "left":
        return columns >= length - lengths[:, None]
    return columns < lengths[:, None]


def _only_type(values: Sequence[Any], kind: type) -> bool:
    """Whether every one of ``values`` is exactly of type ``kind`` (not a subclass)."""
    types = set(map(type, values))
    return len(types) == 1 and kind in types


def _row_kind(rows: Sequence[Any]) -> str | None:
    """``"list"`` (lists of Python ints), ``"array"`` (1-D integer arrays or CPU tensors) or None (anything else).

    A list column is judged by its first entry, as ``tokenizer.pad`` judges the main input; bool, float and numpy
    scalars are not Python ints (``tokenizer.pad`` gives them other dtypes or refuses them).
    """
    if _only_type(rows, list):
        first = next((row[0] for row in rows if row), None)
        return "list" if type(first) is int else None
    for row in rows:
        if isinstance(row, np.ndarray):
            if row.ndim != 1 or row.dtype.kind not in "iu":
                return None
        elif isinstance(row, torch.Tensor):
            if row.ndim != 1 or row.device.type != "cpu" or row.dtype.is_floating_point or row.dtype.is_complex:
                return None
            if row.dtype == torch.bool:
                return None
        else:
            return None
    return "array"


def _uniform_value(rows: Sequence[list], total: int) -> int | None:
    """The value every entry of the lists ``rows`` (``total`` entries in all) equals, if there is one, else None.

    One C-level count, instead of converting every entry: attention masks are mostly ones, the token type ids of
    single texts zeros.
    """
    first = next((row[0] for row in rows if row), None)
    if type(first) is int and sum(map(list.count, rows, repeat(first))) == total:
        return first
    return None


def _fill(real: np.ndarray, value: int, fill: int) -> np.ndarray:
    """``(B, L)`` int64: ``value`` at the ``real`` positions, ``fill`` elsewhere."""
    if value == fill:
        return np.full(real.shape, fill, dtype=np.int64)
    if value == 1 and fill == 0:
        return real.astype(np.int64)
    return np.where(real, np.int64(value), np.int64(fill))


def _batch_encoding(data: dict[str, Any]) -> BatchEncoding:
    """``BatchEncoding(data, tensor_type="pt")``: the values that are not tensors yet converted as transformers does."""
    if all(isinstance(value, torch.Tensor) for value in data.values()):
        return BatchEncoding(data)  # nothing to convert; saves the conversion's per-call cost
    return BatchEncoding(data, tensor_type="pt")


# ---------------------------------------------------------------------------------------------------- collators


def _pads_to_longest(padding: Any) -> bool:
    """Whether ``padding`` means "pad to the longest row" to ``tokenizer.pad`` (PaddingStrategy is a str enum)."""
    return padding is True or (isinstance(padding, str) and padding == PaddingStrategy.LONGEST)


class _FastPadding:
    """The padding the two collators share; they are dataclasses with transformers' fields, in its order."""

    tokenizer: PreTrainedTokenizerBase
    padding: bool | str | PaddingStrategy
    max_length: int | None
    pad_to_multiple_of: int | None
    return_tensors: str

    def __post_init__(self) -> None:
        multiple = self.pad_to_multiple_of
        if multiple is not None and (not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1):
            raise ValueError(f"pad_to_multiple_of must be a positive integer, got {multiple!r}")

    def _pad(
        self, features: Sequence[Mapping[str, Any]], skip: str | None = None
    ) -> tuple[dict[str, Any], list[int], np.ndarray] | None:
        """What ``tokenizer.pad(features)`` holds before its tensor conversion, or None outside the fast path.

        Returns:
            batch: the per-token inputs as ``(B, L)`` int64 tensors, every other key (but ``skip``) as a tensor
                (Python ints) or as the list of its values, which ``BatchEncoding(..., tensor_type="pt")``
                converts as ``tokenizer.pad`` does; the keys in the order ``tokenizer.pad`` gives them (the first
                feature's, then a made ``attention_mask``).
            lengths: tokens per row.
            real: ``(B, L)`` bool, where the rows' tokens are.
        """
        tokenizer = self.tokenizer
        if (
            self.return_tensors != "pt"
            or self.max_length is not None
            or not _pads_to_longest(self.padding)
            or not isinstance(features, (list, tuple))
            or len(features) == 0
            or not isinstance(features[0], Mapping)
        ):
            return None
        pad_id = tokenizer.pad_token_id  # None without a pad token
        padding_side = tokenizer.padding_side
        if pad_id is None or pad_id < 0 or padding_side not in ("right", "left"):
            return None
        main = tokenizer.model_input_names[0]
        keys = [key for key in features[0].keys() if key != skip]
        if main not in keys:
            return None
        make_attention_mask = "attention_mask" in tokenizer.model_input_names
        if "attention_mask" in keys and not make_attention_mask:
            return None  # tokenizer.pad would leave it unpadded
        pad_values = {main: pad_id, "attention_mask": 0, **_PADDED_EXTRAS}
        pad_values["token_type_ids"] = tokenizer.pad_token_type_id

        try:
            columns = {key: list(map(itemgetter(key), features)) for key in keys}
        except KeyError:
            return None  # a key of the first feature missing from another: tokenizer.pad's own error
        kind = _row_kind(columns[main])
        if kind is None or any(_row_kind(columns[key]) != kind for key in keys if key in pad_values and key != main):
            return None
        lengths = list(map(len, columns[main]))
        total, length = sum(lengths), max(lengths)
        if length == 0:
            return None
        if self.pad_to_multiple_of is not None:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        real = real_positions(np.array(lengths), length, padding_side)  # (B, L)

        batch: dict[str, Any] = {}
        for key in keys:
            rows = columns[key]
            if key in pad_values:
                if key != main:
                    _check_lengths(rows, key, lengths)
                value = _uniform_value(rows, total) if kind == "list" and key in _OFTEN_UNIFORM else None
                if value is None:
                    padded = scatter_rows(_concatenate(rows, total), real, pad_values[key])
                else:
                    padded = _fill(real, value, pad_values[key])
                batch[key] = torch.from_numpy(padded)
            elif kind == "array":
                # tokenizer.pad turns every column into Python objects when the inputs are arrays or tensors.
                batch[key] = to_py_obj(rows)
            elif _only_type(rows, int):
                # What the tensor conversion makes of Python ints (class labels), without its per-item cost.
                batch[key] = torch.from_numpy(np.array(rows, dtype=np.int64))
            else:
                batch[key] = rows  # converted by BatchEncoding as tokenizer.pad converts it
        if "attention_mask" not in batch and make_attention_mask:
            batch["attention_mask"] = torch.from_numpy(real.astype(np.int64))
        return batch, lengths, real


@dataclass
class DataCollatorForPadding(_FastPadding):
    """Drop-in for ``transformers.DataCollatorWithPadding``: the same batch, several times faster.

    Pads the per-token inputs to the longest row (rounded up to ``pad_to_multiple_of``) on the tokenizer's
    padding side, stacks every other key, and renames ``label`` / ``label_ids`` to ``labels``. Usable as a
    ``Trainer`` ``data_collator``. The arguments are those of the transformers collator; ``padding`` other than
    ``True`` / ``"longest"``, a ``max_length`` or ``return_tensors`` other than ``"pt"`` hand every batch to it.

    With ``flatten=True`` the batch is flattened instead (:func:`mlm_suite.data.flattening.flatten_batch`, the
    ``labels`` one per sequence), so that a GPU step reads no tensor values to lay the tokens out.

    Returns:
        a ``BatchEncoding`` of int64 ``(B, L)`` tensors (the padded inputs) and the stacked other keys.
    """

    tokenizer: PreTrainedTokenizerBase
    padding: bool | str | PaddingStrategy = True
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"
    flatten: bool = False

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> BatchEncoding | dict[str, Any]:
        padded = self._pad(features)
        if padded is None:
            batch = self._transformers_collator()(features)
        else:
            batch = _batch_encoding(padded[0])
            if "label" in batch:
                batch["labels"] = batch["label"]
                del batch["label"]
            if "label_ids" in batch:
                batch["labels"] = batch["label_ids"]
                del batch["label_ids"]
        return flatten_batch(batch, labels_per_row=True) if self.flatten else batch

    def _transformers_collator(self) -> Any:
        from transformers import DataCollatorWithPadding

        return DataCollatorWithPadding(
            self.tokenizer, self.padding, self.max_length, self.pad_to_multiple_of, self.return_tensors
        )


@dataclass
class DataCollatorForTokenLabels(_FastPadding):
    """Drop-in for ``transformers.DataCollatorForTokenClassification``: the same batch, several times faster.

    As :class:`DataCollatorForPadding`, but the per-token labels (the ``label`` feature if the first feature has
    one, else ``labels``; the key is kept) are padded too, with ``label_pad_token_id``, to the padded length of
    the inputs on the tokenizer's padding side, and are returned as int64. With ``flatten=True`` the batch is
    flattened instead (:func:`mlm_suite.data.flattening.flatten_batch`, labels of the real tokens end to end).
    """

    tokenizer: PreTrainedTokenizerBase
    padding: bool | str | PaddingStrategy = True
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    label_pad_token_id: int = -100
    return_tensors: str = "pt"
    flatten: bool = False

    def __call__(
        self, features: Sequence[Mapping[str, Any]], return_tensors: str | None = None
    ) -> BatchEncoding | dict[str, Any]:
        if return_tensors is not None and return_tensors != self.return_tensors:
            return self._transformers_collator()(features, return_tensors=return_tensors)
        batch = self._pad_with_labels(features)
        if batch is None:
            batch = self._transformers_collator()(features)
        return flatten_batch(batch, masked_lm_positions=False) if self.flatten else batch

    def _transformers_collator(self) -> Any:
        from transformers import DataCollatorForTokenClassification

        return DataCollatorForTokenClassification(
            self.tokenizer, self.padding, self.max_length, self.pad_to_multiple_of, self.label_pad_token_id,
            self.return_tensors,
        )

    def _pad_with_labels(self, features: Sequence[Mapping[str, Any]]) -> BatchEncoding | None:
        if not isinstance(features, (list, tuple)) or not features or not isinstance(features[0], Mapping):
            return None
        label_name = "label" if "label" in features[0] else "labels"
        has_labels = label_name in features[0]
        padded = self._pad(features, skip=label_name if has_labels else None)
        if padded is None:
            return None
        inputs, lengths, real = padded
        if not has_labels:
            return _batch_encoding(inputs)
        try:
            labels = list(map(itemgetter(label_name), features))
        except KeyError:
            return None
        if type(self.label_pad_token_id) is not int or _row_kind(labels) is None:
            return None
        label_lengths = list(map(len, labels))
        if label_lengths != lengths:
            # transformers pads each row of labels to the padded length, whatever the row's length.
            length = real.shape[1]
            if max(label_lengths) > length:
                return None  # transformers would make a ragged list and refuse it
            real = real_positions(np.array(label_lengths), length, self.tokenizer.padding_side)  # (B, L)
        values = _concatenate(labels, sum(label_lengths))  # (T,)
        inputs[label_name] = torch.from_numpy(scatter_rows(values, real, self.label_pad_token_id))
        return _batch_encoding(inputs)
