"""Tokenising documents into model rows for masked-language-model training, with word ids for word-aware masking.

Long documents are cut into rows by this module, not by the tokenizer's ``return_overflowing_tokens``:
each document is tokenised once without special tokens, its token ids are cut into consecutive
pieces of ``max_length - tokenizer.num_special_tokens_to_add()`` tokens, and each piece gets the
tokenizer's special tokens. So every token of a document lands in exactly one row, in order,
whatever a given ``transformers``/``tokenizers`` release does with overflowing tokens (some
returned only the first two windows of each document, dropping most of a corpus silently).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

__all__ = ["WORD_ID_SENTINEL", "SpecialTokenTemplate", "special_token_template", "tokenize_for_mlm"]

WORD_ID_SENTINEL = -1
"""Word id stored for special tokens: Arrow columns of ints cannot hold ``None`` cleanly."""

# Texts the template is read from: the first that gives at least one content token is used.
_PROBE_TEXTS = ("a", "0", ".", "the")


@dataclass(frozen=True)
class SpecialTokenTemplate:
    """How a fast tokenizer frames a single sequence: ``prefix + content + suffix``.

    Read from the tokenizer's own post-processor (:func:`special_token_template`): ``prefix`` and
    ``suffix`` are the special token ids around the content (``[CLS]`` / ``[SEP]`` for BERT,
    ``<s>`` / ``</s>`` for RoBERTa, nothing for GPT-2), with their token type ids; ``content_type``
    is the token type id of the content tokens.
    """

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    prefix_types: tuple[int, ...]
    suffix_types: tuple[int, ...]
    content_type: int

    @property
    def num_special_tokens(self) -> int:
        return len(self.prefix) + len(self.suffix)


def special_token_template(tokenizer: PreTrainedTokenizerBase) -> SpecialTokenTemplate:
    """The special tokens a fast tokenizer adds around one sequence, read from its post-processor.

    Fast tokenizers of ``transformers`` 5 have no ``build_inputs_with_special_tokens`` /
    ``create_token_type_ids_from_sequences``; their special tokens come from the Rust
    post-processor. This encodes a short probe text with and without special tokens and reads
    off what was added before and after the content, so rows built as ``prefix + piece + suffix``
    are exactly what the tokenizer itself would produce for that piece.

    Raises:
        ValueError: the tokenizer's framing is not ``prefix + content + suffix`` with a single
            content type id, or disagrees with ``tokenizer.num_special_tokens_to_add()``.
    """
    for text in _PROBE_TEXTS:
        content = tokenizer(text, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False)
        if content["input_ids"]:
            break
    else:
        raise ValueError(f"{type(tokenizer).__name__} gives no token for any probe text {_PROBE_TEXTS}")
    framed = tokenizer(
        text, add_special_tokens=True, return_attention_mask=False, return_token_type_ids=True,
        return_special_tokens_mask=True,
    )  # fmt: skip
    ids, types, special = framed["input_ids"], framed["token_type_ids"], framed["special_tokens_mask"]
    positions = [position for position, flag in enumerate(special) if not flag]
    start, end = (positions[0], positions[-1] + 1) if positions else (0, 0)
    content_ids = list(content["input_ids"])
    if ids[start:end] != content_ids or any(special[start:end]) or len(set(types[start:end])) != 1:
        raise ValueError(
            f"{type(tokenizer).__name__} does not frame a sequence as special tokens + content + special tokens "
            f"(probe {text!r}: content {content_ids}, with special tokens {ids}, mask {special}); "
            "tokenize_for_mlm cannot split its documents into rows"
        )
    template = SpecialTokenTemplate(
        prefix=tuple(ids[:start]), suffix=tuple(ids[end:]),
        prefix_types=tuple(types[:start]), suffix_types=tuple(types[end:]), content_type=types[start],
    )  # fmt: skip
    expected = tokenizer.num_special_tokens_to_add(pair=False)
    if template.num_special_tokens != expected:
        raise ValueError(
            f"{type(tokenizer).__name__} adds {template.num_special_tokens} special tokens to a sequence "
            f"but num_special_tokens_to_add() says {expected}"
        )
    return template


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

    Rows are cut by this function, not by the tokenizer's overflow handling: each text is
    tokenised once without special tokens, cut into consecutive pieces of
    ``max_length - tokenizer.num_special_tokens_to_add()`` tokens, and each piece gets the
    tokenizer's special tokens (:func:`special_token_template`). Every token of a text lands in
    exactly one row, in order; an empty text gives one row of special tokens only. Without
    ``split_long_texts`` each text gives its first piece (the tokenizer's truncation; the last
    piece when its ``truncation_side`` is ``"left"``).

    Returns:
        ``input_ids``, ``token_type_ids`` (when the tokenizer's ``model_input_names`` include
        them), ``attention_mask`` (likewise; all ones), ``special_tokens_mask`` (1 at the added
        special tokens) and ``word_ids``: per token, the index of the pre-tokenizer word of its
        text that it came from (counted over the whole text, so a row continuing a text goes on
        with its word numbers), :data:`WORD_ID_SENTINEL` for special tokens.

    Raises:
        ValueError: a slow tokenizer, or ``max_length`` leaves no room for content tokens.
    """
    if not tokenizer.is_fast:
        raise ValueError(
            f"tokenize_for_mlm needs a fast tokenizer for word ids; {type(tokenizer).__name__} is not fast"
        )
    template = special_token_template(tokenizer)
    piece_length = max_length - template.num_special_tokens
    if piece_length < 1:
        raise ValueError(
            f"max_length={max_length} leaves no room for content: the tokenizer adds "
            f"{template.num_special_tokens} special tokens to every row"
        )
    input_names = tokenizer.model_input_names
    with_types = "token_type_ids" in input_names
    with_attention = "attention_mask" in input_names
    outputs: dict[str, list[list[int]]] = {"input_ids": []}
    if with_types:
        outputs["token_type_ids"] = []
    if with_attention:
        outputs["attention_mask"] = []
    outputs["special_tokens_mask"] = []
    outputs["word_ids"] = []

    texts = list(examples[text_column])
    if not texts:
        return outputs
    # One batched call (Rust, parallel); no truncation when splitting: the pieces are cut below.
    # verbose=False: a document longer than model_max_length is expected here, not an error.
    content = tokenizer(
        texts,
        add_special_tokens=False,
        truncation=not split_long_texts,
        max_length=None if split_long_texts else piece_length,
        return_attention_mask=False,
        return_token_type_ids=False,
        return_special_tokens_mask=True,
        verbose=False,
    )
    prefix, suffix = list(template.prefix), list(template.suffix)
    prefix_mask, suffix_mask = [1] * len(prefix), [1] * len(suffix)
    prefix_words, suffix_words = [WORD_ID_SENTINEL] * len(prefix), [WORD_ID_SENTINEL] * len(suffix)
    prefix_types, suffix_types = list(template.prefix_types), list(template.suffix_types)
    for index in range(len(texts)):
        ids = content["input_ids"][index]
        special = content["special_tokens_mask"][index]
        words = [WORD_ID_SENTINEL if word is None else word for word in content.word_ids(index)]
        # range(0, 0 or 1, ...) → one (special tokens only) row for an empty text
        for start in range(0, max(len(ids), 1), piece_length):
            stop = start + piece_length
            row = prefix + ids[start:stop] + suffix
            outputs["input_ids"].append(row)
            if with_types:
                outputs["token_type_ids"].append(
                    prefix_types + [template.content_type] * (len(row) - len(prefix) - len(suffix)) + suffix_types
                )
            if with_attention:
                outputs["attention_mask"].append([1] * len(row))
            outputs["special_tokens_mask"].append(prefix_mask + special[start:stop] + suffix_mask)
            outputs["word_ids"].append(prefix_words + words[start:stop] + suffix_words)
    return outputs
