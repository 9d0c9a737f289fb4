"""Training from a stream: every process reads its own part of a ``datasets.IterableDataset``, pass after pass.

``--streaming`` tokenises documents on the fly, so nothing is read before step 1 beyond the first batch and
memory does not grow with the corpus. The pieces, all on ``datasets``' streaming engine:

* :func:`split_for_processes`: each process keeps a disjoint part of the document stream
  (``datasets.distributed.split_dataset_by_node``): whole shards (files) when there are at least as many
  shards as processes, which must then divide evenly; otherwise every process reads all shards and keeps
  one document in ``world_size``.
* :func:`stream_rows`: the part, mapped on the fly to the pretraining job's rows (tokenised or packed),
  each with a stable ``example_index`` (:func:`stable_example_index`).
* :class:`ProcessStream`: those rows without end, pass after pass. Each row carries ``epoch``, its pass,
  which :class:`~mlm_suite.data.pretraining.masking.DataCollatorForMaskedLM` uses for its mask: processes finish their
  parts at different steps, so a pass is counted per process, not by the Trainer. Its ``state_dict`` is
  ``datasets``' own position (pass, shard, document): plain JSON data.

``mlm_suite.training.stream_position.StreamPositionMixin`` trains on a :class:`ProcessStream` through accelerate's
``DataLoaderShard`` over torchdata's ``StatefulDataLoader``, without splitting it again (each process already
holds its own part) and without rank-0 dispatch; checkpoints hold each process's position as JSON, and
``--resume_from_checkpoint`` continues from it: no row repeated or skipped.
"""

from __future__ import annotations

import hashlib
import inspect
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from datasets import IterableDataset
from datasets.distributed import split_dataset_by_node

__all__ = ["ProcessStream", "split_for_processes", "stable_example_index", "stream_rows"]

RowsFunction = Callable[[Mapping[str, Sequence[Any]]], dict[str, list]]


def split_for_processes(stream: IterableDataset, rank: int, world_size: int) -> IterableDataset:
    """The part of ``stream`` that process ``rank`` of ``world_size`` reads (disjoint from the others').

    Raises:
        ValueError: at least as many shards as processes, but not a multiple of them: a split by shard would
            give some processes more files than others (and their documents more passes).
    """
    shards = stream.num_shards
    if world_size <= 1:
        return stream
    if shards >= world_size and shards % world_size:
        raise ValueError(
            f"{shards} shards (files) cannot be split evenly across {world_size} processes: give a multiple of "
            f"{world_size} files, or fewer files than processes (every process then keeps 1 document in {world_size})"
        )
    if "strategy" not in inspect.signature(split_dataset_by_node).parameters:  # datasets < 5.1 makes the same choice
        return split_dataset_by_node(stream, rank=rank, world_size=world_size)
    strategy = "shards" if shards >= world_size else "examples"
    return split_dataset_by_node(stream, rank=rank, world_size=world_size, strategy=strategy)


def stable_example_index(shard: int, document: int, row: int) -> int:
    """A 63-bit key for a streamed row, a pure function of where it comes from (blake2b, not the salted ``hash``)."""
    digest = hashlib.blake2b(struct.pack("<qqq", shard, document, row), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def _rows_with_index(batch: Mapping[str, Sequence[Any]], rows_function: RowsFunction) -> dict:
    """Batched map: the rows of a batch of documents, keyed by the batch's first document and the row's rank in it.

    A map batch always starts at a document no other batch (or process) starts at, so the keys are unique;
    they are the same in every run over the same part, whatever the batch holds (packed rows mix documents).
    """
    rows = rows_function(batch)
    shard, document = batch["shard"][0], batch["document"][0]
    rows["example_index"] = [stable_example_index(shard, document, row) for row in range(len(rows["input_ids"]))]
    return rows


def stream_rows(documents: IterableDataset, rows_function: RowsFunction) -> IterableDataset:
    """``documents`` (a document stream's part) mapped on the fly to rows with ``example_index``.

    Args:
        rows_function: batched map function from documents (``text``) to rows
            (:func:`~mlm_suite.data.pretraining.prepared.pretraining_rows_function`).
    """
    return documents.map(
        _rows_with_index,
        batched=True,
        remove_columns=["text", "shard", "document"],
        fn_kwargs={"rows_function": rows_function},
    )


class ProcessStream(torch.utils.data.IterableDataset):
    """This process's rows of a stream, read pass after pass without end; every row carries ``epoch``, its pass.

    A run on it ends at ``--max_steps``. The position (pass, and place within it) is ``state_dict()``, which
    torchdata's ``StatefulDataLoader`` saves after every batch it yields; ``load_state_dict`` resumes there.
    Each pass of a ``datasets`` stream after the first reads its shards in another (seeded) order.

    Args:
        rows: this process's part of the stream, as rows (:func:`stream_rows`).
    """

    def __init__(self, rows: IterableDataset) -> None:
        self.rows = rows
        self._resumed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        resumed, self._resumed = self._resumed, False
        while True:
            epoch = self.rows.epoch
            empty = True
            for row in self.rows:
                empty = False
                yield {**row, "epoch": epoch}
            if empty and not resumed:  # (a position restored at the very end of a pass reads nothing)
                return  # a part without rows: nothing to repeat (e.g. a dataloader worker left without shards)
            resumed = False
            self.rows.set_epoch(epoch + 1)

    def state_dict(self) -> dict[str, Any]:
        return self.rows.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows.set_epoch(state["epoch"])
        self.rows.load_state_dict(state)
        self._resumed = True
