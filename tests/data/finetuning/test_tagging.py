"""Tests for tag-scheme validation, conversion and detection, on hand cases and real WNUT-16 tags."""

import pytest

from mlm_suite.data.inputs import downloads
from mlm_suite.data.finetuning.tagging import (
    SCHEMES,
    InvalidTagSequenceError,
    UnknownTagError,
    convert_tags,
    detect_scheme,
    entity_spans,
    normalize_scheme,
    scheme_labels,
    spans_to_tags,
    validate_tags,
)
from mlm_suite.model.crf import allowed_transitions

# Two adjacent PER entities, then a three-token LOC and a one-token ORG right after it.
BIO = ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "I-LOC", "I-LOC", "B-ORG"]
WRITTEN = {
    "BIO": BIO,
    # IOB1 marks B- only where an entity directly follows one of the same type.
    "IOB1": ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-LOC", "I-LOC", "I-ORG"],
    "BIOES": ["B-PER", "E-PER", "S-PER", "O", "B-LOC", "I-LOC", "E-LOC", "S-ORG"],
    # IO cannot separate the two PER entities.
    "IO": ["I-PER", "I-PER", "I-PER", "O", "I-LOC", "I-LOC", "I-LOC", "I-ORG"],
}
SPANS = [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 7), ("ORG", 7, 8)]


@pytest.fixture(scope="module")
def wnut_tags():
    return [tags for _, tags in downloads.read_wnut16()]


def has_adjacent_same_type(tags):
    spans = entity_spans(tags, "BIO")
    return any(a[2] == b[1] and a[0] == b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("target", SCHEMES)
def test_hand_written_sequence_in_every_scheme(target):
    assert convert_tags(BIO, "BIO", target) == WRITTEN[target]
    validate_tags(WRITTEN[target], target)
    if target != "IO":
        assert entity_spans(WRITTEN[target], target) == SPANS
        assert convert_tags(WRITTEN[target], target, "BIO") == BIO


def test_io_merges_adjacent_entities_of_one_type():
    assert entity_spans(WRITTEN["IO"], "IO") == [("PER", 0, 3), ("LOC", 4, 7), ("ORG", 7, 8)]
    assert convert_tags(WRITTEN["IO"], "IO", "BIO") == ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC", "I-LOC", "B-ORG"]


@pytest.mark.parametrize("middle", ["BIOES", "IOB1"])
def test_wnut_round_trips_are_exact(wnut_tags, middle):
    changed = 0
    for index, tags in enumerate(wnut_tags):
        converted = convert_tags(tags, "BIO", middle)
        validate_tags(converted, middle, sentence_index=index)
        assert entity_spans(converted, middle) == entity_spans(tags, "BIO")
        assert convert_tags(converted, middle, "BIO") == tags
        changed += converted != tags
    # Every tweet with an entity is rewritten, so the round trip is not vacuous.
    assert changed == sum(1 for tags in wnut_tags if any(tag != "O" for tag in tags)) > 500


def test_wnut_round_trip_through_io_loses_only_adjacent_same_type_entities(wnut_tags):
    merged_sentences = 0
    for tags in wnut_tags:
        back = convert_tags(convert_tags(tags, "BIO", "IO"), "IO", "BIO")
        if has_adjacent_same_type(tags):
            merged_sentences += 1
            assert len(entity_spans(back, "BIO")) < len(entity_spans(tags, "BIO"))
        else:
            assert back == tags
    assert merged_sentences >= 1


def test_detect_scheme_on_wnut(wnut_tags):
    assert detect_scheme(wnut_tags) == "BIO"
    assert detect_scheme([convert_tags(t, "BIO", "BIOES") for t in wnut_tags]) == "BIOES"
    # WNUT has adjacent same-type entities, so its IOB1 form needs (and shows) B- tags.
    assert detect_scheme([convert_tags(t, "BIO", "IOB1") for t in wnut_tags]) == "IOB1"


@pytest.mark.parametrize(
    ("sequences", "expected"),
    [
        ([["O", "I-PER", "I-PER"], ["I-LOC"]], "IO"),
        ([["O", "O"], []], "BIO"),
        ([], "BIO"),
        ([["B-PER", "I-PER"], ["O", "B-LOC"]], "BIO"),
        ([["I-PER", "B-PER"], ["O", "I-LOC"]], "IOB1"),
        ([["S-PER", "O"], ["B-LOC", "E-LOC"]], "BIOES"),
    ],
)
def test_detect_scheme_hand_cases(sequences, expected):
    assert detect_scheme(sequences) == expected


def test_detect_scheme_refuses_mixtures():
    # An I- opening an entity (not BIO) and a B- after O (not IOB1): no scheme fits.
    with pytest.raises(InvalidTagSequenceError) as error:
        detect_scheme([["O", "I-PER"], ["O", "B-LOC"]])
    message = str(error.value)
    assert "sentence 0, position 1: I-PER after O is not allowed in BIO" in message
    assert "sentence 1, position 1: B-LOC after O is not allowed in IOB1" in message
    with pytest.raises(InvalidTagSequenceError, match="sentence 1, position 0: E-PER after O"):
        detect_scheme([["S-PER"], ["E-PER"]])
    # Entity tags next to a malformed one: an error, not a non-entity ("none") tag set.
    with pytest.raises(UnknownTagError, match="sentence 1, position 0: unknown tag 'PER'.*scheme is 'none'"):
        detect_scheme([["B-LOC"], ["PER"]])


@pytest.mark.parametrize(
    ("tags", "scheme", "message"),
    [
        (["O", "O", "I-PER"], "BIO", "sentence 3, position 2: I-PER after O is not allowed in BIO"),
        (["B-PER", "I-LOC"], "BIO", "sentence 3, position 1: I-LOC after B-PER is not allowed in BIO"),
        (["O", "B-PER"], "IOB1", "sentence 3, position 1: B-PER after O is not allowed in IOB1"),
        (["I-LOC", "B-PER"], "IOB1", "sentence 3, position 1: B-PER after I-LOC is not allowed in IOB1"),
        (["I-PER"], "BIOES", "sentence 3, position 0: I-PER after O is not allowed in BIOES"),
        (["B-PER", "O"], "BIOES", "sentence 3, position 1: O after B-PER is not allowed in BIOES"),
        (["B-PER", "E-LOC"], "BIOES", "sentence 3, position 1: E-LOC after B-PER is not allowed in BIOES"),
        (["E-PER", "B-PER"], "BIOES", "sentence 3, position 0: E-PER after O is not allowed in BIOES"),
        (["O", "B-PER", "I-PER"], "BIOES", "sentence 3, position 2: the sequence ends inside an entity"),
        (["O", "E-PER"], "BIO", r"sentence 3, position 1: E-PER is not a BIO tag \(allowed prefixes: B, I, O\)"),
        (["B-PER"], "IO", "sentence 3, position 0: B-PER is not a IO tag"),
    ],
)
def test_validate_tags_names_sentence_position_and_transition(tags, scheme, message):
    with pytest.raises(InvalidTagSequenceError, match=message):
        validate_tags(tags, scheme, sentence_index=3)


def test_validate_tags_without_sentence_index_and_valid_sequences():
    with pytest.raises(InvalidTagSequenceError, match=r"^position 1: I-PER after O"):
        validate_tags(["O", "I-PER"], "BIO")
    # E-B, S-S and S-B are all fine in BIOES; B-B of one type is fine in BIO and IOB1.
    validate_tags(["B-PER", "E-PER", "B-PER", "E-PER", "S-PER", "S-PER", "S-LOC", "B-LOC", "I-LOC", "E-LOC"], "BIOES")
    validate_tags(["B-PER", "B-PER", "I-PER"], "BIO")
    validate_tags(["I-PER", "B-PER", "B-PER"], "IOB1")


@pytest.mark.parametrize("tag", ["X-PER", "PER", "B-", "b-PER", "BPER", ""])
def test_unknown_tags_are_named(tag):
    with pytest.raises(UnknownTagError, match=f"position 1: unknown tag {tag!r}"):
        validate_tags(["O", tag], "BIO")
    with pytest.raises(UnknownTagError, match=f"unknown tag {tag!r}"):
        convert_tags(["O", tag], "BIO", "BIOES")


def test_hyphenated_types_survive():
    tags = ["B-geo-loc", "I-geo-loc", "O", "B-other"]
    assert entity_spans(tags, "BIO") == [("geo-loc", 0, 2), ("other", 3, 4)]
    assert convert_tags(tags, "BIO", "BIOES") == ["B-geo-loc", "E-geo-loc", "O", "S-other"]


def test_scheme_names_and_aliases():
    assert [normalize_scheme(name) for name in ("iob2", "Bio", "IOBES", "bioes", "iob1", "io")] == [
        "BIO", "BIO", "BIOES", "BIOES", "IOB1", "IO",
    ]
    with pytest.raises(ValueError, match="ambiguous"):
        normalize_scheme("IOB")
    with pytest.raises(ValueError, match="unknown tag scheme 'BILOU'"):
        convert_tags(["O"], "BIO", "BILOU")


def test_lenient_spans_read_broken_sequences_like_conlleval():
    broken = ["O", "I-PER", "I-LOC", "I-LOC", "B-PER"]
    with pytest.raises(InvalidTagSequenceError):
        entity_spans(broken, "BIO")
    # I- after O starts an entity, a type switch starts another.
    assert entity_spans(broken, "BIO", lenient=True) == [("PER", 1, 2), ("LOC", 2, 4), ("PER", 4, 5)]
    with pytest.raises(InvalidTagSequenceError, match="S-PER is not a BIO tag"):
        entity_spans(["S-PER"], "BIO", lenient=True)


def test_spans_to_tags_rejects_overlaps():
    with pytest.raises(ValueError, match="overlaps"):
        spans_to_tags([("PER", 0, 2), ("LOC", 1, 3)], 4)
    with pytest.raises(ValueError, match="outside"):
        spans_to_tags([("PER", 2, 5)], 4)


@pytest.mark.parametrize("name", ["IO", "BIO", "IOB2", "IOB1", "BIOES", "IOBES", "bio", "iobes", "Iob2", " BIOES "])
def test_every_scheme_name_data_accepts_constrains_the_crf_as_validation_does(name):
    """The CRF of a model fine-tuned on a scheme accepts its name, and its constraints allow exactly the
    starts, transitions and ends that validate_tags allows (every one- and two-tag sequence)."""
    scheme = normalize_scheme(name)
    labels = scheme_labels([(list("abcd"), convert_tags(["B-PER", "I-PER", "O", "B-LOC"], "BIO", scheme))], scheme)
    allowed, start, end = allowed_transitions(dict(enumerate(labels)), name)

    def valid(tags):
        try:
            validate_tags(tags, scheme)
        except InvalidTagSequenceError:
            return False
        return True

    for i, first in enumerate(labels):
        assert valid([first]) == bool(start[i] and end[i]), first
        for j, second in enumerate(labels):
            assert valid([first, second]) == bool(start[i] and allowed[i, j] and end[j]), (first, second)
