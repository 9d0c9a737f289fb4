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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from seqeval.metrics.sequence_labeling import get_entities

SCHEMES: tuple[str, ...] = ("IO", "BIO", "IOB1", "BIOES")

_ALIASES = {"IO": "IO", "BIO": "BIO", "IOB2": "BIO", "IOB1": "IOB1", "BIOES": "BIOES", "IOBES": "BIOES"}

#: Prefixes each scheme may use (besides the bare ``O`` tag).
ALLOWED_PREFIXES: dict[str, frozenset[str]] = {
    "IO": frozenset("I"),
    "BIO": frozenset("BI"),
    "IOB1": frozenset("BI"),
    "BIOES": frozenset("BIES"),
}

#: An entity as ``(type, start, end)`` over token positions, ``end`` exclusive.
Span = tuple[str, int, int]


class UnknownTagError(ValueError):
    """A tag that is not ``O`` and not ``PREFIX-TYPE`` with a known prefix."""


class InvalidTagSequenceError(ValueError):
    """A tag sequence that breaks the rules of its scheme."""


def normalize_scheme(scheme: str) -> str:
    """Canonical name (``"IO"``, ``"BIO"``, ``"IOB1"`` or ``"BIOES"``) of a scheme name or alias."""
    key = str(scheme).strip().upper()
    if key == "IOB":
        raise ValueError('scheme "IOB" is ambiguous: say "IOB1" (CoNLL-2003 style) or "IOB2"/"BIO"')
    if key not in _ALIASES:
        raise ValueError(f"unknown tag scheme {scheme!r}; expected one of {', '.join(sorted(_ALIASES))}")
    return _ALIASES[key]


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


def _where(sentence_index: int | None, position: int) -> str:
    prefix = f"sentence {sentence_index}, " if sentence_index is not None else ""
    return f"{prefix}position {position}"


def validate_tags(tags: Sequence[str], scheme: str, sentence_index: int | None = None) -> None:
    """Check that ``tags`` is a well-formed sequence of ``scheme``.

    Args:
        tags: one tag per token.
        scheme: scheme name or alias.
        sentence_index: included in the error message when given, to find the culprit in a corpus.

    Raises:
        UnknownTagError: a tag is malformed (the message names it and its position).
        InvalidTagSequenceError: a tag uses a prefix the scheme lacks, or a transition the scheme
            forbids, e.g. ``"sentence 3, position 5: I-PER after O is not allowed in BIO"``.
    """
    scheme = normalize_scheme(scheme)
    previous = "O"
    previous_prefix, previous_type = "O", None
    for position, tag in enumerate(tags):
        try:
            prefix, type_ = parse_tag(tag)
        except UnknownTagError as error:
            raise UnknownTagError(f"{_where(sentence_index, position)}: {error}") from None
        where = _where(sentence_index, position)
        if prefix != "O" and prefix not in ALLOWED_PREFIXES[scheme]:
            allowed = ", ".join(sorted(ALLOWED_PREFIXES[scheme] | {"O"}))
            raise InvalidTagSequenceError(f"{where}: {tag} is not a {scheme} tag (allowed prefixes: {allowed})")
        same_entity_before = previous_prefix != "O" and previous_type == type_
        if scheme == "BIO":
            allowed_here = prefix != "I" or (previous_prefix in "BI" and same_entity_before)
        elif scheme == "IOB1":
            # B- only separates two adjacent entities of one type.
            allowed_here = prefix != "B" or same_entity_before
        elif scheme == "BIOES":
            inside = previous_prefix in "BI"
            if inside:
                allowed_here = prefix in "IE" and type_ == previous_type
            else:
                allowed_here = prefix in "OBS"
        else:
            allowed_here = True
        if not allowed_here:
            raise InvalidTagSequenceError(f"{where}: {tag} after {previous} is not allowed in {scheme}")
        previous, previous_prefix, previous_type = tag, prefix, type_
    if scheme == "BIOES" and previous_prefix in "BI":
        raise InvalidTagSequenceError(
            f"{_where(sentence_index, len(tags) - 1)}: the sequence ends inside an entity "
            f"({previous} is not closed by E-{previous_type}), which is not allowed in BIOES"
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
    """
    return spans_to_tags(entity_spans(tags, source), len(tags), target)


def detect_scheme(sequences: Iterable[Sequence[str]]) -> str:
    """The scheme the tag sequences are written in, decided from the prefixes and transitions used.

    Rules, applied to all sequences together:

    * any ``E-``/``S-`` prefix → ``"BIOES"`` (every sequence must then be valid BIOES);
    * only ``I-`` (and ``O``) → ``"IO"``. IOB1 data that never needs a ``B-`` looks the same and
      decodes to the same entities, so nothing is lost by calling it IO;
    * ``B-`` and ``I-``: ``"BIO"`` if every sequence is valid BIO, else ``"IOB1"`` if every one is
      valid IOB1. A corpus with an ``I-`` opening an entity and a ``B-`` after ``O`` is neither;
    * no entity tags at all (or no sequences) → ``"BIO"``, the conventional default: every scheme
      is consistent with such data.

    Raises:
        UnknownTagError: a malformed tag (named, with its sentence and position).
        InvalidTagSequenceError: no supported scheme accepts all sequences; the message gives
            the first violation of each candidate scheme.
    """
    sequences = [list(sequence) for sequence in sequences]
    prefixes: set[str] = set()
    for index, sequence in enumerate(sequences):
        for position, tag in enumerate(sequence):
            try:
                prefixes.add(parse_tag(tag)[0])
            except UnknownTagError as error:
                raise UnknownTagError(f"{_where(index, position)}: {error}") from None
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
                validate_tags(sequence, scheme, sentence_index=index)
        except InvalidTagSequenceError as error:
            problems.append(str(error))
            continue
        return scheme
    raise InvalidTagSequenceError("no tag scheme fits all sequences: " + "; ".join(problems))
