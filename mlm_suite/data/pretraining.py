"""The pretraining job's rows: documents tokenised (or packed) into model rows, or NSP sentence pairs.

* :func:`build_features`: the rows of one split, each with the ``example_index`` its seeded masks are keyed by.
* :func:`first_rows`: at most the first N rows (``--max_train_samples``/``--max_eval_samples``, as ``run_mlm.py``).
* :func:`most_frequent_row_token`: the most frequent non-special token of the training rows, the baseline's answer.

``args`` is the job's ``PretrainingArguments`` (``objective``, ``packing``, ``max_seq_length``, ``nsp_probability``,
``preprocessing_num_workers``, ``overwrite_cache``).
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.chunking import tokenize_for_mlm
from mlm_suite.data.masking import count_tokens
from mlm_suite.data.nsp import build_nsp_examples, split_sentences
from mlm_suite.data.packing import packing_map_function
from mlm_suite.data.prepared import build_rows, most_frequent_token

__all__ = ["EVAL_SEED", "build_features", "first_rows", "most_frequent_row_token"]

# The seed of the held-out rows' NSP pairs and masks: it does not follow --seed, so that they are the same in every
# run and eval numbers can be compared across runs.
EVAL_SEED = 1234


def build_features(texts: Dataset, tokenizer: PreTrainedTokenizerBase, args: Any, seed: int, split: str) -> Dataset:
    """Model rows of one split: tokenised (or packed) documents, or NSP pairs; plus ``example_index``.

    Documents are tokenised on ``--preprocessing_num_workers`` processes (NSP pairs, which draw their random B from
    the whole split, in this one); the rows do not depend on their number.
    """
    workers = args.preprocessing_num_workers if args.preprocessing_num_workers and args.preprocessing_num_workers > 1 else None
    cache = {"load_from_cache_file": False} if args.overwrite_cache else {}
    if args.objective == "mlm_nsp":
        documents = [split_sentences(text) for text in texts["text"]]
        try:
            # A one-sentence document gives no true pair; it is left out (with a warning) rather than refusing a
            # whole corpus for it (one of the 1,500 embedded reviews is one sentence long).
            pairs = build_nsp_examples(
                documents, tokenizer, args.max_seq_length, nsp_probability=args.nsp_probability, seed=seed,
                on_short_document="skip",
            )
        except ValueError as error:
            raise ValueError(f"{split} documents: {error}") from None
        features = Dataset.from_dict(pairs)
    elif args.packing and workers:
        # Tokenised on the workers, packed in one process in batches of the same size: the same rows as below.
        features = build_rows(texts, tokenizer, args.max_seq_length, True, workers).remove_columns("example_index")
    elif args.packing:
        pack = packing_map_function(tokenizer, args.max_seq_length)
        features = texts.map(pack, batched=True, remove_columns=texts.column_names, desc=f"packing {split}", **cache)
    else:
        features = texts.map(
            tokenize_for_mlm,
            batched=True,
            remove_columns=texts.column_names,
            fn_kwargs={"tokenizer": tokenizer, "max_length": args.max_seq_length},
            desc=f"tokenizing {split}",
            num_proc=workers,  # one document at a time: the same rows for any number of processes
            **cache,
        )
    if len(features) == 0:
        raise ValueError(f"the {split} documents produced no rows")
    # Seeded masks are keyed by this index, so a row's mask does not depend on batching or on its process.
    return features.add_column("example_index", list(range(len(features))))


def first_rows(rows: Dataset, limit: int | None) -> Dataset:
    """At most the first ``limit`` rows (all of them when ``limit`` is None), as ``run_mlm.py`` selects them."""
    return rows.select(range(limit)) if limit is not None and len(rows) > limit else rows


def most_frequent_row_token(features: Dataset, tokenizer: PreTrainedTokenizerBase) -> int:
    """The most frequent non-special token id of the training rows: the baseline's single prediction."""
    return most_frequent_token(count_tokens(features, len(tokenizer)), tokenizer)
