"""Several languages in one pretraining run (docs/pretraining.md#several-languages): how much of each a run draws,
and when.

* :func:`language_sampling_probs`: XLM-R's exponentially smoothed sampling (Conneau et al., 2020; Jurafsky &
  Martin, ch. 11, eq. 11.5), q_i = p_i^α / Σ_j p_j^α with p_i = n_i / Σ_j n_j: α = 1 draws each language as often as
  it has rows, α → 0 every language alike, XLM-R's 0.3 up-samples the small ones.
* :func:`sample_multilingual_corpus`: a tokenizer-training sample drawn with those probabilities, so that rare
  languages get pieces of their own.
* :class:`LanguageMix`: the languages of a run, their sampling exponent per phase (mmBERT anneals it, 0.7 → 0.5 → 0.3)
  and the phase from which a language joins (mmBERT adds its low-resource languages only in the last phase).
* :func:`mix_rows`: the training rows of the run, drawn across languages by ``datasets``' own
  ``interleave_datasets`` with each phase's probabilities (small languages repeated as often as their share asks);
  with one phase a set the Trainer shuffles per epoch, with several the rows of each phase in training order.
* :func:`pieces_per_word`: how many pieces a tokenizer cuts a language's words into.

The share of each language in the rows a run actually trained on is counted as it trains
(:mod:`mlm_suite.training.language_shares`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from mlm_suite.errors import UsageError

__all__ = [
    "LanguageMix",
    "MixPhase",
    "MixedRows",
    "language_names",
    "language_sampling_probs",
    "count_words",
    "mix_rows",
    "pieces_per_word",
    "sample_multilingual_corpus",
]


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
            texts[position] = corpus[int(text_index)]  # a datasets Column takes Python ints only (datasets 4.0)
    return texts, [languages[index] for index in drawn_languages]


# ------------------------------------------------------------------------------------------------
# The languages of a run
# ------------------------------------------------------------------------------------------------
def language_names(files: Sequence[str], given: Sequence[str] | None) -> list[str]:
    """The language of each training file: ``given`` (``--languages``, one per file), else each file's stem
    (``de.txt`` → ``de``).

    Raises:
        UsageError: a count that differs from the files', a name given twice (two files for one language), or a name
            that cannot be a metric key.
    """
    names = list(given) if given else [Path(file).stem for file in files]
    if given and len(given) != len(files):
        raise UsageError(f"--languages names {len(given)} language(s) for {len(files)} --train_file(s): give one per file")
    for name in names:
        if not name or not all(character.isalnum() or character in "-_" for character in name):
            raise UsageError(f"language name {name!r}: use letters, digits, - and _ (it names metrics: eval_<name>_...)")
    repeated = sorted(name for name, count in Counter(names).items() if count > 1)
    if repeated:
        files_of = {name: [file for file, named in zip(files, names) if named == name] for name in repeated}
        first = repeated[0]
        raise UsageError(f"two --train_file(s) for the language {first!r} ({', '.join(files_of[first])}): give one file "
                         "per language (join them first), or name them apart with --languages")
    return names


def _check_alpha(value: float, flag: str) -> float:
    if not 0.0 < value <= 1.0:
        raise UsageError(f"{flag} must lie in (0, 1] (1: each language as often as it has rows; XLM-R: 0.3), got {value:g}")
    return float(value)


def _at(text: str, flag: str, spec: str) -> float:
    try:
        at = float(text)
    except ValueError:
        raise UsageError(f"{flag} {spec}: {text!r} is not a fraction of the steps or a step") from None
    if at < 0 or (at >= 1 and not at.is_integer()):
        raise UsageError(f"{flag} {spec}: @{text} is neither a fraction of the steps (below 1) nor a step")
    return at


@dataclass(frozen=True)
class MixPhase:
    """The optimizer steps ``start`` to ``end`` (excluded) of a run, drawing ``languages`` with exponent ``alpha``."""

    start: int
    end: int
    alpha: float
    languages: tuple[str, ...]


@dataclass(frozen=True)
class LanguageMix:
    """How a run draws its languages: ``alphas`` (``(at, α)`` pairs from ``at`` 0: the exponent from each phase on;
    an ``at`` below 1 is a fraction of the steps, of 1 or more a step) and ``joins`` (language → the ``at`` it joins
    from; the others draw from the start)."""

    languages: tuple[str, ...]
    alphas: tuple[tuple[float, float], ...] = ((0.0, 1.0),)
    joins: Mapping[str, float] | None = None

    @classmethod
    def parse(cls, languages: Sequence[str], alpha: float, schedule: str = "constant",
              late_languages: str | None = None) -> LanguageMix:
        """``--language_sampling_alpha``, ``--language_sampling_alpha_schedule`` (``constant``, or phases ``ALPHA[@AT],...``
        as ``--mlm_probability_schedule`` takes them: mmBERT's ``0.7,0.5@0.3,0.3@0.7``) and ``--late_languages``
        (``LANG@AT,...``: ``sw@0.7`` adds sw from 70 % of the steps on).

        Raises:
            UsageError: a malformed schedule, α outside (0, 1], a late language the run does not have, or every
                language late.
        """
        alphas = [(0.0, _check_alpha(alpha, "--language_sampling_alpha"))]
        schedule = (schedule or "constant").strip()
        flag = "--language_sampling_alpha_schedule"
        if schedule != "constant":
            alphas = []
            for index, part in enumerate(item.strip() for item in schedule.split(",")):
                value_text, _, at_text = part.partition("@")
                try:
                    value = float(value_text)
                except ValueError:
                    raise UsageError(f"{flag} {schedule}: give constant, or phases ALPHA[@AT],... such as "
                                     "0.7,0.5@0.3,0.3@0.7 (AT below 1: a fraction of the steps; 1 or more: a step)") from None
                at = _at(at_text, flag, schedule) if at_text else (0.0 if index == 0 else math.nan)
                if math.isnan(at):
                    raise UsageError(f"{flag} {schedule}: every phase after the first starts @AT")
                alphas.append((at, _check_alpha(value, f"{flag} alpha")))
            if alphas[0][0] != 0.0:
                raise UsageError(f"{flag} {schedule}: the first phase starts at step 0 (drop its @)")
            _check_increasing([at for at, _ in alphas[1:]], flag, schedule)
        joins = {}
        for part in (item.strip() for item in (late_languages or "").split(",") if item.strip()):
            name, _, at_text = part.partition("@")
            if name not in languages:
                raise UsageError(f"--late_languages {late_languages}: {name!r} is not one of the run's languages "
                                 f"({', '.join(languages)})")
            if not at_text:
                raise UsageError(f"--late_languages {late_languages}: give the phase {name} joins from, {name}@AT")
            joins[name] = _at(at_text, "--late_languages", late_languages)
            if joins[name] == 0:
                raise UsageError(f"--late_languages {late_languages}: {name}@0 is no late language: drop it")
        if joins and len(joins) == len(languages):
            raise UsageError(f"--late_languages {late_languages}: every language is late; some must start the run")
        ats = [at for at, _ in alphas[1:]] + list(joins.values())
        if any(at < 1 for at in ats) and any(at >= 1 for at in ats):
            raise UsageError("--language_sampling_alpha_schedule and --late_languages: give every @ as a fraction of "
                             "the steps or every one as a step")
        return cls(tuple(languages), tuple(alphas), joins or None)

    @property
    def phased(self) -> bool:
        """Whether the mix changes during the run (an α schedule or late languages): its rows are then read in order."""
        return len(self.alphas) > 1 or bool(self.joins)

    @property
    def final_alpha(self) -> float:
        """The exponent of the last phase, where every language draws: the vocabulary's sample is drawn with it."""
        return self.alphas[-1][1]

    def phases(self, total_steps: int) -> list[MixPhase]:
        """The run's phases over ``total_steps``: a new one wherever α changes or a language joins."""
        def step(at: float) -> int:
            return min(total_steps, int(round(at * total_steps)) if at < 1 else int(at))

        joins = self.joins or {}
        starts = sorted({0, *(step(at) for at, _ in self.alphas[1:]), *(step(at) for at in joins.values())})
        starts = [start for start in starts if start < total_steps]
        phases = []
        for index, start in enumerate(starts):
            end = starts[index + 1] if index + 1 < len(starts) else total_steps
            alpha = [value for at, value in self.alphas if step(at) <= start][-1]
            active = tuple(language for language in self.languages if step(joins.get(language, 0.0)) <= start)
            phases.append(MixPhase(start, end, alpha, active))
        return phases

    def describe(self) -> str:
        """One line for the job's printout and the card."""
        def where(at: float) -> str:
            return f"{at:.0%} of the steps" if at < 1 else f"step {at:.0f}"

        text = "α " + ", ".join(f"{alpha:g}" + ("" if at == 0 else f" from {where(at)}") for at, alpha in self.alphas)
        late = ", ".join(f"{name} from {where(at)}" for name, at in (self.joins or {}).items())
        return f"{len(self.languages)} languages ({', '.join(self.languages)}), {text}" + (f"; joining late: {late}" if late else "")


def _check_increasing(ats: Sequence[float], flag: str, spec: str) -> None:
    if any(later <= earlier for earlier, later in zip([0.0, *ats], ats)):
        raise UsageError(f"{flag} {spec}: the phases must start in increasing order")


# ------------------------------------------------------------------------------------------------
# The rows of a run
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MixedRows:
    """A run's training rows across languages: ``rows`` (one ``datasets.Dataset``; ``example_index`` numbers its rows,
    ``language_id`` is the index in ``languages`` of each row's language) and ``in_order`` (a phased mix is read row
    after row, one phase after the other; else the Trainer shuffles the rows per epoch)."""

    rows: Any
    languages: tuple[str, ...]
    in_order: bool


def _tagged(rows: Any, language_id: int, seed: int) -> Any:
    """``rows`` shuffled (seeded), each tagged with ``language_id``, ready to be interleaved."""
    return rows.add_column("language_id", [language_id] * len(rows)).shuffle(seed=seed)


def _interleaved(tagged: Mapping[str, Any], languages: Sequence[str], alpha: float, seed: int) -> Any:
    from datasets import interleave_datasets

    if len(languages) == 1:
        return tagged[languages[0]]
    q = language_sampling_probs({language: len(tagged[language]) for language in languages}, alpha)
    # "all_exhausted": every language's rows are drawn at least once, the small ones again as often as q asks.
    return interleave_datasets([tagged[language] for language in languages],
                               probabilities=[q[language] for language in languages], seed=seed,
                               stopping_strategy="all_exhausted")


def mix_rows(rows: Mapping[str, Any], mix: LanguageMix, seed: int, total_steps: int | None = None,
             rows_before: Callable[[int], int] | None = None) -> MixedRows:
    """The training rows of a run across ``rows`` (language → its rows, each a ``datasets.Dataset`` with an
    ``example_index`` column), drawn by ``interleave_datasets`` with the probabilities of :func:`language_sampling_probs`.

    One phase (a constant α, every language from the start): every row of every language at least once, small
    languages repeated as their share asks; the Trainer shuffles them per epoch. Several phases: for each, exactly the
    rows its steps train on (``rows_before(step)``: the rows of the steps before ``step``, every process together; the
    phase's mix repeated if it is shorter), drawn from the phase's languages with its α, one phase after the other.
    ``example_index`` numbers the mixed rows, so that a repeated row gets masks of its own.

    Raises:
        UsageError: a language with no rows.
    """
    from datasets import concatenate_datasets

    empty = [language for language in mix.languages if len(rows[language]) == 0]
    if empty:
        raise UsageError(f"the language {empty[0]!r} has no training rows (its documents hold no text, or all were "
                         "held out): give it more text, or leave it out")
    tagged = {language: _tagged(rows[language], index, seed) for index, language in enumerate(mix.languages)}
    if not mix.phased:
        mixed = _interleaved(tagged, mix.languages, mix.alphas[0][1], seed)
    else:
        parts = []
        for index, phase in enumerate(mix.phases(total_steps)):
            count = rows_before(phase.end) - rows_before(phase.start)
            part = _interleaved(tagged, phase.languages, phase.alpha, seed + index)
            if len(part) < count:
                part = concatenate_datasets([part] * -(-count // len(part)))
            parts.append(part.select(range(count)))
        mixed = concatenate_datasets(parts)
    mixed = mixed.flatten_indices().remove_columns("example_index")
    mixed = mixed.add_column("example_index", list(range(len(mixed))))
    return MixedRows(mixed, tuple(mix.languages), in_order=mix.phased)


# A character of a script written without spaces between words (kana, CJK ideographs, hangul syllables): a word of
# its own, as BERT's tokenizer counts Chinese characters, so that pieces per word compare across languages.
_UNSPACED_CHARACTER = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def count_words(text: str) -> int:
    """The words of ``text``: runs between spaces, each character of a script written without spaces counting as one."""
    unspaced = len(_UNSPACED_CHARACTER.findall(text))
    return unspaced + len(_UNSPACED_CHARACTER.sub(" ", text).split())


def pieces_per_word(tokenizer: Any, texts: Sequence[str]) -> float:
    """The pieces ``tokenizer`` cuts the words (:func:`count_words`) of ``texts`` into, on average (special tokens left
    out): 1 for a vocabulary that holds every word, more the worse it serves the language; NaN for no words."""
    words = sum(count_words(text) for text in texts)
    if not words:
        return math.nan
    pieces = sum(len(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"])
    return pieces / words
