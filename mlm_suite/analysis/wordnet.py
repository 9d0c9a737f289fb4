"""A WordNet 3.0 sense inventory and a sense-labelled word-sense-disambiguation dataset built from the example
sentences of its glosses: an example that contains one of its synset's lemmas (or a regular inflection of it) is
an instance of that lemma in that sense. Sense names follow NLTK's ``lemma.pos.NN`` (``bank.n.01``: the first,
most frequent, noun sense); your own instances are JSON lines (:func:`read_jsonl`). See docs/analysis.md.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from mlm_suite.analysis.embeddings import (
    ContextualEmbedder,
    SenseCentroidClassifier,
    Standardizer,
    accuracy,
    most_frequent_sense_baseline,
)
from mlm_suite.data.inputs import downloads
from mlm_suite.data.inputs.readers import read_json_lines
from mlm_suite.data.words import split_words
from mlm_suite.errors import InputIndexError

POS_NAMES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
# In data files adjective satellites have type "s"; index.adj lists them under "a".
_SS_TYPE_TO_POS = {"n": "n", "v": "v", "a": "a", "s": "a", "r": "r"}
# Adjective lemmas may carry a syntactic marker: (a) attributive, (p) predicative, (ip) postnominal.
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")
_EXAMPLE = re.compile(r'"([^"]+)"')
_SIMPLE_LEMMA = re.compile(r"^[a-z]+$")
_VOWELS = set("aeiou")


@dataclass(frozen=True)
class Synset:
    """One WordNet synset: ``offset`` in ``data.<pos>``, lemmas (lower-cased, ``_`` for spaces),
    the definition and the example sentences of its gloss."""

    offset: int
    pos: str
    lemmas: tuple[str, ...]
    definition: str
    examples: tuple[str, ...]


@dataclass(frozen=True)
class WSDInstance:
    """One sense-labelled word instance: ``tokens[target_index]`` is an occurrence of ``lemma`` in ``sense``."""

    tokens: tuple[str, ...]
    target_index: int
    lemma: str
    sense: str

    def __post_init__(self) -> None:
        if not 0 <= self.target_index < len(self.tokens):
            raise IndexError(
                f"target index {self.target_index} is outside the sentence, which has {len(self.tokens)} tokens: "
                f"{' '.join(self.tokens)!r}"
            )


class WordNet:
    """The synsets and sense order of WordNet 3.0 for the given parts of speech.

    Args:
        pos: parts of speech to load (``"n"``, ``"v"``, ``"a"``, ``"r"``).
        reader: ``filename -> text`` of a WordNet database file; default: the WordNet 3.0 copy
            of :func:`mlm_suite.data.inputs.downloads.wordnet_file` (``data.noun`` comes as two halves there).
    """

    def __init__(self, pos: Iterable[str] = ("n", "v"), reader=None) -> None:
        self.pos = tuple(pos)
        for tag in self.pos:
            if tag not in POS_NAMES:
                raise ValueError(f"unknown part of speech {tag!r}; expected some of {sorted(POS_NAMES)}")
        read = reader or _read_packaged_file
        self.synsets: dict[tuple[str, int], Synset] = {}
        self._sense_offsets: dict[tuple[str, str], list[int]] = {}
        for tag in self.pos:
            for line in read(f"data.{POS_NAMES[tag]}").splitlines():
                synset = parse_data_line(line)
                if synset is not None:
                    self.synsets[(synset.pos, synset.offset)] = synset
            for line in read(f"index.{POS_NAMES[tag]}").splitlines():
                entry = parse_index_line(line)
                if entry is not None:
                    lemma, offsets = entry
                    self._sense_offsets[(lemma, tag)] = offsets

    def senses(self, lemma: str, pos: str) -> list[Synset]:
        """The synsets of ``lemma`` as ``pos``, in WordNet sense order (most frequent first)."""
        return [self.synsets[(pos, offset)] for offset in self._sense_offsets.get((lemma.lower(), pos), [])]

    def sense_name(self, lemma: str, pos: str, offset: int) -> str:
        """``lemma.pos.NN``, with ``NN`` the position of synset ``offset`` among the lemma's senses."""
        offsets = self._sense_offsets.get((lemma, pos), [])
        if offset not in offsets:
            raise KeyError(f"synset {offset:08d}-{pos} is not a sense of {lemma!r} in index.{POS_NAMES[pos]}")
        return f"{lemma}.{pos}.{offsets.index(offset) + 1:02d}"


def _read_packaged_file(name: str) -> str:
    if name == "data.noun":
        # The packaged noun data is split in two; the first half does not end with a newline.
        return downloads.wordnet_file("data.noun1").rstrip("\n") + "\n" + downloads.wordnet_file("data.noun2")
    return downloads.wordnet_file(name)


def parse_data_line(line: str) -> Synset | None:
    """Parse one ``data.<pos>`` line; ``None`` for the licence header (lines starting with spaces)."""
    if not line or line.startswith(" "):
        return None
    head, _, gloss = line.partition(" | ")
    fields = head.split()
    offset, ss_type, word_count = int(fields[0]), fields[2], int(fields[3], 16)
    lemmas = tuple(_ADJ_MARKER.sub("", fields[4 + 2 * i]).lower() for i in range(word_count))
    gloss = gloss.strip()
    examples = tuple(example.strip() for example in _EXAMPLE.findall(gloss))
    # The definition is what precedes the first quoted example.
    definition = gloss.split('"', 1)[0].strip().rstrip(";").strip()
    return Synset(offset=offset, pos=_SS_TYPE_TO_POS[ss_type], lemmas=lemmas, definition=definition, examples=examples)


def parse_index_line(line: str) -> tuple[str, list[int]] | None:
    """Parse one ``index.<pos>`` line into ``(lemma, synset offsets in sense order)``."""
    if not line or line.startswith(" "):
        return None
    fields = line.split()
    lemma, synset_count, pointer_count = fields[0], int(fields[2]), int(fields[3])
    # lemma pos synset_cnt p_cnt [ptr_symbol x p_cnt] sense_cnt tagsense_cnt offsets...
    offsets_start = 4 + pointer_count + 2
    return lemma, [int(offset) for offset in fields[offsets_start : offsets_start + synset_count]]


def inflections(lemma: str) -> set[str]:
    """Regular inflections of ``lemma``: itself, +s, +es, +d, +ed, +ing, y→ies/ied after a consonant,
    e-drop before -ing, and final-consonant doubling before -ed/-ing (stop → stopped)."""
    forms = {lemma, lemma + "s", lemma + "es", lemma + "d", lemma + "ed", lemma + "ing"}
    if len(lemma) > 1 and lemma.endswith("y") and lemma[-2] not in _VOWELS:
        forms |= {lemma[:-1] + "ies", lemma[:-1] + "ied"}
    if len(lemma) > 2 and lemma.endswith("e"):
        forms.add(lemma[:-1] + "ing")
    if len(lemma) > 2 and lemma[-1] not in _VOWELS | {"w", "x", "y"} and lemma[-2] in _VOWELS and lemma[-3] not in _VOWELS:
        forms |= {lemma + lemma[-1] + "ed", lemma + lemma[-1] + "ing"}
    return forms


def tokenize(text: str) -> list[str]:
    """Words and punctuation marks of ``text``, as BERT pre-splits them (:func:`mlm_suite.data.words.split_words`)."""
    return [word for word, _, _ in split_words(text)]


def find_target(tokens: Sequence[str], lemma: str) -> int | None:
    """Index of the first token that is ``lemma`` or a regular inflection of it (case-insensitive)."""
    forms = inflections(lemma)
    for index, token in enumerate(tokens):
        if token.lower() in forms:
            return index
    return None


def build_wsd_instances(wordnet: WordNet, min_senses: int = 2) -> list[WSDInstance]:
    """Sense-labelled instances from the example sentences of ``wordnet``'s synsets.

    Only single-word alphabetic lemmas whose examples cover at least ``min_senses`` of their
    senses are kept (a lemma with one labelled sense is no disambiguation problem). The
    lemma is the word key: senses of different parts of speech compete (``play.n.01`` vs
    ``play.v.01``). Instances come sorted by lemma, sense, then example order.
    """
    by_lemma: dict[str, list[WSDInstance]] = defaultdict(list)
    for synset in wordnet.synsets.values():
        for lemma in synset.lemmas:
            if not _SIMPLE_LEMMA.match(lemma):
                continue
            for example in synset.examples:
                tokens = tokenize(example)
                target = find_target(tokens, lemma)
                if target is None:
                    continue
                sense = wordnet.sense_name(lemma, synset.pos, synset.offset)
                by_lemma[lemma].append(WSDInstance(tuple(tokens), target, lemma, sense))
    instances = []
    for lemma in sorted(by_lemma):
        group = by_lemma[lemma]
        if len({instance.sense for instance in group}) >= min_senses:
            instances.extend(sorted(group, key=lambda instance: instance.sense))
    return instances


@dataclass
class WSDSplit:
    """A train/test split; ``dropped_test`` counts test instances removed because their sense
    had no training instance."""

    train: list[WSDInstance]
    test: list[WSDInstance]
    dropped_test: int


def split_instances(instances: Sequence[WSDInstance], test_fraction: float = 0.3, seed: int = 0) -> WSDSplit:
    """Deterministic train/test split, stratified by ``(lemma, sense)``.

    Each sense's instances are shuffled with a generator seeded by ``seed`` and the sense name
    (so the split of one sense does not depend on which other lemmas are present) and
    ``round(test_fraction * n)`` of them, at most ``n - 1``, go to test: every test sense keeps
    at least one training instance, and single-instance senses stay in train.
    """
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    groups: dict[tuple[str, str], list[WSDInstance]] = defaultdict(list)
    for instance in instances:
        groups[(instance.lemma, instance.sense)].append(instance)
    train, test = [], []
    for (lemma, sense), group in groups.items():
        rng = random.Random(seed * 1_000_003 + zlib.crc32(f"{lemma}\t{sense}".encode()))
        # Sorting first makes the split independent of the input order.
        shuffled = sorted(group, key=lambda instance: (instance.tokens, instance.target_index))
        rng.shuffle(shuffled)
        n_test = min(round(test_fraction * len(shuffled)), len(shuffled) - 1)
        test.extend(shuffled[:n_test])
        train.extend(shuffled[n_test:])
    return drop_unseen_test_senses(train, test)


def drop_unseen_test_senses(train: Sequence[WSDInstance], test: Sequence[WSDInstance]) -> WSDSplit:
    """Remove test instances whose ``(lemma, sense)`` has no training instance, and count them."""
    seen = {(instance.lemma, instance.sense) for instance in train}
    kept = [instance for instance in test if (instance.lemma, instance.sense) in seen]
    return WSDSplit(train=list(train), test=kept, dropped_test=len(test) - len(kept))


@lru_cache(maxsize=4)
def wordnet_wsd_dataset(pos: tuple[str, ...] = ("n", "v"), test_fraction: float = 0.3, seed: int = 0) -> WSDSplit:
    """The default WSD dataset: :func:`build_wsd_instances` on WordNet 3.0, split by :func:`split_instances`."""
    return split_instances(build_wsd_instances(WordNet(pos)), test_fraction=test_fraction, seed=seed)


def limit_lemmas(split: WSDSplit, max_lemmas: int) -> WSDSplit:
    """Keep, in both halves of ``split``, the first ``max_lemmas`` lemmas (alphabetically) that
    have test instances (the others cannot be evaluated)."""
    keep = set(sorted({instance.lemma for instance in split.test})[:max_lemmas])
    return WSDSplit(
        train=[instance for instance in split.train if instance.lemma in keep],
        test=[instance for instance in split.test if instance.lemma in keep],
        dropped_test=split.dropped_test,
    )


# ---------------------------------------------------------------------- JSON lines


def read_jsonl(path: str | Path) -> list[WSDInstance]:
    """Read instances ``{"tokens": [...], "target": int, "sense": str, "lemma": str (optional)}``.

    Without ``lemma``, the lower-cased target token is the word key.
    """
    instances = []
    for line_number, record in read_json_lines(path):
        where = f"{path} line {line_number}"
        missing = [key for key in ("tokens", "target", "sense") if key not in record]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}")
        tokens, target = record["tokens"], record["target"]
        if not isinstance(tokens, list) or not all(isinstance(token, str) for token in tokens):
            raise ValueError(f"{where}: 'tokens' must be a list of strings")
        if not isinstance(target, int) or isinstance(target, bool):
            raise ValueError(f"{where}: 'target' must be an integer, got {target!r}")
        if not 0 <= target < len(tokens):
            raise InputIndexError(f"{where}: target index {target} is outside the sentence, which has {len(tokens)} tokens")
        if record["sense"] is None or not str(record["sense"]).strip():
            raise ValueError(f"{where}: no 'sense' (got {record['sense']!r})")
        lemma = record.get("lemma") or tokens[target].lower()
        instances.append(WSDInstance(tuple(tokens), target, lemma, str(record["sense"])))
    if not instances:
        raise ValueError(f"{path}: no instances")
    return instances


def write_jsonl(instances: Iterable[WSDInstance], path: str | Path) -> None:
    """Write instances in the format :func:`read_jsonl` reads (``lemma`` included)."""
    with open(path, "w", encoding="utf-8") as handle:
        for instance in instances:
            record = {"tokens": list(instance.tokens), "target": instance.target_index, "sense": instance.sense, "lemma": instance.lemma}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------- evaluation


def evaluate_wsd(
    embedder: ContextualEmbedder,
    train: Sequence[WSDInstance],
    test: Sequence[WSDInstance],
    standardize: bool = False,
    standardizer_path: str | Path | None = None,
) -> dict[str, float | int]:
    """Train a :class:`SenseCentroidClassifier` on ``train`` and score it and the most-frequent-sense
    baseline on ``test``.

    Test instances whose ``(lemma, sense)`` has no training instance cannot be predicted: they
    are dropped and counted in ``dropped_test``. Training instances of lemmas absent from the
    test data cannot change any score, so they are not embedded (``n_train`` counts the rest).
    With ``standardize`` a second classifier is scored on z-scored vectors (the
    :class:`Standardizer` is fitted on the training vectors and saved to ``standardizer_path``
    when given).

    Returns:
        ``accuracy``, ``baseline_accuracy``, ``standardized_accuracy`` (with ``standardize``),
        ``n_train``, ``n_test``, ``dropped_test``, ``n_lemmas`` and ``n_senses`` (of the evaluated lemmas).
    """
    evaluated = {instance.lemma for instance in test}
    split = drop_unseen_test_senses([instance for instance in train if instance.lemma in evaluated], test)
    if not split.train or not split.test:
        raise ValueError(
            f"need training and test instances; got {len(split.train)} train and {len(split.test)} test "
            f"({split.dropped_test} test instances dropped: their sense has no training instance)"
        )
    train_vectors = embedder.embed_targets([i.tokens for i in split.train], [i.target_index for i in split.train])
    test_vectors = embedder.embed_targets([i.tokens for i in split.test], [i.target_index for i in split.test])
    train_lemmas, train_senses = [i.lemma for i in split.train], [i.sense for i in split.train]
    test_lemmas, test_senses = [i.lemma for i in split.test], [i.sense for i in split.test]

    classifier = SenseCentroidClassifier().fit(train_lemmas, train_vectors, train_senses)
    baseline = most_frequent_sense_baseline(train_lemmas, train_senses, test_lemmas)
    results: dict[str, float | int] = {
        "accuracy": classifier.score(test_lemmas, test_vectors, test_senses),
        "baseline_accuracy": accuracy(baseline, test_senses),
    }
    if standardize:
        standardizer = Standardizer()
        standardized = SenseCentroidClassifier(standardizer).fit(train_lemmas, train_vectors, train_senses)
        results["standardized_accuracy"] = standardized.score(test_lemmas, test_vectors, test_senses)
        if standardizer_path is not None:
            standardizer.save(standardizer_path)
    results.update(
        n_train=len(split.train),
        n_test=len(split.test),
        dropped_test=split.dropped_test,
        n_lemmas=len(set(train_lemmas)),
        n_senses=len(set(zip(train_lemmas, train_senses))),
    )
    return results
