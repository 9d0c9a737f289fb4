"""Training tokenizers on a corpus: BERT-style WordPiece, and SentencePiece-style Unigram.

``train_wordpiece_tokenizer`` builds the same pipeline as Google's uncased BERT tokenizer
(BERT normalizer, BERT pre-tokenizer, ``##`` WordPiece, ``[CLS] A [SEP] B [SEP]`` template)
and returns it as a ``transformers.PreTrainedTokenizerFast`` that round-trips through
``save_pretrained`` / ``AutoTokenizer.from_pretrained(folder)`` without the Hub. Its vocabulary is
learnt here, as ``tokenizers``' WordPiece trainer learns it, but the same for the same text in every
process (see :func:`learn_wordpiece_vocabulary`).

The sample of several languages a vocabulary is trained on is drawn by
:func:`~mlm_suite.data.pretraining.languages.sample_multilingual_corpus`.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

__all__ = [
    "TOKENIZER_TYPES", "canonical_unigram_pieces", "learn_wordpiece_vocabulary", "train_tokenizer",
    "train_unigram_tokenizer", "train_wordpiece_tokenizer", "word_counts",
]  # fmt: skip

#: The kinds of vocabulary a pretraining run can learn (``--tokenizer_type``).
TOKENIZER_TYPES = ("wordpiece", "unigram")

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


def word_counts(tokenizer: Tokenizer, texts: Iterable[str]) -> Counter[str]:
    """How often each word of ``texts`` occurs, as ``tokenizer``'s normalizer and pre-tokenizer make them.

    BERT's normalizer works character by character and its pre-tokenizer splits at whitespace first, so each
    distinct whitespace-separated chunk is normalized and split once, however often it occurs.
    """
    chunks: Counter[str] = Counter()
    for text in texts:
        chunks.update(_BERT_WHITESPACE.split(text))
    normalize = tokenizer.normalizer.normalize_str if tokenizer.normalizer is not None else str
    split = tokenizer.pre_tokenizer.pre_tokenize_str if tokenizer.pre_tokenizer is not None else (lambda text: [(text, None)])
    words: Counter[str] = Counter()
    for chunk, count in chunks.items():
        for word, _ in split(normalize(chunk)):
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
        word_counts(tokenizer, _read_texts(texts_or_files)), vocab_size, special_tokens, min_frequency, limit_alphabet
    )
    # Ids are only labels to WordPiece (it segments by greedy longest match over the token set): number the
    # tokens canonically, special tokens first, so that a seeded model's embeddings follow the tokens.
    ordered = special_tokens + sorted(token for token in learnt if token not in special_tokens)
    tokenizer.model = models.WordPiece(
        {token: index for index, token in enumerate(ordered)}, unk_token=unk, continuing_subword_prefix="##"
    )
    return _as_pretrained(tokenizer, special_tokens, model_max_length)


def _as_pretrained(tokenizer: Tokenizer, special_tokens: Sequence[str], model_max_length: int) -> PreTrainedTokenizerFast:
    """``tokenizer`` with BERT's ``[CLS] $A [SEP]`` / ``[CLS] $A [SEP] $B:1 [SEP]:1`` template, as a
    ``PreTrainedTokenizerFast`` whose special tokens are ``special_tokens`` (pad, unk, cls, sep, mask, then more)."""
    pad, unk, cls, sep, mask = special_tokens[:5]
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


def train_unigram_tokenizer(
    texts_or_files: Iterable[str] | Sequence[str | os.PathLike],
    vocab_size: int = 8000,
    lowercase: bool = False,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
    model_max_length: int = 512,
    max_piece_length: int = 16,
    character_coverage: float = 0.9995,
) -> PreTrainedTokenizerFast:
    """Train a SentencePiece-style Unigram tokenizer (Kudo, 2018; XLM-R's kind) and wrap it as a
    ``PreTrainedTokenizerFast``.

    The text is NFKC-normalised (and lowercased with ``lowercase``; accents are kept), each word is marked by a leading
    ``▁`` where a space was (``Metaspace``) and punctuation is split off, and the pieces are learnt by the Unigram
    model's EM, so that text without spaces between words (Japanese, Chinese) is cut into pieces learnt from it where a
    whitespace WordPiece would learn whole phrases. A word (for whole-word and span masking) is a run between spaces
    and punctuation. The special tokens, the template and ``texts_or_files`` are as :func:`train_wordpiece_tokenizer`'s.

    As SentencePiece's ``character_coverage``, the rarest characters (those beyond ``character_coverage`` of the text's
    characters, and beyond half the vocabulary) are left out of the training text, so that a text of thousands of
    Chinese characters trains a small vocabulary too; they are unknown to the tokenizer.

    The same text gives the same tokenizer in every process, whatever the trainer's threads do
    (:func:`canonical_unigram_pieces`).
    """
    special_tokens = list(special_tokens)
    if len(special_tokens) < 5 or len(set(special_tokens)) != len(special_tokens):
        raise ValueError(f"special_tokens must be at least 5 distinct tokens (pad, unk, cls, sep, mask), got {special_tokens}")
    if vocab_size <= len(special_tokens):
        raise ValueError(f"vocab_size={vocab_size} must exceed the number of special tokens ({len(special_tokens)})")
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]) if lowercase else normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"), pre_tokenizers.Punctuation(),
    ])  # fmt: skip
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, unk_token=special_tokens[1],
        max_piece_length=max_piece_length, show_progress=False,
    )  # fmt: skip
    texts = list(_read_texts(texts_or_files))
    rare = _rare_characters(texts, tokenizer, character_coverage, (vocab_size - len(special_tokens)) // 2)
    if rare:
        texts = [text.translate(rare) for text in texts]
    tokenizer.train_from_iterator(texts, trainer)
    learnt = json.loads(tokenizer.to_str())["model"]["vocab"]  # [[piece, log-probability], ...]
    pieces = canonical_unigram_pieces([(piece, score) for piece, score in learnt if piece not in special_tokens])
    tokenizer.model = models.Unigram([(token, 0.0) for token in special_tokens] + pieces, unk_id=1, byte_fallback=False)
    return _as_pretrained(tokenizer, special_tokens, model_max_length)


def _rare_characters(texts: Sequence[str], tokenizer: Tokenizer, coverage: float, most: int) -> dict[int, None]:
    """The characters of ``texts`` (normalised) beyond ``coverage`` of their occurrences or the ``most`` frequent, as a
    ``str.translate`` table that deletes them."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(tokenizer.normalizer.normalize_str(text))
    counts.pop(" ", None)
    total, covered, kept = sum(counts.values()), 0, set()
    for character, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if covered >= coverage * total or len(kept) >= most:
            break
        kept.add(character)
        covered += count
    return {ord(character): None for character in counts if character not in kept}


def canonical_unigram_pieces(learnt: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """The pieces ``tokenizers``' Unigram trainer learnt, in an order and with scores that do not depend on its threads:
    the log-probabilities rounded to 1e-9 (the threads sum them in varying order), the characters it adds at the end
    (those below every longer piece, scored in steps of 1e-4 in hash-set order) scored again in character order, and
    the pieces numbered by score, then piece."""
    pieces = [(piece, round(score, 9)) for piece, score in learnt]
    longer = [score for piece, score in pieces if len(piece) > 1]
    floor = min(longer) if longer else float("inf")
    appended = sorted(piece for piece, score in pieces if len(piece) == 1 and score < floor)
    scores = sorted((score for piece, score in pieces if len(piece) == 1 and score < floor), reverse=True)
    rescored = dict(zip(appended, scores))
    pieces = [(piece, rescored.get(piece, score)) if len(piece) == 1 else (piece, score) for piece, score in pieces]
    return sorted(pieces, key=lambda item: (-item[1], item[0]))


def train_tokenizer(
    kind: str, texts: Iterable[str] | Sequence[str | os.PathLike], vocab_size: int, several_languages: bool = False
) -> PreTrainedTokenizerFast:
    """A vocabulary of ``kind`` (:data:`TOKENIZER_TYPES`) trained on ``texts``: BERT's lowercased WordPiece (keeping
    accents when the text is of ``several_languages``, as multilingual BERT does), or a cased Unigram."""
    if kind == "unigram":
        return train_unigram_tokenizer(texts, vocab_size=vocab_size)
    if kind == "wordpiece":
        return train_wordpiece_tokenizer(texts, vocab_size=vocab_size, strip_accents=False if several_languages else None)
    raise ValueError(f"tokenizer kind {kind!r}: choose one of {', '.join(TOKENIZER_TYPES)}")
