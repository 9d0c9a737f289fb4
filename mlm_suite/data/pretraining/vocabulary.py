"""Training BERT-style WordPiece tokenizers, and sampling multilingual corpora to train them on.

``train_wordpiece_tokenizer`` builds the same pipeline as Google's uncased BERT tokenizer
(BERT normalizer, BERT pre-tokenizer, ``##`` WordPiece, ``[CLS] A [SEP] B [SEP]`` template)
and returns it as a ``transformers.PreTrainedTokenizerFast`` that round-trips through
``save_pretrained`` / ``AutoTokenizer.from_pretrained(folder)`` without the Hub. Its vocabulary is
learnt here, as ``tokenizers``' WordPiece trainer learns it, but the same for the same text in every
process (see :func:`learn_wordpiece_vocabulary`).

``language_sampling_probs`` and ``sample_multilingual_corpus`` implement the exponentially
smoothed language sampling of XLM-R (Conneau et al., 2020): q_i = p_i^α / Σ_j p_j^α with
p_i = n_i / Σ_j n_j, which up-samples low-resource languages so that they get a fair share of
the vocabulary.
"""

from __future__ import annotations

import heapq
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import overload

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

__all__ = [
    "learn_wordpiece_vocabulary", "language_sampling_probs", "sample_multilingual_corpus", "train_wordpiece_tokenizer",
]

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


def _read_texts(texts_or_files: Iterable[str] | Sequence[str | os.PathLike]) -> Iterable[str]:
    """The training texts: every line of the files, when ``texts_or_files`` names files, else its items."""
    files = _as_files(texts_or_files)
    if files is None:
        if isinstance(texts_or_files, str):
            raise ValueError("texts_or_files must be a list or iterable of texts or file paths, not one string")
        yield from texts_or_files
        return
    for path in files:
        with open(path, encoding="utf-8") as handle:
            yield from handle


_BERT_WHITESPACE = re.compile("[ \t\n\r]")


def _count_words(tokenizer: Tokenizer, texts: Iterable[str]) -> Counter[str]:
    """How often each word of ``texts`` occurs, as ``tokenizer``'s normalizer and pre-tokenizer make them.

    BERT's normalizer works character by character and its pre-tokenizer splits at whitespace first, so each
    distinct whitespace-separated chunk is normalized and split once, however often it occurs.
    """
    chunks: Counter[str] = Counter()
    for text in texts:
        chunks.update(_BERT_WHITESPACE.split(text))
    words: Counter[str] = Counter()
    for chunk, count in chunks.items():
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(chunk)):
            words[word] += count
    return words


def learn_wordpiece_vocabulary(
    word_counts: Mapping[str, int],
    vocab_size: int,
    special_tokens: Sequence[str],
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    prefix: str = "##",
) -> list[str]:
    """A WordPiece vocabulary learnt from ``word_counts`` (pre-tokenized words and how often they occur).

    What ``tokenizers``' ``WordPieceTrainer`` does: the special tokens, the ``limit_alphabet`` most frequent
    characters (others are dropped) and their ``prefix``-ed continuation forms, then the most frequent pair of
    adjacent pieces merged, again and again, until ``vocab_size`` tokens or no pair seen ``min_frequency`` times.
    That trainer breaks ties between equally frequent pairs by ids it hands out to the continuation pieces in
    hash-map order, which differs from process to process, and with it the vocabulary; here those ids follow the
    alphabet, so the same words give the same vocabulary everywhere.
    """
    characters: Counter[str] = Counter()
    for word, count in word_counts.items():
        for character in word:
            characters[character] += count
    alphabet = set(sorted(characters, key=lambda character: (-characters[character], character))[:limit_alphabet])
    continuing = {character for word in word_counts for character in word[1:] if character in alphabet}
    vocabulary = list(dict.fromkeys([*special_tokens, *sorted(alphabet), *(prefix + c for c in sorted(continuing))]))
    ids = {token: index for index, token in enumerate(vocabulary)}  # pieces are ids from here on, in this order
    words: list[list[int]] = []
    counts: list[int] = []
    for word, count in word_counts.items():
        words.append([ids[character if index == 0 else prefix + character] for index, character in enumerate(word)
                      if character in alphabet])
        counts.append(count)
    pair_counts: Counter[tuple[int, int]] = Counter()
    holders: defaultdict[tuple[int, int], set[int]] = defaultdict(set)  # the words each pair occurs in
    for index, pieces in enumerate(words):
        for pair in zip(pieces, pieces[1:]):
            pair_counts[pair] += counts[index]
            holders[pair].add(index)
    queue = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(queue)
    pieces_learnt = list(vocabulary)
    while len(vocabulary) < vocab_size and queue:
        negative_count, pair = heapq.heappop(queue)
        count = pair_counts.get(pair, 0)
        if count != -negative_count:  # counted down since it was queued: queue it with its count now
            if count > 0:
                heapq.heappush(queue, (-count, pair))
            continue
        if count < max(min_frequency, 1):
            break
        left, right = pair
        token = pieces_learnt[left] + pieces_learnt[right].removeprefix(prefix)
        if token not in ids:
            vocabulary.append(token)
            ids[token] = len(pieces_learnt)
            pieces_learnt.append(token)
        merged = ids[token]
        grown: set[tuple[int, int]] = set()
        for index in holders.pop(pair):
            pieces, count = words[index], counts[index]
            joined, position, end = [], 0, len(pieces) - 1
            while position <= end:
                if position < end and pieces[position] == left and pieces[position + 1] == right:
                    joined.append(merged)
                    position += 2
                else:
                    joined.append(pieces[position])
                    position += 1
            if len(joined) == len(pieces):
                continue
            # Only pairs that hold a merged piece are new; every other pair of the word is there before and after.
            for old in zip(pieces, pieces[1:]):
                pair_counts[old] -= count
            for new in zip(joined, joined[1:]):
                pair_counts[new] += count
                if merged in new:
                    holders[new].add(index)
                    grown.add(new)
            words[index] = joined
        del pair_counts[pair]
        for new in grown:  # a count that grew is queued again, or a smaller one would come out first
            if pair_counts[new] > 0:
                heapq.heappush(queue, (-pair_counts[new], new))
    return vocabulary


def train_wordpiece_tokenizer(
    texts_or_files: Iterable[str] | Sequence[str | os.PathLike],
    vocab_size: int = 30522,
    lowercase: bool = True,
    min_frequency: int = 2,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
    strip_accents: bool | None = None,
    model_max_length: int = 512,
    limit_alphabet: int = 1000,
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

    tokenizer = Tokenizer(models.WordPiece({token: index for index, token in enumerate(special_tokens)}, unk_token=unk))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # No decoder clean-up: decoding is then the exact inverse of pre-tokenization (words joined by
    # single spaces) instead of a heuristic that glues some punctuation back and not other.
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    learnt = learn_wordpiece_vocabulary(
        _count_words(tokenizer, _read_texts(texts_or_files)), vocab_size, special_tokens, min_frequency, limit_alphabet
    )
    # Ids are only labels to WordPiece (it segments by greedy longest match over the token set): number the
    # tokens canonically, special tokens first, so that a seeded model's embeddings follow the tokens.
    ordered = special_tokens + sorted(token for token in learnt if token not in special_tokens)
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
