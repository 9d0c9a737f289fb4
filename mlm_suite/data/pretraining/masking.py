"""Dynamic masking for masked-language-model pretraining: token, whole-word and span masking (docs/data.md).

:class:`DataCollatorForMaskedLM` differs from ``transformers.DataCollatorForLanguageModeling`` in three ways: the
expected share of selected tokens is exact in every mode (a per-sequence budget, never cutting a word or span),
word-aware modes work with any fast tokenizer (through the word ids
:func:`~mlm_suite.data.pretraining.chunking.tokenize_for_mlm` keeps), and a seeded mask depends only on ``(seed, epoch, example)``, not on batch composition, padding or workers.
The 80/10/10 corruption is drawn per selected token in every mode, which keeps the modes comparable.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from mlm_suite.data.pretraining.chunking import WORD_ID_SENTINEL
from mlm_suite.data.flattening import flatten_batch, pad_flattened
from mlm_suite.data.padding import column_values, real_positions, scatter_rows

__all__ = [
    "DataCollatorForMaskedLM",
    "check_mlm_tokenizer",
    "MaskingEpochCallback",
    "count_tokens",
]

MaskingMode = Literal["token", "whole_word", "span"]
RandomTokenDistribution = Literal["uniform", "unigram"]
TokenCounts = torch.Tensor | np.ndarray | Sequence[float] | Mapping[int, float]

# Features that steer masking but are not model inputs; they are consumed, never returned.
_EXAMPLE_KEY_FIELDS = ("example_index", "idx")
# The pass over the data an example belongs to, when the data says it (a stream that every process reads
# pass after pass on its own, mlm_suite.data.pretraining.streaming); it overrides the collator's epoch.
_EPOCH_FIELD = "epoch"
# The masking rate of the optimizer step an example is trained in, when a schedule varies it (the batch sampler of
# mlm_suite.data.pretraining.schedules tags every row with it); it overrides the collator's mlm_probability for that
# example.
_RATE_FIELD = "mlm_probability"
# Per-token model inputs padded alongside input_ids (the pad value of token_type_ids comes from
# the tokenizer; position ids of padding are never attended to, so 0 is as good as any).
_PADDED_PASSTHROUGH = ("token_type_ids", "position_ids")
# Per-example labels of auxiliary heads, stacked as they are.
_SCALAR_PASSTHROUGH = ("next_sentence_label",)
# Per-row tags for the trainer's features, never model inputs: the language a training row was drawn from
# (mlm_suite.training.language_shares counts them and takes them out of the batch before the model sees it).
ROW_TAGS = ("language_id",)


def _special_token_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The ids masking never selects nor draws as a random replacement: the special tokens, added ones included."""
    special = set(tokenizer.all_special_ids)
    special.update(index for index, token in tokenizer.added_tokens_decoder.items() if token.special)
    return special


def check_mlm_tokenizer(tokenizer: PreTrainedTokenizerBase, source: str | None = None) -> None:
    """Raise a ValueError if ``tokenizer`` lacks what masked language modelling needs: a mask token, a pad token and
    a token besides the special ones (to predict, and to draw random replacements from).

    ``source`` names the tokenizer in the message (the flag that gave it, say); default: its class.
    """
    name = source or type(tokenizer).__name__
    if tokenizer.mask_token is None or tokenizer.mask_token_id is None:
        raise ValueError(
            f"{name} has no mask token (tokenizer.mask_token is None); masked "
            "language modelling needs one: add it with tokenizer.add_special_tokens({'mask_token': ...})"
        )
    if tokenizer.pad_token_id is None:
        raise ValueError(f"{name} has no pad token (tokenizer.pad_token is None)")
    special = _special_token_ids(tokenizer)
    if all(index in special for index in range(len(tokenizer))):
        tokens = ", ".join(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
        raise ValueError(
            f"{name}: the vocabulary has no token besides special tokens ({tokens}): masked language modelling "
            "predicts the tokens of a vocabulary; give a tokenizer that has one"
        )


def count_tokens(data: Iterable[Any], vocab_size: int, column: str = "input_ids") -> torch.Tensor:
    """Count how often each vocabulary id occurs, for ``random_token_distribution="unigram"``.

    Args:
        data: a ``datasets.Dataset`` with an ``input_ids`` column, or any iterable of id
            sequences or of mappings holding ``input_ids``.
        vocab_size: length of the returned counts; every id must be smaller.
        column: the id column (of a dataset or of the mappings).

    Returns:
        ``(vocab_size,)`` int64 counts.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)

    def add(ids: np.ndarray) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise ValueError(f"token ids must lie in [0, {vocab_size}), got {ids.min()}..{ids.max()}")
        counts[:] += np.bincount(ids, minlength=vocab_size)

    if hasattr(data, "column_names") and hasattr(data, "iter"):
        # Stream an Arrow-backed dataset in batches rather than materialising the whole column.
        for batch in data.iter(batch_size=1024):
            rows = batch[column]
            if len(rows):
                add(np.concatenate([np.asarray(row, dtype=np.int64).ravel() for row in rows]))
        return torch.from_numpy(counts)
    for item in data:
        row = item[column] if isinstance(item, Mapping) else item
        add(np.asarray(row, dtype=np.int64).ravel())
    return torch.from_numpy(counts)


def _process_rank() -> int:
    """Global rank of this process: torch.distributed if initialised, else torchrun's ``RANK``.

    The environment variable matters inside dataloader worker processes, which inherit it but
    not necessarily an initialised process group.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


def _example_seed(seed: int, epoch: int, rank: int, example_key: bytes) -> int:
    """63-bit seed, a pure function of its arguments (``hash()`` is salted per process, blake2b is not)."""
    digest = hashlib.blake2b(struct.pack("<qqq", seed, epoch, rank) + example_key, digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@dataclass(eq=False)
class DataCollatorForMaskedLM:
    """Pad features and mask them for MLM; usable as a ``Trainer`` ``data_collator``.

    Args:
        tokenizer: supplies the pad, mask and special token ids (and word ids, via
            :func:`tokenize_for_mlm`). Must have a mask token and a pad token.
        mlm_probability: expected fraction of the maskable tokens of each sequence to select,
            in (0, 1). Maskable = not padding, not in ``tokenizer.all_special_ids``, not flagged
            by a ``special_tokens_mask`` feature, and (word modes) with a word id >= 0.
        mask_replace_prob: fraction of selected tokens replaced by the mask token.
        random_replace_prob: fraction replaced by a random non-special token; the rest
            (``1 - mask_replace_prob - random_replace_prob``) keep their original id.
        masking: ``"token"`` (independent tokens), ``"whole_word"`` (all sub-tokens of a word
            together) or ``"span"`` (SpanBERT: runs of whole words, lengths ~
            Geometric(``span_geometric_p``) clipped at ``max_span_length`` words; the masked runs
            average ~4.2 words at the defaults on 128-token rows, a little under the sampling
            mean of 4.46, because the span that crosses the token budget tends to be a long one).
            Word modes need a fast tokenizer and a ``word_ids`` feature.
        random_token_distribution: ``"uniform"`` over the non-special ids of
            ``len(tokenizer)``, or ``"unigram"`` in proportion to ``token_counts``.
        token_counts: for ``"unigram"``: counts per vocabulary id (tensor, array, sequence or
            ``{id: count}``; see :func:`count_tokens`). Special ids are zeroed.
        seed: ``None`` draws from the global torch RNG (like HF); an int makes every mask a
            pure function of ``(seed, epoch, process rank, example)``.
        pad_to_multiple_of: round the padded length up to a multiple of this.
        span_geometric_p: success probability of the span-length geometric distribution.
        max_span_length: longest span, in words.
        process_rank: rank mixed into the seeds; ``None`` reads it at each call from
            torch.distributed, else from the ``RANK`` environment variable, else 0.
        flatten: return a flattened batch (:func:`mlm_suite.data.flattening.flatten_batch`):
            every sequence end to end in one ``(1, total)`` row with its offsets and the labelled
            positions, so the model reads no tensor values to lay it out (``torch.compile``
            without graph breaks, no host synchronisation on CUDA). ``pad_to_multiple_of`` then
            rounds the longest-sequence bound ``max_length_q`` instead of the padded length.
        pad_to_tokens: with ``flatten``, pad every batch to exactly this many tokens with unlabelled
            padding sequences (:func:`~mlm_suite.data.flattening.pad_flattened`): one static shape for
            ``torch.compile`` whatever the batch holds.

    A feature is a mapping with ``input_ids`` and optionally ``attention_mask``,
    ``token_type_ids``, ``position_ids`` (padded and returned), ``next_sentence_label``
    (stacked and returned), ``special_tokens_mask`` and ``word_ids`` (used, not returned) and
    ``example_index`` or ``idx`` (the example key for seeded masks, not returned; without one the
    key is the content of ``input_ids``, so identical sequences share a mask) and ``epoch`` (the pass over
    the data the example belongs to, for streams whose passes each process counts itself; it replaces
    the collator's epoch for that example; not returned), ``language_id`` (the row's language, returned as a ``(B,)``
    tag in every layout for the trainer to count; never a model input) and ``mlm_probability`` (the rate for that example, in
    (0, 1): a masking-rate schedule's value at the optimizer step the example is trained in, see
    :mod:`mlm_suite.data.pretraining.schedules`; it replaces the collator's ``mlm_probability``; not returned). Other
    keys, such as leftover text columns, are dropped: word modes need ``remove_unused_columns=False`` in
    ``TrainingArguments``, and the model must never receive those extra columns.

    Returns (from ``__call__``) a dict of ``(batch, padded_length)`` tensors ``input_ids``,
    ``attention_mask`` and ``labels`` (original id at selected positions, -100 elsewhere),
    plus the passthroughs present in the features.
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    masking: MaskingMode = "token"
    random_token_distribution: RandomTokenDistribution = "uniform"
    token_counts: TokenCounts | None = None
    seed: int | None = None
    pad_to_multiple_of: int | None = None
    span_geometric_p: float = 0.2
    max_span_length: int = 10
    process_rank: int | None = None
    flatten: bool = False
    pad_to_tokens: int | None = None
    epoch: int = field(default=0, init=False)
    _special_ids: torch.Tensor = field(init=False, repr=False)
    _replacement_cdf: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        tokenizer = self.tokenizer
        check_mlm_tokenizer(tokenizer)
        if not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must lie in (0, 1), got {self.mlm_probability}")
        for name in ("mask_replace_prob", "random_replace_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.mask_replace_prob + self.random_replace_prob > 1.0:
            raise ValueError(
                f"mask_replace_prob + random_replace_prob must not exceed 1, got "
                f"{self.mask_replace_prob} + {self.random_replace_prob}"
            )
        if self.masking not in ("token", "whole_word", "span"):
            raise ValueError(f"masking must be 'token', 'whole_word' or 'span', got {self.masking!r}")
        if self.masking != "token" and not tokenizer.is_fast:
            raise ValueError(
                f"masking={self.masking!r} needs word ids, which only fast tokenizers provide; "
                f"{type(tokenizer).__name__} is not fast"
            )
        if not 0.0 < self.span_geometric_p <= 1.0:
            raise ValueError(f"span_geometric_p must lie in (0, 1], got {self.span_geometric_p}")
        if self.max_span_length < 1:
            raise ValueError(f"max_span_length must be at least 1, got {self.max_span_length}")
        if self.pad_to_multiple_of is not None and self.pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be a positive integer, got {self.pad_to_multiple_of}")
        if self.pad_to_tokens is not None and not (self.flatten and self.pad_to_tokens >= 1):
            raise ValueError(f"pad_to_tokens pads a flattened batch (flatten=True) to a positive size, got {self.pad_to_tokens}")

        self._special_ids = torch.tensor(sorted(_special_token_ids(tokenizer)), dtype=torch.long)
        self._replacement_cdf = self._build_replacement_cdf()

    def _build_replacement_cdf(self) -> torch.Tensor:
        """``(vocab,)`` float64 cumulative weights of the random-replacement distribution."""
        vocab_size = len(self.tokenizer)
        if self.random_token_distribution == "uniform":
            if self.token_counts is not None:
                raise ValueError("token_counts is only used with random_token_distribution='unigram'")
            weights = torch.ones(vocab_size, dtype=torch.float64)
        elif self.random_token_distribution == "unigram":
            if self.token_counts is None:
                raise ValueError("random_token_distribution='unigram' needs token_counts (see count_tokens)")
            weights = torch.zeros(vocab_size, dtype=torch.float64)
            if isinstance(self.token_counts, Mapping):
                ids = torch.tensor(list(self.token_counts.keys()), dtype=torch.long)
                counts = torch.tensor(list(self.token_counts.values()), dtype=torch.float64)
            else:
                counts = torch.as_tensor(np.asarray(self.token_counts), dtype=torch.float64).ravel()
                ids = torch.arange(len(counts))
            if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
                raise ValueError(f"token_counts covers ids outside the vocabulary of {vocab_size} tokens")
            if (counts < 0).any():
                raise ValueError("token_counts must be non-negative")
            weights[ids] = counts
        else:
            raise ValueError(
                f"random_token_distribution must be 'uniform' or 'unigram', got {self.random_token_distribution!r}"
            )
        weights[self._special_ids[self._special_ids < vocab_size]] = 0.0
        if weights.sum() <= 0:
            raise ValueError("the random-replacement distribution has no non-special token with a positive weight")
        return weights.cumsum(0)

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch``: seeded masks change with it (see :class:`MaskingEpochCallback`)."""
        self.epoch = int(epoch)

    # ------------------------------------------------------------------ collation

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad and mask ``features``; every returned per-token tensor is ``(B, L)``, ``L`` the padded length."""
        if len(features) == 0:
            raise ValueError("cannot collate an empty list of features")
        if "labels" in features[0]:
            raise ValueError("features already hold 'labels'; the masking collator creates them")
        word_mode = self.masking != "token"
        if word_mode and any("word_ids" not in feature for feature in features):
            raise ValueError(
                f"masking={self.masking!r} needs a 'word_ids' feature per example "
                "(tokenise with tokenize_for_mlm and keep the column: remove_unused_columns=False)"
            )
        # numpy until the end: on arrays this small its per-call overhead is a fraction of torch's.
        lengths = np.array([len(feature["input_ids"]) for feature in features], dtype=np.int64)  # (B,)
        length = int(lengths.max())
        if self.pad_to_multiple_of is not None and not self.flatten:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        real = real_positions(lengths, length, self.tokenizer.padding_side)  # (B, L)

        # Per-token columns stay flat, (T,) with T = lengths.sum(), until they are padded.
        ids = column_values(features, "input_ids", lengths)
        input_ids = scatter_rows(ids, real, self.tokenizer.pad_token_id)  # (B, L)
        maskable = ~np.isin(ids, self._special_ids.numpy())
        if "attention_mask" in features[0]:
            attention = column_values(features, "attention_mask", lengths)
            maskable &= attention != 0
            attention_mask = scatter_rows(attention, real, 0)
        else:
            attention_mask = real.astype(np.int64)
        if "special_tokens_mask" in features[0]:
            maskable &= column_values(features, "special_tokens_mask", lengths) == 0
        word_ids = None
        if word_mode:
            words = column_values(features, "word_ids", lengths)
            maskable &= words >= 0
            word_ids = scatter_rows(words, real, WORD_ID_SENTINEL)  # (B, L)
        maskable = scatter_rows(maskable, real, False)  # (B, L), never at padding

        uniforms, accept, generators = self._draw_uniforms(features, ids, lengths, real)
        probability = self._probabilities(features)
        if self.masking == "span":
            selected = self._select_spans(maskable, word_ids, accept, generators, probability)
        else:
            unit_start = maskable if word_ids is None else _word_starts(maskable, word_ids)
            selected = _budgeted_selection(maskable, unit_start, uniforms[0], accept, probability)

        corrupted, labels = self._corrupt(input_ids, selected, uniforms[1], uniforms[2])
        batch = {"input_ids": corrupted, "attention_mask": attention_mask, "labels": labels}
        pad_values = {"token_type_ids": self.tokenizer.pad_token_type_id, "position_ids": 0}
        for key in _PADDED_PASSTHROUGH:
            if key in features[0]:
                batch[key] = scatter_rows(column_values(features, key, lengths), real, pad_values[key])
        batch = {key: torch.from_numpy(value) for key, value in batch.items()}
        for key in _SCALAR_PASSTHROUGH:
            if key in features[0]:
                batch[key] = torch.tensor([int(feature[key]) for feature in features], dtype=torch.long)
        tags = {key: torch.tensor([int(feature[key]) for feature in features], dtype=torch.long)
                for key in ROW_TAGS if key in features[0]}  # (B,) each, whatever the layout
        if self.flatten:
            batch = flatten_batch(batch, self.pad_to_multiple_of)
            if self.pad_to_tokens is not None:
                batch = pad_flattened(batch, self.pad_to_tokens, self.tokenizer.pad_token_id, self.tokenizer.pad_token_type_id)
        return {**batch, **tags}

    def _probabilities(self, features: Sequence[Mapping[str, Any]]) -> float | np.ndarray:
        """``mlm_probability``, or ``(B,)`` rates when the features carry their own (a masking-rate schedule)."""
        if _RATE_FIELD not in features[0]:
            return self.mlm_probability
        rates = np.array([float(feature.get(_RATE_FIELD, self.mlm_probability)) for feature in features])
        if not ((rates > 0.0) & (rates < 1.0)).all():
            raise ValueError(f"a feature's mlm_probability must lie in (0, 1), got {rates.min()}..{rates.max()}")
        return rates

    # ------------------------------------------------------------------ randomness

    def _example_key(self, feature: Mapping[str, Any], ids: np.ndarray) -> bytes:
        for name in _EXAMPLE_KEY_FIELDS:
            if name in feature:
                return b"index" + struct.pack("<q", int(feature[name]))
        return b"content" + ids.tobytes()

    def _draw_uniforms(
        self, features: Sequence[Mapping[str, Any]], ids: np.ndarray, lengths: np.ndarray, real: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[torch.Generator | None]]:
        """All uniform draws of one batch (float32, as torch draws them).

        Args:
            ids: ``(T,)`` the input ids of all features end to end (``T = lengths.sum()``).
            lengths: ``(B,)`` tokens per feature.
            real: ``(B, L)`` where the tokens are in the padded batch.

        Returns:
            uniforms: ``(3, B, L)``: [0] unit order keys, [1] corruption choice (mask / random /
                keep), [2] which random token.
            accept: ``(B,)``: whether the unit that crosses the budget is taken.
            generators: per example, the generator that further draws (spans) come from.
        """
        batch, length = real.shape
        if self.seed is None:
            return torch.rand(3, batch, length).numpy(), torch.rand(batch).numpy(), [None] * batch
        rank = self._resolved_rank()
        uniforms = np.ones((3, batch, length), dtype=np.float32)
        accept = np.empty(batch, dtype=np.float32)
        generators: list[torch.Generator | None] = []
        token_ends = np.cumsum(lengths).tolist()
        first_columns = real.argmax(1).tolist()  # where each row's tokens begin, on either padding side
        for row, (feature, n, end, first) in enumerate(zip(features, lengths.tolist(), token_ends, first_columns)):
            epoch = int(feature[_EPOCH_FIELD]) if _EPOCH_FIELD in feature else self.epoch
            key = _example_seed(self.seed, epoch, rank, self._example_key(feature, ids[end - n : end]))
            generator = torch.Generator().manual_seed(key)
            # Drawn at the example's own length, so padding to a longer batch changes nothing.
            draws = torch.rand(3 * n + 1, generator=generator).numpy()
            uniforms[:, row, first : first + n] = draws[:-1].reshape(3, n)
            accept[row] = draws[-1]
            generators.append(generator)
        return uniforms, accept, generators

    def _resolved_rank(self) -> int:
        return _process_rank() if self.process_rank is None else self.process_rank

    # ------------------------------------------------------------------ span selection

    def _select_spans(
        self,
        maskable: np.ndarray,
        word_ids: np.ndarray,
        accept: np.ndarray,
        generators: Sequence[torch.Generator | None],
        probability: float | np.ndarray | None = None,
    ) -> np.ndarray:
        """``(B, L)`` bool selection made of whole-word spans, within each sequence's token budget.

        ``probability``: the rate, or ``(B,)`` rates (default ``mlm_probability``).
        """
        rates = np.broadcast_to(self.mlm_probability if probability is None else probability, (len(maskable),))
        selected = np.zeros_like(maskable)
        for row, (row_maskable, row_starts) in enumerate(zip(maskable, _word_starts(maskable, word_ids))):
            positions = np.flatnonzero(row_maskable)  # (T,) maskable token positions
            if len(positions) == 0:
                continue
            first_of_word = row_starts[positions]  # (T,)
            word_of_token = np.cumsum(first_of_word) - 1  # (T,)
            word_lengths = np.bincount(word_of_token)  # (W,) tokens per word
            # A segment is a run of adjacent maskable tokens; spans never jump over a special token.
            new_segment = np.concatenate([[True], np.diff(positions) != 1])
            word_segment = np.cumsum(new_segment)[first_of_word]  # (W,)
            budget = float(rates[row]) * len(positions)
            # Each span before the last takes at least one token: floor(budget) + 2 spans at most.
            draws = torch.rand(2 * (math.floor(budget) + 2), generator=generators[row]).double().numpy()
            chosen = self._sample_spans(word_lengths, word_segment, budget, float(accept[row]), draws)
            selected[row, positions[chosen[word_of_token]]] = True
        return selected

    def _sample_spans(
        self,
        word_lengths: np.ndarray,
        word_segment: np.ndarray,
        budget: float,
        accept: float,
        draws: np.ndarray,
    ) -> np.ndarray:
        """Choose spans of words of one sequence; returns ``(W,)`` bool, True for words in a span.

        Each span: draw a length ``l`` ~ Geometric(p) clipped at ``max_span_length`` words, then a
        start uniformly among the placements of ``l`` whole words that stay in one segment and
        neither overlap nor touch an earlier span (so spans remain distinct runs). Only when the
        sequence is too crowded for that are touching spans, then shorter spans, allowed.
        """
        chosen = np.zeros(len(word_lengths), dtype=bool)
        taken = 0
        log_fail = math.log1p(-self.span_geometric_p) if self.span_geometric_p < 1.0 else -math.inf
        for length_draw, start_draw in draws.reshape(-1, 2):
            if taken >= budget:
                break
            span_length = min(self.max_span_length, 1 + int(math.log1p(-length_draw) / log_fail))
            placement = _span_placements(chosen, word_segment, span_length)
            if placement is None:
                break
            candidates, span_length = placement
            start = candidates[min(int(start_draw * len(candidates)), len(candidates) - 1)]
            span = slice(start, start + span_length)
            cost = int(word_lengths[span].sum())
            if taken + cost <= budget:
                chosen[span] = True
                taken += cost
                continue
            # The span crossing the budget is taken with probability (budget - taken) / cost,
            # which makes the expected number of selected tokens exactly the budget.
            if accept * cost < budget - taken:
                chosen[span] = True
            break
        return chosen

    # ------------------------------------------------------------------ corruption

    def _corrupt(
        self, input_ids: np.ndarray, selected: np.ndarray, choice: np.ndarray, token_draw: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Apply mask / random / keep per selected token; all arrays ``(B, L)``.

        Returns:
            ``(corrupted input ids, labels)``, labels -100 where not selected.
        """
        labels = np.where(selected, input_ids, -100)
        use_mask = selected & (choice < self.mask_replace_prob)
        use_random = selected & ~use_mask & (choice < self.mask_replace_prob + self.random_replace_prob)
        corrupted = input_ids.copy()
        corrupted[use_mask] = self.tokenizer.mask_token_id
        # Inverse-CDF sampling; special ids have zero weight, hence empty CDF intervals.
        # A float32 uniform is at most 1 - 2**-24, so the target stays below the total.
        cdf = self._replacement_cdf.numpy()
        targets = token_draw[use_random].astype(np.float64) * cdf[-1]
        corrupted[use_random] = np.searchsorted(cdf, targets, side="right")
        return corrupted, labels


def _word_starts(maskable: np.ndarray, word_ids: np.ndarray) -> np.ndarray:
    """``(B, L)`` bool: maskable tokens that begin a word.

    A word is a run of adjacent maskable tokens sharing a word id; equal ids on either side of a
    special token (e.g. the two texts of a pair both count words from 0) stay different words.
    """
    continues = np.zeros_like(maskable)
    continues[:, 1:] = maskable[:, :-1] & (word_ids[:, 1:] == word_ids[:, :-1])
    return maskable & ~continues


def _budgeted_selection(
    maskable: np.ndarray, unit_start: np.ndarray, keys: np.ndarray, accept: np.ndarray, probability: float | np.ndarray
) -> np.ndarray:
    """Select whole units in random order up to a budget of ``probability * n_maskable`` tokens per row.

    Vectorised over the batch: the units of all rows are sorted together by ``row + key``.

    Args:
        maskable: ``(B, L)`` bool.
        unit_start: ``(B, L)`` bool, the first token of each unit (a unit extends over the
            following maskable tokens up to the next start).
        keys: ``(B, L)`` uniforms in [0, 1); a unit's random order key is the one at its start.
        accept: ``(B,)`` uniforms deciding whether the unit crossing the budget is taken.
        probability: target expected fraction of maskable tokens, or ``(B,)`` one per row.

    Returns:
        ``(B, L)`` bool selection.
    """
    units_per_row = unit_start.sum(1)  # (B,)
    unit_offset = units_per_row.cumsum() - units_per_row  # (B,) global index of each row's first unit
    local_unit = unit_start.cumsum(1) - 1  # (B, L)
    token_unit = (local_unit + unit_offset[:, None])[maskable]  # (T,) global unit of each maskable token
    unit_count = int(units_per_row.sum())
    unit_length = np.bincount(token_unit, minlength=unit_count)  # (U,)
    unit_row = np.repeat(np.arange(len(units_per_row)), units_per_row)  # (U,)
    # Stable, so that (rare) equal keys are ordered by position within the row alone and the
    # result for a row cannot depend on the other rows of the batch.
    order = np.argsort(unit_row + keys[unit_start].astype(np.float64), kind="stable")  # (U,)

    sorted_length = unit_length[order]  # (U,)
    sorted_row = unit_row[order]  # (U,)
    maskable_per_row = maskable.sum(1)  # (B,)
    tokens_before_row = maskable_per_row.cumsum() - maskable_per_row  # (B,)
    taken_after = sorted_length.cumsum() - tokens_before_row[sorted_row]  # (U,) tokens once this unit is in
    taken_before = (taken_after - sorted_length).astype(np.float64)
    budget = (probability * maskable_per_row.astype(np.float64))[sorted_row]  # (U,)
    fits = taken_after <= budget
    crosses = ~fits & (taken_before < budget)
    # Taking the crossing unit with probability (budget - taken_before) / length makes the
    # expected number of selected tokens exactly the budget.
    take_crossing = accept[sorted_row].astype(np.float64) * sorted_length < budget - taken_before
    chosen_sorted = fits | (crosses & take_crossing)  # (U,)

    chosen = np.empty_like(chosen_sorted)
    chosen[order] = chosen_sorted
    selected = np.zeros_like(maskable)
    selected[maskable] = chosen[token_unit]
    return selected


def _span_placements(
    chosen: np.ndarray, word_segment: np.ndarray, span_length: int
) -> tuple[np.ndarray, int] | None:
    """Start words at which a span of ``span_length`` words may go, and that length.

    Prefers spans that neither overlap nor touch ``chosen`` words; falls back to touching, then to
    shorter spans, and returns None when no word is free.
    """
    word_count = len(chosen)
    same_segment_as_next = word_segment[1:] == word_segment[:-1]  # (W - 1,)
    near_chosen = chosen.copy()
    near_chosen[1:] |= chosen[:-1] & same_segment_as_next
    near_chosen[:-1] |= chosen[1:] & same_segment_as_next
    for length in range(min(span_length, word_count), 0, -1):
        for blocked in (near_chosen, chosen):
            blocked_before = np.concatenate([[0], np.cumsum(blocked)])  # (W + 1,)
            free = blocked_before[length:] == blocked_before[: word_count - length + 1]
            one_segment = word_segment[length - 1 :] == word_segment[: word_count - length + 1]
            candidates = np.flatnonzero(free & one_segment)
            if len(candidates):
                return candidates, length
    return None


class MaskingEpochCallback(TrainerCallback):
    """Tell a seeded :class:`DataCollatorForMaskedLM` the epoch, so that masks change every epoch.

    The Trainer calls ``set_epoch`` on its sampler, not on the collator. ``on_epoch_begin`` runs
    before the epoch's dataloader iterator is created, so non-persistent dataloader workers
    (the default) receive the updated collator; with ``dataloader_persistent_workers=True``
    the workers keep the collator of the first epoch.
    """

    def __init__(self, collator: DataCollatorForMaskedLM) -> None:
        self.collator = collator

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # state.epoch is fractional progress: an integer at an epoch boundary, fractional when a
        # run resumes mid-epoch, where the floor is still the current epoch.
        self.collator.set_epoch(math.floor(state.epoch or 0.0))
