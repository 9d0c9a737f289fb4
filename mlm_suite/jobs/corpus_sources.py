"""The pretraining job's corpora larger than memory: ``--prepared_data`` (Arrow rows) and ``--streaming``.

Without these flags the job reads its documents into memory and tokenises them before step 1. With them:

* ``--prepared_data DATA``: rows written once by ``mlm-suite prepare-data`` (:mod:`mlm_suite.data.prepared`),
  memory-mapped; DATA's tokenizer, ``--max_seq_length`` and ``--packing`` come with it. The Trainer's own
  sampler shuffles and splits the rows across processes and a resumed run skips the rows already trained on.
* ``--streaming``: ``--train_file`` or ``--dataset_name`` read as a ``datasets`` stream and tokenised on the fly
  (:mod:`mlm_suite.data.streaming`); every process reads its own part, the run ends at ``--max_steps``.

:func:`open_corpus_source` checks the flags and the data (one-line errors, before anything is written) and
returns the source the job reads its held-out documents, tokenizer check, training rows and data card from.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset, DatasetDict
from transformers import PreTrainedTokenizerBase, TrainingArguments

from mlm_suite.data.corpus import document_stream, hub_document_stream, iter_documents, stream_head
from mlm_suite.data.prepared import PreparedData, check_tokenizer, load_prepared, most_frequent_token, pretraining_rows_function
from mlm_suite.data.streaming import ProcessStream, split_for_processes, stream_rows
from mlm_suite.errors import UsageError
from mlm_suite.data.readers import hub_split_names

__all__ = ["BASELINE_SAMPLE_DOCUMENTS", "PreparedSource", "StreamingSource", "open_corpus_source"]

# A stream is never read whole: its most frequent token (the baseline's prediction) is counted on its start.
BASELINE_SAMPLE_DOCUMENTS = 1000


def _fixed_tokenizer_source(args: Any, flag: str) -> str:
    """The flag naming the tokenizer of a run whose data is tokenised with a fixed tokenizer; error if it trains one."""
    if args.train_tokenizer or args.vocab_size:
        raise UsageError(f"{flag} cannot train a WordPiece vocabulary (--train_tokenizer/--vocab_size): the tokenizer must be fixed")
    if args.tokenizer_name:
        return f"--tokenizer_name {args.tokenizer_name}"
    if args.model_name_or_path:
        return f"--model_name_or_path {args.model_name_or_path}"
    return ""


class PreparedSource:
    """``--prepared_data DATA``: the training rows of a prepared folder; its held-out documents (or
    ``--validation_file``) for evaluation."""

    def __init__(self, args: Any, given: frozenset[str]) -> None:
        self.prepared: PreparedData = load_prepared(args.prepared_data)
        metadata = self.prepared.metadata
        self.tokenizer_flag = _fixed_tokenizer_source(args, "--prepared_data") or f"--prepared_data {args.prepared_data}"
        if not (args.tokenizer_name or args.model_name_or_path):
            args.tokenizer_name = str(self.prepared.tokenizer_path)
        args.train_tokenizer = False
        for flag in ("max_seq_length", "packing"):
            if flag in given and getattr(args, flag) != metadata[flag]:
                raise UsageError(
                    f"--{flag} {getattr(args, flag)} differs from --prepared_data {args.prepared_data}'s "
                    f"{metadata[flag]}: drop the flag or prepare the data again"
                )
            setattr(args, flag, metadata[flag])
        # Folders prepared before packed rows carried the tokenizer's word ids still train token masking.
        if args.masking != "token" and "word_ids" not in self.prepared.train.column_names:
            raise UsageError(
                f"--prepared_data {args.prepared_data} holds packed rows without word ids (prepared by an older mlm-suite), "
                f"which --masking {args.masking} needs: prepare the data again"
            )
        self.source = f"`{Path(args.prepared_data).name}` (prepared from {', '.join(Path(f).name for f in metadata['train_files'])})"
        validation = self.prepared.validation  # the held-out documents prepared with the rows, unless a file replaces them
        if args.validation_file:
            validation = Dataset.from_dict({"text": list(iter_documents(args.validation_file, args.text_column_name))})
        self.texts = DatasetDict(validation=validation)
        self.held_out_split: str | None = None  # not a split of a dataset: prepared or read from a file

    def check_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        check_tokenizer(self.prepared, tokenizer, self.tokenizer_flag)

    def train_rows(self, tokenizer: PreTrainedTokenizerBase) -> Dataset:
        return self.prepared.train

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase) -> int:
        return self.prepared.metadata["baseline_token_id"]

    def card(self, rows_trained: int) -> dict[str, object]:
        """The training documents and rows, for the model card."""
        metadata = self.prepared.metadata
        return {"documents": metadata["train_documents"], "rows": metadata["train_rows"]}


class StreamingSource:
    """``--streaming``: ``--train_file``/``--dataset_name`` as a stream; held-out documents from a file, a split or its head."""

    def __init__(self, args: Any, training_args: TrainingArguments, given: frozenset[str]) -> None:
        if not (args.train_file or args.dataset_name):
            raise UsageError("--streaming reads --train_file or --dataset_name; give one")
        if args.objective == "mlm_nsp":
            raise UsageError("--streaming trains --objective mlm only: NSP pairs draw their random B from the whole corpus")
        if not ("max_steps" in given and training_args.max_steps > 0) and args.max_train_minutes is None:
            raise UsageError("--streaming needs --max_steps N (or --max_train_minutes): a stream has no length to count epochs in")
        if not (_fixed_tokenizer_source(args, "--streaming") or args.train_tokenizer is False):
            raise UsageError(
                "--streaming tokenises on the fly and needs a fixed tokenizer: give --tokenizer_name DIR, --model_name_or_path, "
                "or --train_tokenizer false (MiniLM's bert-base-uncased vocabulary)"
            )
        if args.held_out_documents < 1:
            raise UsageError(f"--held_out_documents must be at least 1, got {args.held_out_documents}")
        args.train_tokenizer = False
        self.args = args
        validation = list(iter_documents(args.validation_file, args.text_column_name)) if args.validation_file else None
        self.held_out_split: str | None = None  # the dataset's split the held-out documents come from, if any
        if args.train_file:
            self.source = f"`{Path(args.train_file).name}` (streamed)"
            open_stream = functools.partial(document_stream, [args.train_file], args.text_column_name)
        else:
            from datasets import load_dataset

            splits = load_dataset(args.dataset_name, args.dataset_config_name, streaming=True, **args.dataset_kwargs())
            names = hub_split_names(splits, args.dataset_name, args.validation_split_name, test_split_name=None)
            if "train" not in names:
                raise UsageError(f"--dataset_name {args.dataset_name} has no train split (splits: {list(splits)})")
            name = args.dataset_name + (f" ({args.dataset_config_name})" if args.dataset_config_name else "")
            self.source = f"`{name}` (streamed)"
            if validation is None and "validation" in names:
                self.held_out_split = names["validation"]
                held_out = splits[self.held_out_split]
                head = hub_document_stream(held_out, args.text_column_name).take(args.held_out_documents)
                validation = [record["text"] for record in head]
            open_stream = functools.partial(hub_document_stream, splits["train"], args.text_column_name)
        held_out = 0 if validation is not None else args.held_out_documents
        if validation is None:  # the first documents of the stream, which training then skips
            validation = stream_head(open_stream(held_out=0), held_out)
            if not validation:
                raise UsageError(f"{self.source} holds no documents")
        self.texts = DatasetDict(validation=Dataset.from_dict({"text": validation}))
        self.documents = open_stream(held_out=held_out)
        self.part = split_for_processes(self.documents, training_args.process_index, training_args.world_size)
        world, shards = training_args.world_size, self.documents.num_shards
        shards_per_process = shards // world if shards >= world else shards
        if training_args.dataloader_num_workers > shards_per_process:
            # datasets gives each worker whole shards and stops the others; a stopped worker would also make
            # the restored position of a resumed run depend on timing.
            raise UsageError(
                f"--dataloader_num_workers {training_args.dataloader_num_workers} exceeds the {shards_per_process} "
                f"shard(s) each process reads: use at most {shards_per_process} (0 reads in the main process)"
            )
        # Each process reads its own part (see mlm_suite.training.trainer.PickleFreeTrainer) and restores its own position.
        training_args.accelerator_config.dispatch_batches = False
        training_args.ignore_data_skip = True

    def check_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        """Any fast tokenizer with mask and pad tokens will do (the job checks those)."""

    def train_rows(self, tokenizer: PreTrainedTokenizerBase) -> ProcessStream:
        rows = pretraining_rows_function(tokenizer, self.args.max_seq_length, self.args.packing)
        return ProcessStream(stream_rows(self.part, rows))

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase) -> int:
        """The most frequent token of the stream's first documents (the same on every process)."""
        documents = [record["text"] for record in self.documents.take(BASELINE_SAMPLE_DOCUMENTS)]
        rows = pretraining_rows_function(tokenizer, self.args.max_seq_length, self.args.packing)({"text": documents})
        ids = np.concatenate([np.asarray(row, dtype=np.int64) for row in rows["input_ids"]])
        return most_frequent_token(torch.from_numpy(np.bincount(ids, minlength=len(tokenizer))), tokenizer)

    def card(self, rows_trained: int) -> dict[str, object]:
        return {"documents": "streamed", "rows": f"{rows_trained:,} read (streamed)"}


def open_corpus_source(args: Any, training_args: TrainingArguments, given: frozenset[str]) -> PreparedSource | StreamingSource | None:
    """The source of a ``--prepared_data`` or ``--streaming`` run (flags checked, data opened); None without them.

    Adjusts ``args`` to the data (the tokenizer and row settings of a prepared folder; no trained vocabulary)
    and, for a stream, ``training_args`` (per-process loading, see :class:`StreamingSource`).
    """
    if args.prepared_data and args.streaming:
        raise UsageError("give --prepared_data or --streaming, not both")
    if args.prepared_data:
        for flag in ("train_file", "dataset_name"):
            if getattr(args, flag):
                raise UsageError(f"--prepared_data holds the training rows; --{flag} would be ignored: drop it")
        if args.objective == "mlm_nsp":
            raise UsageError("--prepared_data holds MLM rows; --objective mlm_nsp needs documents (NSP pairs)")
        return PreparedSource(args, given)
    if args.streaming:
        return StreamingSource(args, training_args, given)
    return None
