"""Training BERT-style WordPiece tokenizers, and sampling multilingual corpora to train them on.

``train_wordpiece_tokenizer`` builds the same pipeline as Google's uncased BERT tokenizer
(BERT normalizer, BERT pre-tokenizer, ``##`` WordPiece, ``[CLS] A [SEP] B [SEP]`` template)
and returns it as a ``transformers.PreTrainedTokenizerFast`` that round-trips through
``save_pretrained`` / ``AutoTokenizer.from_pretrained(folder)`` without the Hub.

``language_sampling_probs`` and ``sample_multilingual_corpus`` implement the exponentially
smoothed language sampling of XLM-R (Conneau et al., 2020): q_i = p_i^α / Σ_j p_j^α with
p_i = n_i / Σ_j n_j, which up-samples low-resource languages so that they get a fair share of
the vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import overload

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

__all__ = ["train_wordpiece_tokenizer", "language_sampling_probs", "sample_multilingual_corpus"]

DEFAULT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _as_files(texts_or_files: object) -> list[str] | None:
    """The file paths in ``texts_or_files`` if it is a list of files, else ``None`` (it holds texts)."""
    if not isinstance(texts_or_files, Sequence) or isinstance(texts_or_files, str) or not texts_or_files:
        return None
    if all(isinstance(item, os.PathLike) for item in texts_or_files):
        return [os.fspath(item) for item in texts_or_files]
    if all(isinstance(item, str) and "\n" not in item and os.path.isfile(item) for item in texts_or_files):
        return list(texts_or_files)
    return None


def train_wordpiece_tokenizer(
    texts_or_files: Iterable[str] | Sequence[str | os.PathLike],
    vocab_size: int = 30522,
    lowercase: bool = True,
    min_frequency: int = 2,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
    strip_accents: bool | None = None,
    model_max_length: int = 512,
    limit_alphabet: int = 1000,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a BERT WordPiece tokenizer and wrap it as a ``PreTrainedTokenizerFast``.

    Args:
        texts_or_files: the training text. Read as files (one or many lines each) when every item
            is an ``os.PathLike`` or every item is a string naming an existing file; otherwise
            every item is a text (a list, or any iterable, streamed once).
        vocab_size: target vocabulary size, special tokens included.
        lowercase: lowercase in the normalizer (``True`` for "uncased" models).
        min_frequency: a merge must be seen at least this often to enter the vocabulary.
        special_tokens: the pad, unk, cls, sep and mask tokens, in this order (they get ids 0..4);
            further entries become additional special tokens with the following ids.
        strip_accents: BERT's rule when ``None``: strip accents exactly when lowercasing. Pass
            ``False`` to keep accents of an uncased multilingual vocabulary.
        model_max_length: longest input the model accepts (``tokenizer.model_max_length``).
        limit_alphabet: at most this many initial characters are kept (the rarest become [UNK]).
        show_progress: show the trainer's progress bar.

    Returns:
        The tokenizer, with ``pad/unk/cls/sep/mask_token`` set, a ``[CLS] $A [SEP]`` /
        ``[CLS] $A [SEP] $B:1 [SEP]:1`` post-processor (token_type_ids 0 then 1) and a ``##``
        WordPiece decoder. Decoding does not clean up spaces, so ``decode(encode(text))`` is the
        text's pre-tokenized words joined by single spaces.
    """
    special_tokens = list(special_tokens)
    if len(special_tokens) < 5:
        raise ValueError(
            "special_tokens must name at least the pad, unk, cls, sep and mask tokens (5 tokens), "
            f"got {len(special_tokens)}: {special_tokens}"
        )
    if len(set(special_tokens)) != len(special_tokens):
        raise ValueError(f"special_tokens must be distinct, got {special_tokens}")
    if vocab_size <= len(special_tokens):
        raise ValueError(f"vocab_size={vocab_size} must exceed the number of special tokens ({len(special_tokens)})")
    pad, unk, cls, sep, mask = special_tokens[:5]

    tokenizer = Tokenizer(models.WordPiece(unk_token=unk, continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # No decoder clean-up: decoding is then the exact inverse of pre-tokenization (words joined by
    # single spaces) instead of a heuristic that glues some punctuation back and not other.
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        limit_alphabet=limit_alphabet,
        continuing_subword_prefix="##",
        show_progress=show_progress,
    )
    files = _as_files(texts_or_files)
    if files is not None:
        tokenizer.train(files, trainer=trainer)
    else:
        if isinstance(texts_or_files, str):
            raise ValueError("texts_or_files must be a list or iterable of texts or file paths, not one string")
        length = len(texts_or_files) if isinstance(texts_or_files, Sequence) else None
        tokenizer.train_from_iterator(texts_or_files, trainer=trainer, length=length)
    # The trainer returns the same tokens every time but numbers some of them in hash-set order (the
    # continuing-subword alphabet and merges that follow it), so ids, and with them a seeded model's
    # embeddings, would change from run to run. Ids are only labels to WordPiece (it segments by greedy
    # longest match over the token set): number the tokens canonically, special tokens first.
    trained = tokenizer.get_vocab()
    ordered = special_tokens + sorted(token for token in trained if token not in special_tokens)
    tokenizer.model = models.WordPiece(
        {token: index for index, token in enumerate(ordered)}, unk_token=unk, continuing_subword_prefix="##"
    )

    cls_id, sep_id = tokenizer.token_to_id(cls), tokenizer.token_to_id(sep)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, cls_id), (sep, sep_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=pad,
        unk_token=unk,
        cls_token=cls,
        sep_token=sep,
        mask_token=mask,
        additional_special_tokens=special_tokens[5:],
        model_max_length=model_max_length,
        # The base class returns no token_type_ids by default; BERT's NSP and pair tasks need them.
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        clean_up_tokenization_spaces=False,
    )


@overload
def language_sampling_probs(counts: Mapping[str, float], alpha: float = 0.3) -> dict[str, float]: ...
@overload
def language_sampling_probs(counts: Sequence[float], alpha: float = 0.3) -> list[float]: ...


def language_sampling_probs(
    counts: Mapping[str, float] | Sequence[float], alpha: float = 0.3
) -> dict[str, float] | list[float]:
    """Exponentially smoothed sampling probabilities q_i = p_i^α / Σ_j p_j^α, p_i = n_i / Σ_j n_j.

    ``alpha=1`` keeps the empirical distribution p; ``alpha → 0`` tends to uniform. XLM-R uses 0.3.

    Args:
        counts: amount of data per language (sentences, tokens...), as ``{language: count}`` or a list.
        alpha: smoothing exponent, > 0.

    Returns:
        q in the same form as ``counts`` (a dict with the same keys, or a list in the same order).
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    values = list(counts.values()) if isinstance(counts, Mapping) else list(counts)
    if not values:
        raise ValueError("counts is empty: need at least one language")
    non_positive = [value for value in values if not value > 0]
    if non_positive:
        raise ValueError(f"every count must be > 0, got {non_positive} in {counts}")
    p = np.asarray(values, dtype=np.float64)
    p /= p.sum()
    # Work in log space so that tiny alphas do not underflow p^alpha towards 1 for every language.
    log_q = alpha * np.log(p)
    q = np.exp(log_q - log_q.max())
    q /= q.sum()
    if isinstance(counts, Mapping):
        return {language: float(value) for language, value in zip(counts, q)}
    return [float(value) for value in q]


def sample_multilingual_corpus(
    corpora: Mapping[str, Sequence[str]], n_samples: int, alpha: float = 0.3, seed: int = 0
) -> tuple[list[str], list[str]]:
    """Draw a tokenizer-training sample across languages with XLM-R's smoothed probabilities.

    Each draw picks a language with probability q (``language_sampling_probs`` of the number of
    texts per language), then a text of that language uniformly. Within a language, texts are
    taken without replacement (a fresh random permutation) until the language is exhausted, then
    a new permutation starts: small languages are repeated, i.e. sampled with replacement across
    passes, which is the point of up-sampling them.

    Args:
        corpora: ``{language: texts}``, every language with at least one text.
        n_samples: number of texts to draw, > 0.
        alpha: smoothing exponent for ``language_sampling_probs``.
        seed: seed of the numpy generator; the same arguments give the same sample.

    Returns:
        ``(texts, languages)``: two lists of length ``n_samples``; ``languages[i]`` is the language
        of ``texts[i]``.
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    empty = [language for language, texts in corpora.items() if len(texts) == 0]
    if not corpora or empty:
        raise ValueError(f"every language needs at least one text; empty: {empty or 'no languages given'}")
    languages = list(corpora)
    q = language_sampling_probs([len(corpora[language]) for language in languages], alpha)
    rng = np.random.default_rng(seed)
    drawn_languages = rng.choice(len(languages), size=n_samples, p=q)

    texts: list[str] = [""] * n_samples
    for index, language in enumerate(languages):
        positions = np.flatnonzero(drawn_languages == index)
        corpus = corpora[language]
        passes = -(-len(positions) // len(corpus))
        order = np.concatenate([rng.permutation(len(corpus)) for _ in range(passes)]) if passes else []
        for position, text_index in zip(positions, order):
            texts[position] = corpus[text_index]
    return texts, [languages[index] for index in drawn_languages]
