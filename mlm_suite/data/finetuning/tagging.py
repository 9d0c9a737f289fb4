"""Entity tag schemes: validation, conversion and detection.

Four schemes are supported (names are case-insensitive; aliases in brackets):

* ``"IO"``: ``I-X`` inside an entity of type X, ``O`` outside. Lossy: two adjacent
  entities of the same type cannot be told apart, so converting *to* IO merges them.
* ``"BIO"`` (``"IOB2"``): every entity starts with ``B-X``; ``I-X`` continues it.
* ``"IOB1"``: ``I-X`` starts an entity after ``O`` or after another type; ``B-X`` is used
  only for an entity that directly follows an entity of the same type (CoNLL-2003's
  original encoding, Ramshaw & Marcus 1995).
* ``"BIOES"`` (``"IOBES"``): ``S-X`` single-token entity; ``B-X (I-X)* E-X`` otherwise.

A tag is ``"O"`` or ``PREFIX-TYPE`` where the prefix is one of B, I, E, S (upper case) and
the type is non-empty; the type may itself contain hyphens (``"B-geo-loc"``).

``"IOB"`` alone is refused as ambiguous: the literature uses it for both IOB1 and IOB2.

``"none"`` (:data:`NO_SCHEME`) names tag sets that are not entity schemes, e.g. Penn-Treebank
part-of-speech tags (``NN``, ``PRP$``, ``,``): every non-empty tag is valid in any order, there are
no entities, and such data are scored token by token (:func:`mlm_suite.evaluation.entities.tag_scores`).
It is accepted by :func:`validate_tags` and returned by :func:`detect_scheme`, but not by the
entity functions (:func:`entity_spans`, :func:`convert_tags` to or from an entity scheme).

Errors name where a bad tag is: ``"sentence 3, position 5: ..."`` (both 0-based) by default, or
whatever a *locator* says, e.g. ``"data/train.txt line 57: ..."`` for a file read with its line
numbers (:func:`line_locator`).

For a data set read from several files or splits, :func:`settle_scheme` validates or detects the scheme of
all of them together and converts the tags if asked, :func:`scheme_labels` lists the complete tag set of a
scheme and :func:`check_tags_in` checks the data against a given label list.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mlm_suite.model.crf import ALLOWED_PREFIXES, SCHEME_ALIASES, transition_allowed

#: The canonical scheme names.
SCHEMES: tuple[str, ...] = tuple(ALLOWED_PREFIXES)

#: The scheme name of tag sets without entity structure (POS tags and the like).
NO_SCHEME = "none"

#: An entity as ``(type, start, end)`` over token positions, ``end`` exclusive.
Span = tuple[str, int, int]

#: Where a tag is, for error messages: ``(sentence index, position) -> "train.txt line 57"``.
Locator = Callable[[int, int], str]


class UnknownTagError(ValueError):
    """A tag that is not ``O`` and not ``PREFIX-TYPE`` with a known prefix."""


class InvalidTagSequenceError(ValueError):
    """A tag sequence that breaks the rules of its scheme."""


def normalize_scheme(scheme: str, allow_none: bool = False) -> str:
    """Canonical name (``"IO"``, ``"BIO"``, ``"IOB1"`` or ``"BIOES"``) of a scheme name or alias.

    With ``allow_none``, ``"none"`` (any case) is accepted too and returned as :data:`NO_SCHEME`;
    without it, it is an error that says why (the caller needs entities).
    """
    key = str(scheme).strip().upper()
    if key == "IOB":
        raise ValueError('scheme "IOB" is ambiguous: say "IOB1" (CoNLL-2003 style) or "IOB2"/"BIO"')
    if key == NO_SCHEME.upper():
        if allow_none:
            return NO_SCHEME
        raise ValueError(
            f"scheme {scheme!r} (tags that are not an entity scheme, e.g. POS) has no entities; "
            f"this needs one of {', '.join(SCHEMES)}"
        )
    if key not in SCHEME_ALIASES:
        expected = ", ".join(sorted(SCHEME_ALIASES)) + (f", {NO_SCHEME}" if allow_none else "")
        raise ValueError(f"unknown tag scheme {scheme!r}; expected one of {expected}")
    return SCHEME_ALIASES[key]


def parse_tag(tag: str) -> tuple[str, str | None]:
    """Split a tag into ``(prefix, type)``; ``"O"`` gives ``("O", None)``.

    Raises:
        UnknownTagError: the tag is not ``O`` and not ``B-/I-/E-/S-`` followed by a type.
    """
    if tag == "O":
        return "O", None
    if not isinstance(tag, str) or len(tag) < 3 or tag[1] != "-" or tag[0] not in "BIES":
        raise UnknownTagError(f"unknown tag {tag!r}: expected 'O' or B-/I-/E-/S- followed by an entity type")
    return tag[0], tag[2:]


def _where(sentence_index: int | None, position: int, locate: Locator | None = None) -> str:
    if locate is not None:
        return locate(sentence_index if sentence_index is not None else 0, position)
    prefix = f"sentence {sentence_index}, " if sentence_index is not None else ""
    return f"{prefix}position {position}"


def line_locator(source: str, lines: Sequence[Sequence[int]]) -> Locator:
    """A locator naming ``source`` and the 1-based line of a tag: ``"train.txt line 57"``.

    ``lines[i][j]`` is the line of token ``j`` of sentence ``i``. When tokens share a line (a
    sentence per line, as in JSON lines), the 1-based token number is added: ``"x.jsonl line 2, token 3"``.
    """

    def locate(sentence_index: int, position: int) -> str:
        sentence_lines = lines[sentence_index]
        if not sentence_lines:
            return f"{source}, sentence {sentence_index + 1}"
        position = min(position, len(sentence_lines) - 1)
        where = f"{source} line {sentence_lines[position]}"
        if len(set(sentence_lines)) < len(sentence_lines):
            where += f", token {position + 1}"
        return where

    return locate


def validate_tags(
    tags: Sequence[str], scheme: str, sentence_index: int | None = None, locate: Locator | None = None
) -> None:
    """Check that ``tags`` is a well-formed sequence of ``scheme``.

    Args:
        tags: one tag per token.
        scheme: scheme name or alias, or ``"none"`` (any non-empty tag string is valid).
        sentence_index: included in the error message when given, to find the culprit in a corpus.
        locate: names the place of a bad tag instead, from ``(sentence_index, position)``; e.g.
            :func:`line_locator` gives ``"train.txt line 57"``.

    Raises:
        UnknownTagError: a tag is malformed (the message names it and its position).
        InvalidTagSequenceError: a tag uses a prefix the scheme lacks, or a transition the scheme
            forbids, e.g. ``"sentence 3, position 5: I-PER after O is not allowed in BIO"``.
    """
    scheme = normalize_scheme(scheme, allow_none=True)
    if scheme == NO_SCHEME:
        for position, tag in enumerate(tags):
            if not isinstance(tag, str) or not tag.strip():
                raise UnknownTagError(f"{_where(sentence_index, position, locate)}: empty or non-text tag {tag!r}")
        return
    previous = "O"
    previous_prefix, previous_type = "O", None
    for position, tag in enumerate(tags):
        try:
            prefix, type_ = parse_tag(tag)
        except UnknownTagError as error:
            raise UnknownTagError(f"{_where(sentence_index, position, locate)}: {error}") from None
        where = _where(sentence_index, position, locate)
        if prefix != "O" and prefix not in ALLOWED_PREFIXES[scheme]:
            allowed = ", ".join(sorted(ALLOWED_PREFIXES[scheme] | {"O"}))
            raise InvalidTagSequenceError(f"{where}: {tag} is not a {scheme} tag (allowed prefixes: {allowed})")
        if not transition_allowed(scheme, (previous_prefix, previous_type), (prefix, type_)):
            raise InvalidTagSequenceError(f"{where}: {tag} after {previous} is not allowed in {scheme}")
        previous, previous_prefix, previous_type = tag, prefix, type_
    if not transition_allowed(scheme, (previous_prefix, previous_type), ("O", None)):
        raise InvalidTagSequenceError(
            f"{_where(sentence_index, len(tags) - 1, locate)}: the sequence ends inside an entity "
            f"({previous} is not closed by E-{previous_type}), which is not allowed in {scheme}"
        )


def entity_spans(tags: Sequence[str], scheme: str = "BIO", lenient: bool = False) -> list[Span]:
    """Entities of a tag sequence as ``(type, start, end)`` with ``end`` exclusive.

    Args:
        tags: one tag per token.
        scheme: scheme the tags are written in.
        lenient: when False the sequence is validated first (invalid sequences raise). When True,
            malformed transitions are read the way conlleval.pl does (an ``I-X`` after ``O`` or after
            another type starts an entity, a type switch ends one), which is what model predictions
            need; only the prefixes are checked against the scheme.
    """
    scheme = normalize_scheme(scheme)
    if lenient:
        for position, tag in enumerate(tags):
            prefix, _ = parse_tag(tag)
            if prefix != "O" and prefix not in ALLOWED_PREFIXES[scheme]:
                raise InvalidTagSequenceError(f"position {position}: {tag} is not a {scheme} tag")
        from seqeval.metrics.sequence_labeling import get_entities  # with scikit-learn, ~2 s: only where it reads

        return [(type_, start, end + 1) for type_, start, end in get_entities(list(tags))]
    validate_tags(tags, scheme)
    spans: list[Span] = []
    start = 0
    previous_prefix, previous_type = "O", None
    for position, tag in enumerate(tags):
        prefix, type_ = parse_tag(tag)
        continues = previous_prefix in "BI" and type_ == previous_type and (
            prefix in "IE" if scheme == "BIOES" else prefix == "I"
        )
        if previous_prefix != "O" and not continues:
            spans.append((previous_type, start, position))
        if prefix != "O" and not continues:
            start = position
        if scheme == "BIOES" and prefix in "ES":
            # E-/S- close their entity themselves, so the next tag always starts afresh.
            spans.append((type_, start, position + 1))
            prefix, type_ = "O", None
        previous_prefix, previous_type = prefix, type_
    if previous_prefix != "O":
        spans.append((previous_type, start, len(tags)))
    return spans


def spans_to_tags(spans: Iterable[Span], length: int, scheme: str = "BIO") -> list[str]:
    """Write non-overlapping entity spans as a tag sequence of ``length`` tokens in ``scheme``."""
    scheme = normalize_scheme(scheme)
    tags = ["O"] * length
    previous_end, previous_type = -1, None
    for type_, start, end in sorted(spans, key=lambda span: span[1]):
        if not 0 <= start < end <= length or start < previous_end:
            raise ValueError(f"span ({type_!r}, {start}, {end}) overlaps another or lies outside 0..{length}")
        tags[start:end] = [f"I-{type_}"] * (end - start)
        if scheme == "BIO":
            tags[start] = f"B-{type_}"
        elif scheme == "IOB1" and start == previous_end and type_ == previous_type:
            tags[start] = f"B-{type_}"
        elif scheme == "BIOES":
            if end - start == 1:
                tags[start] = f"S-{type_}"
            else:
                tags[start], tags[end - 1] = f"B-{type_}", f"E-{type_}"
        previous_end, previous_type = end, type_
    return tags


def convert_tags(tags: Sequence[str], source: str, target: str) -> list[str]:
    """Rewrite one tag sequence from scheme ``source`` into scheme ``target``.

    The input is validated against ``source`` first: an invalid sequence has no single meaning.
    Conversions between BIO, IOB1 and BIOES are exact and invertible. Converting to IO is
    lossy: adjacent entities of the same type merge into one (``B-X B-X`` → ``I-X I-X``),
    so IO → BIO gives them back as a single entity.

    ``"none"`` → ``"none"`` returns the tags unchanged; between ``"none"`` and an entity scheme
    there is no conversion (a ValueError).
    """
    source = normalize_scheme(source, allow_none=True)
    target = normalize_scheme(target, allow_none=True)
    if NO_SCHEME in (source, target):
        if source == target:
            return list(tags)
        raise ValueError(f"cannot convert {source} tags to {target}: 'none' tags are not an entity scheme")
    return spans_to_tags(entity_spans(tags, source), len(tags), target)


def detect_scheme(sequences: Iterable[Sequence[str]], locate: Locator | None = None) -> str:
    """The scheme the tag sequences are written in, decided from the prefixes and transitions used.

    Rules, applied to all sequences together:

    * no tag with an entity prefix (``B-``/``I-``/``E-``/``S-``) but some tag other than ``O``
      → ``"none"``: a tag set that is not an entity scheme, e.g. Penn-Treebank POS tags;
    * entity tags mixed with tags that are neither ``O`` nor ``PREFIX-TYPE`` → an error (a
      malformed tag in an entity file is not taken for a POS tag set);
    * any ``E-``/``S-`` prefix → ``"BIOES"`` (every sequence must then be valid BIOES);
    * only ``I-`` (and ``O``) → ``"IO"``. IOB1 data that never needs a ``B-`` looks the same and
      decodes to the same entities, so nothing is lost by calling it IO;
    * ``B-`` and ``I-``: ``"BIO"`` if every sequence is valid BIO, else ``"IOB1"`` if every one is
      valid IOB1. A corpus with an ``I-`` opening an entity and a ``B-`` after ``O`` is neither;
    * only ``O`` tags (or no sequences) → ``"BIO"``, the conventional default: every scheme
      is consistent with such data.

    Args:
        sequences: tag sequences, one per sentence.
        locate: names the place of a bad tag from ``(sentence index, position)`` in error
            messages (e.g. :func:`line_locator`); default ``"sentence i, position j"`` (0-based).

    Raises:
        UnknownTagError: entity tags mixed with malformed ones (the first malformed one is named,
            with its place), or an empty tag.
        InvalidTagSequenceError: no supported scheme accepts all sequences; the message gives
            the first violation of each candidate scheme.
    """
    sequences = [list(sequence) for sequence in sequences]
    prefixes: set[str] = set()
    first_unknown: UnknownTagError | None = None
    for index, sequence in enumerate(sequences):
        for position, tag in enumerate(sequence):
            if not isinstance(tag, str) or not tag.strip():
                raise UnknownTagError(f"{_where(index, position, locate)}: empty or non-text tag {tag!r}")
            try:
                prefixes.add(parse_tag(tag)[0])
            except UnknownTagError as error:
                if first_unknown is None:
                    first_unknown = UnknownTagError(f"{_where(index, position, locate)}: {error}")
    entity_prefixes = prefixes - {"O"}
    if first_unknown is not None:
        if not entity_prefixes:
            return NO_SCHEME
        raise UnknownTagError(
            f"{first_unknown} (the other tags are entity tags; if these are not, the scheme is {NO_SCHEME!r})"
        )
    if prefixes & {"E", "S"}:
        candidates = ["BIOES"]
    elif "B" in prefixes:
        candidates = ["BIO", "IOB1"]
    elif "I" in prefixes:
        return "IO"
    else:
        return "BIO"
    problems = []
    for scheme in candidates:
        try:
            for index, sequence in enumerate(sequences):
                validate_tags(sequence, scheme, sentence_index=index, locate=locate)
        except InvalidTagSequenceError as error:
            problems.append(str(error))
            continue
        return scheme
    raise InvalidTagSequenceError("no tag scheme fits all sequences: " + "; ".join(problems))


# --------------------------------------------------------------------------------------------
# Tagged corpora: settling the scheme of a data set and its label set (``mlm-suite finetune-ner``)
# --------------------------------------------------------------------------------------------
def _across(sources: Mapping[str, Any]) -> Locator:
    """A locator over the sentences of all ``sources`` numbered one after the other, in order."""
    ordered = list(sources.values())
    starts = []
    total = 0
    for source in ordered:
        starts.append(total)
        total += len(source.sentences)

    def locate(index: int, position: int) -> str:
        which = bisect.bisect_right(starts, index) - 1
        return ordered[which].where(index - starts[which], position)

    return locate


def settle_scheme(sources: dict[str, Any], given: str | None, convert_to: str | None) -> tuple[str, str]:
    """Validate (or detect) the scheme of every sequence and convert if asked; return ``(read, final)`` schemes.

    ``sources`` map a role to the sentences of one file or split as read (a ``NamedTuple`` with ``name``,
    ``sentences`` (``(tokens, tags)`` pairs) and ``where(index, position)``, the place of a tag in words);
    converted sentences replace them (``_replace``). ``given`` and ``convert_to`` are ``--tagging_scheme`` and
    ``--convert_to``, which the errors name. Errors name the file and line (CoNLL and JSON-lines files) or the
    source and the 0-based sentence and position (Hub splits, built-in data).
    """
    if given is not None:
        scheme = normalize_scheme(given, allow_none=True)
        for source in sources.values():
            for index, (_, tags) in enumerate(source.sentences):
                try:
                    validate_tags(tags, scheme, sentence_index=index, locate=source.where)
                except ValueError as error:
                    raise type(error)(f"{error} (--tagging_scheme {scheme})") from None
    else:
        try:
            scheme = detect_scheme(
                (tags for source in sources.values() for _, tags in source.sentences), locate=_across(sources)
            )
        except ValueError as error:
            names = ", ".join(source.name for source in sources.values())
            raise type(error)(
                f"could not detect the tagging scheme of {names}: {error}. Check the data or give --tagging_scheme"
            ) from None
    target = normalize_scheme(convert_to, allow_none=True) if convert_to else scheme
    if target != scheme:
        if NO_SCHEME in (scheme, target):
            raise ValueError(
                f"--convert_to {convert_to}: the tags are {scheme}; tags without entity scheme ('none') cannot be "
                "converted to or from an entity scheme"
            )
        for role, source in sources.items():
            converted = [(tokens, convert_tags(tags, scheme, target)) for tokens, tags in source.sentences]
            sources[role] = source._replace(sentences=converted)
    return scheme, target


def scheme_labels(sentences: Sequence[tuple[Sequence[str], Sequence[str]]], scheme: str) -> list[str]:
    """``O`` and, for every entity type in the data, every tag the scheme has for it (B before I, E, S).

    Listing the complete tag set (not only the tags seen) keeps the CRF constraints and the
    ``all_b_to_i`` strategy well defined, e.g. when a type only ever occurs as a one-word entity.
    For scheme ``none`` the labels are the tags seen, sorted.
    """
    if scheme == NO_SCHEME:
        return sorted({tag for _, tags in sentences for tag in tags})
    types = sorted({parse_tag(tag)[1] for _, tags in sentences for tag in tags if tag != "O"})
    prefixes = [prefix for prefix in "BIES" if prefix in ALLOWED_PREFIXES[scheme]]
    return ["O"] + [f"{prefix}-{type_}" for type_ in types for prefix in prefixes]


def check_tags_in(labels: Sequence[str], sources: Mapping[str, Any]) -> None:
    """Every tag of the data must be a label; the error names file and line (or sentence and position).

    ``sources`` as for :func:`settle_scheme`.
    """
    known = set(labels)
    for source in sources.values():
        for index, (_, tags) in enumerate(source.sentences):
            for position, tag in enumerate(tags):
                if tag not in known:
                    raise ValueError(
                        f"{source.where(index, position)}: tag {tag!r} is not in the label list {list(labels)}"
                    )
