"""Token-budget batches (``mlm-suite pretrain --max_tokens_per_batch N``): whole sequences packed into micro-batches
of at most ``N`` tokens, which the collator flattens and pads to exactly ``N`` (one static shape for
``torch.compile``, and for a CUDA-graph step). See docs/pretraining.md#token-budget-batches.

The packing is best-fit decreasing over the rows in their epoch's seeded order (longest first, the order breaking
ties between rows of equal length), then the micro-batches are drawn in a seeded order. Which rows of a length share
a batch changes every epoch, but the number of batches depends only on the multiset of lengths: every epoch has the
same length, as the Trainer's step counting and a resumed run's skipping need.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import pyarrow.compute as pc

__all__ = ["row_lengths", "token_budget_batches"]


def row_lengths(rows: Any) -> list[int]:
    """Tokens of every row of a ``datasets.Dataset`` (read from the Arrow column, without decoding the rows) or of
    any sequence of mappings with ``input_ids``."""
    if hasattr(rows, "select_columns") and hasattr(rows, "with_format"):
        lengths: list[int] = []
        for batch in rows.select_columns(["input_ids"]).with_format("arrow").iter(batch_size=65536):
            lengths += pc.list_value_length(batch["input_ids"]).to_pylist()
        return lengths
    return [len(row["input_ids"]) for row in rows]


def token_budget_batches(lengths: Sequence[int], order: Sequence[int], max_tokens: int) -> list[list[int]]:
    """The rows ``order`` lists, packed whole into batches of at most ``max_tokens`` tokens (best-fit decreasing).

    Every row appears in exactly one batch; rows of equal length are placed in ``order``'s order.

    Raises:
        ValueError: a row longer than ``max_tokens``.
    """
    by_length = sorted(order, key=lambda index: -lengths[index])  # stable: ties keep ``order``
    if by_length and lengths[by_length[0]] > max_tokens:
        raise ValueError(f"row {by_length[0]} has {lengths[by_length[0]]} tokens, more than the budget of {max_tokens}")
    batches: list[list[int]] = []
    open_room: list[tuple[int, int]] = []  # (tokens left, batch number), sorted
    for index in by_length:
        length = lengths[index]
        slot = bisect.bisect_left(open_room, (length, -1))  # the fullest batch the row still fits in
        if slot == len(open_room):
            batches.append([index])
            room, number = max_tokens - length, len(batches) - 1
        else:
            room, number = open_room.pop(slot)
            batches[number].append(index)
            room -= length
        if room > 0:
            bisect.insort(open_room, (room, number))
    return batches
