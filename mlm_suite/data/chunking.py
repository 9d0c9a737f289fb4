"""Tokenising documents into model rows for masked-language-model training, with word ids for word-aware masking."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from transformers import PreTrainedTokenizerBase

__all__ = ["WORD_ID_SENTINEL", "tokenize_for_mlm"]

WORD_ID_SENTINEL = -1
"""Word id stored for special tokens: Arrow columns of ints cannot hold ``None`` cleanly."""


def tokenize_for_mlm(
    examples: Mapping[str, Sequence[str]],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    text_column: str = "text",
    split_long_texts: bool = True,
) -> dict[str, list[list[int]]]:
    """Batched ``datasets.Dataset.map`` function that tokenises text and keeps word ids for masking.

    Use as ``dataset.map(tokenize_for_mlm, batched=True, remove_columns=dataset.column_names,
    fn_kwargs={"tokenizer": tok, "max_length": 128})``. With ``split_long_texts`` a text longer
    than ``max_length`` becomes several rows (each with its own special tokens) instead of being
    truncated, so the number of rows can differ from the number of texts, which is why the input
    columns must be removed.

    Returns:
        The tokenizer's outputs (``input_ids``, ``attention_mask``, ``token_type_ids`` when the
        model uses them) plus ``special_tokens_mask`` and ``word_ids``: per token, the index of
        the pre-tokenizer word it came from, :data:`WORD_ID_SENTINEL` for special tokens.
    """
    if not tokenizer.is_fast:
        raise ValueError(
            f"tokenize_for_mlm needs a fast tokenizer for word ids; {type(tokenizer).__name__} is not fast"
        )
    encoding = tokenizer(
        list(examples[text_column]),
        truncation=True,
        max_length=max_length,
        return_overflowing_tokens=split_long_texts,
        return_special_tokens_mask=True,
    )
    outputs = {key: value for key, value in encoding.items() if key != "overflow_to_sample_mapping"}
    outputs["word_ids"] = [
        [WORD_ID_SENTINEL if word is None else word for word in encoding.word_ids(row)]
        for row in range(len(encoding["input_ids"]))
    ]
    return outputs
