"""Token-budget batches (``mlm-suite pretrain --max_tokens_per_batch N``): whole sequences packed into micro-batches of
at most ``N`` tokens, which the collator flattens and pads to exactly ``N`` (one static shape for
``torch.compile``). See docs/pretraining.md#token-budget-batches.

The rows of an epoch are dealt longest first, each to the batch with the fewest tokens so far (the epoch's seeded
order breaking ties between rows of equal length), into about as few batches as the tokens need. Every
batch therefore holds rows of every length, as a random batch would, rather than long rows with long and short with
short; which rows of a length share a batch changes every epoch, but the number of batches depends only on the
multiset of lengths: every epoch has the same length, as the Trainer's step counting and a resumed run's skipping need.
"""

from __future__ import annotations

import heapq
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
    """The rows ``order`` lists, packed whole into batches of at most ``max_tokens`` tokens (see the module).

    Every row appears in exactly one batch; rows of equal length are dealt in ``order``'s order.

    Raises:
        ValueError: a row longer than ``max_tokens``.
    """
    by_length = sorted(order, key=lambda index: -lengths[index])  # stable: ties keep ``order``
    if by_length and lengths[by_length[0]] > max_tokens:
        raise ValueError(f"row {by_length[0]} has {lengths[by_length[0]]} tokens, more than the budget of {max_tokens}")
    fewest = max(1, -(-sum(lengths[index] for index in by_length) // max_tokens))
    count, extra = fewest, 1
    while (batches := _deal(lengths, by_length, max_tokens, count)) is None:
        count = min(len(by_length), fewest + extra)  # one batch per row always fits
        extra *= 2
    return batches


def _deal(lengths: Sequence[int], by_length: Sequence[int], max_tokens: int, count: int) -> list[list[int]] | None:
    """``by_length`` dealt into ``count`` batches, each row to the batch with the fewest tokens; None if one overflows."""
    batches: list[list[int]] = [[] for _ in range(count)]
    loads = [(0, number) for number in range(count)]  # (tokens, batch number), a heap
    for index in by_length:
        tokens, number = heapq.heappop(loads)
        if tokens + lengths[index] > max_tokens:
            return None
        batches[number].append(index)
        heapq.heappush(loads, (tokens + lengths[index], number))
    return batches
