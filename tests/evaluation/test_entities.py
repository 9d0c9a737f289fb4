"""Tests for entity scoring: hand-counted conlleval cases, a re-implementation of conlleval.pl's
chunk counting on random sequences, the Trainer compute_metrics and the paired bootstrap."""

import random

import numpy as np
import pytest
from transformers import EvalPrediction

from mlm_suite.data.inputs import downloads
from mlm_suite.evaluation.entities import entity_counts, entity_scores, make_compute_metrics, paired_bootstrap, tag_scores
from mlm_suite.data.finetuning.tagging import UnknownTagError, convert_tags


def f1(tp, predicted, gold):
    return 2 * tp / (predicted + gold) if predicted + gold else 0.0


def assert_scores(scores, tp, predicted, gold):
    """Micro precision, recall and F1 from hand-counted true positives, predicted and gold entities."""
    assert scores["precision"] == pytest.approx(tp / predicted if predicted else 0.0)
    assert scores["recall"] == pytest.approx(tp / gold if gold else 0.0)
    assert scores["f1"] == pytest.approx(f1(tp, predicted, gold))


def test_i_after_o():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["I-PER", "I-PER", "O", "I-LOC"]]
    # conlleval: an I- after O (or at the start) opens a chunk, so pred has PER[0,1] and LOC[3]:
    # 2 predicted, 2 gold, both correct.
    assert_scores(entity_scores(gold, pred), tp=2, predicted=2, gold=2)
    # strict BIO: only B- opens an entity, so pred has none: 0 predicted, 2 gold.
    assert_scores(entity_scores(gold, pred, mode="strict"), tp=0, predicted=0, gold=2)
    # Token accuracy: positions 1 and 2 agree, 0 and 3 differ.
    assert entity_scores(gold, pred)["accuracy"] == pytest.approx(2 / 4)


def test_type_switch_inside_a_span():
    gold = [["B-LOC", "I-LOC", "I-LOC", "O"], ["B-ORG", "I-ORG", "O"]]
    pred = [["B-LOC", "I-ORG", "I-LOC", "O"], ["B-ORG", "I-ORG", "O"]]
    # conlleval, sentence 0: the switch LOC→ORG closes LOC[0] and opens ORG[1]; ORG→LOC closes it
    # and opens LOC[2]: 3 predicted chunks, none equal to gold LOC[0-2]. Sentence 1: ORG[0-1] is
    # right. Total: tp 1, predicted 4, gold 2.
    assert_scores(entity_scores(gold, pred), tp=1, predicted=4, gold=2)
    # strict BIO: B-LOC alone is LOC[0]; the two I- tags open nothing. Total: tp 1, predicted 2.
    assert_scores(entity_scores(gold, pred, mode="strict"), tp=1, predicted=2, gold=2)


def test_b_b_adjacency():
    gold = [["B-PER", "B-PER", "O"], ["B-LOC", "O"]]
    pred = [["B-PER", "I-PER", "O"], ["B-LOC", "O"]]
    # Gold has two one-token PERs, pred one two-token PER: no match. LOC matches.
    # tp 1, predicted 2, gold 3 → P 1/2, R 1/3, F1 2/5, in both modes.
    for mode in ("conlleval", "strict"):
        scores = entity_scores(gold, pred, mode=mode)
        assert_scores(scores, tp=1, predicted=2, gold=3)
        assert scores["f1"] == pytest.approx(0.4)
        assert scores["per_type"]["PER"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2}
        assert scores["per_type"]["LOC"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
        assert scores["macro_f1"] == pytest.approx(0.5)


def test_bioes_e_b_and_unclosed_entities():
    gold = [["B-PER", "E-PER", "B-PER", "E-PER", "S-LOC"]]
    pred = [["B-PER", "E-PER", "B-PER", "I-PER", "S-LOC"]]
    # conlleval: E- closes PER[0-1] so the next B- opens PER[2..]; I- continues it and S- closes it:
    # PER[0-1], PER[2-3], LOC[4], all right: tp 3, predicted 3, gold 3.
    assert_scores(entity_scores(gold, pred, scheme="BIOES"), tp=3, predicted=3, gold=3)
    # strict BIOES: B-PER I-PER never reaches an E-PER, so it is no entity: tp 2, predicted 2.
    assert_scores(entity_scores(gold, pred, scheme="BIOES", mode="strict"), tp=2, predicted=2, gold=3)


def test_iob1_counts_b_as_a_boundary():
    gold = [["I-PER", "I-PER", "B-PER", "O"]]
    pred = [["I-PER", "I-PER", "I-PER", "O"]]
    # Gold: PER[0-1] and PER[2] (B- separates them); pred: one PER[0-2]. tp 0, predicted 1, gold 2.
    for mode in ("conlleval", "strict"):
        assert_scores(entity_scores(gold, pred, scheme="IOB1", mode=mode), tp=0, predicted=1, gold=2)


def test_per_type_and_macro_f1():
    gold = [["B-PER", "O", "B-LOC", "O", "B-LOC"], ["B-ORG", "I-ORG"]]
    pred = [["B-PER", "O", "B-LOC", "O", "O"], ["B-PER", "I-PER"]]
    # PER: 1 gold, 2 predicted, 1 right → P 1/2, R 1, F1 2/3.
    # LOC: 2 gold, 1 predicted, 1 right → P 1, R 1/2, F1 2/3. ORG: 1 gold, 0 predicted → 0.
    # Micro: tp 2, predicted 3, gold 4. Macro F1: (2/3 + 2/3 + 0) / 3.
    scores = entity_scores(gold, pred)
    assert_scores(scores, tp=2, predicted=3, gold=4)
    assert scores["per_type"]["PER"] == pytest.approx({"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1})
    assert scores["per_type"]["LOC"] == pytest.approx({"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2})
    assert scores["per_type"]["ORG"] == pytest.approx({"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1})
    assert scores["macro_f1"] == pytest.approx(4 / 9)
    # Tokens: 4 of 5 agree in sentence 0 (the last LOC is missed), 0 of 2 in sentence 1.
    assert scores["accuracy"] == pytest.approx(4 / 7)


def test_no_entities_at_all_scores_zero_without_warnings(recwarn):
    scores = entity_scores([["O", "O"]], [["O", "O"]])
    assert (scores["f1"], scores["macro_f1"], scores["per_type"], scores["accuracy"]) == (0.0, 0.0, {}, 1.0)
    assert not recwarn.list


def test_errors():
    with pytest.raises(ValueError, match="strict.*needs a tag scheme"):
        entity_scores([["O"]], [["O"]], scheme=None, mode="strict")
    with pytest.raises(ValueError, match="unknown mode 'lenient'"):
        entity_scores([["O"]], [["O"]], mode="lenient")
    with pytest.raises(ValueError, match="gold has 2 sentences but pred has 1"):
        entity_scores([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="sentence 1: gold has 2 tags but pred has 3"):
        entity_scores([["O"], ["O", "O"]], [["O"], ["O", "O", "O"]])
    with pytest.raises(ValueError, match="pred sentence 0, position 1: E-PER is not a BIO tag"):
        entity_scores([["O", "O"]], [["O", "E-PER"]])
    with pytest.raises(UnknownTagError, match="gold sentence 0, position 0: unknown tag 'PER'"):
        entity_scores([["PER"]], [["O"]])
    # Without a scheme, conlleval mode reads any prefix.
    assert entity_scores([["S-PER"]], [["S-PER"]], scheme=None)["f1"] == 1.0


# --- conlleval.pl, re-implemented from its startOfChunk / endOfChunk and counting loop (BIO tags).


def _split(tag):
    return ("O", "") if tag == "O" else (tag[0], tag[2:])


def _end_of_chunk(prev_tag, tag, prev_type, type_):
    return (
        (prev_tag in "BI" and tag in "BO")
        or (prev_tag != "O" and prev_type != type_)
    )


def _start_of_chunk(prev_tag, tag, prev_type, type_):
    return tag == "B" or (prev_tag == "O" and tag == "I") or (tag != "O" and prev_type != type_)


def conlleval_counts(gold, pred):
    """(correct chunks, guessed chunks, gold chunks) counted token by token as conlleval.pl does."""
    correct = found_guessed = found_correct = 0
    in_correct = False
    last_g, last_g_type, last_p, last_p_type = "O", "", "O", ""
    # A sentence boundary is read as an O token, which closes every open chunk.
    stream = [pair for g, p in zip(gold, pred) for pair in [*zip(g, p), ("O", "O")]]
    for gold_tag, pred_tag in stream:
        g, g_type = _split(gold_tag)
        p, p_type = _split(pred_tag)
        if in_correct:
            gold_ends = _end_of_chunk(last_g, g, last_g_type, g_type)
            pred_ends = _end_of_chunk(last_p, p, last_p_type, p_type)
            if gold_ends and pred_ends and last_g_type == last_p_type:
                in_correct = False
                correct += 1
            elif gold_ends != pred_ends or g_type != p_type:
                in_correct = False
        gold_starts = _start_of_chunk(last_g, g, last_g_type, g_type)
        pred_starts = _start_of_chunk(last_p, p, last_p_type, p_type)
        if gold_starts and pred_starts and g_type == p_type:
            in_correct = True
        found_correct += gold_starts
        found_guessed += pred_starts
        last_g, last_g_type, last_p, last_p_type = g, g_type, p, p_type
    return correct + in_correct, found_guessed, found_correct


def random_sequences(rng, n, tags):
    return [[rng.choice(tags) for _ in range(rng.randint(0, 8))] for _ in range(n)]


def test_conlleval_mode_matches_conlleval_pl_counting_on_random_sequences():
    rng = random.Random(0)
    tags = ["O", "O", "B-A", "I-A", "B-B", "I-B", "I-C"]
    for _ in range(200):
        gold = random_sequences(rng, 6, tags)
        pred = [[rng.choice(tags) if rng.random() < 0.4 else tag for tag in sentence] for sentence in gold]
        tp, predicted, found = conlleval_counts(gold, pred)
        assert tuple(entity_counts(gold, pred).sum(axis=0)) == (tp, predicted, found)
        assert_scores(entity_scores(gold, pred), tp, predicted, found)


def test_conlleval_reimplementation_is_not_trivially_lenient():
    # Sanity check of the reference itself: one guessed chunk that overlaps but ends late is wrong.
    assert conlleval_counts([["B-A", "O"]], [["B-A", "I-A"]]) == (0, 1, 1)
    assert conlleval_counts([["B-A", "I-A", "B-A"]], [["I-A", "I-A", "B-A"]]) == (2, 2, 2)


# --- Trainer compute_metrics.

ID2LABEL = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


def test_compute_metrics_drops_ignored_positions():
    # Two rows; -100 marks special tokens, continuation pieces and padding.
    label_ids = np.array([[-100, 1, -100, 2, 0, -100], [-100, 3, 0, -100, -100, -100]])
    predicted = np.array([[4, 1, 3, 2, 0, 0], [0, 3, 1, 0, 0, 0]])
    logits = np.eye(5)[predicted] * 3.0
    # Word level: gold [B-PER I-PER O], [B-LOC O]; pred [B-PER I-PER O], [B-LOC B-PER].
    gold_tags = [["B-PER", "I-PER", "O"], ["B-LOC", "O"]]
    pred_tags = [["B-PER", "I-PER", "O"], ["B-LOC", "B-PER"]]
    expected = entity_scores(gold_tags, pred_tags)
    assert_scores(expected, tp=2, predicted=3, gold=2)
    compute = make_compute_metrics(ID2LABEL)
    for eval_pred in (
        EvalPrediction(predictions=logits, label_ids=label_ids),
        EvalPrediction(predictions=(logits, np.zeros(3)), label_ids=label_ids),
        (predicted, label_ids),
    ):
        result = compute(eval_pred)
        assert set(result) == {"precision", "recall", "f1", "accuracy", "macro_f1"}
        assert all(type(value) is float for value in result.values())
        assert result == pytest.approx({key: expected[key] for key in result})
    assert compute((predicted, label_ids))["accuracy"] == pytest.approx(4 / 5)


def test_compute_metrics_strict_mode_and_errors():
    label_ids = np.array([[-100, 1, 2, 0]])
    predicted = np.array([[0, 2, 2, 0]])
    # conlleval reads I-PER I-PER as PER[0-1] (right); strict BIO finds no entity.
    assert make_compute_metrics(ID2LABEL)((predicted, label_ids))["f1"] == 1.0
    assert make_compute_metrics(ID2LABEL, mode="strict")((predicted, label_ids))["f1"] == 0.0
    with pytest.raises(ValueError, match="needs a tag scheme"):
        make_compute_metrics(ID2LABEL, scheme=None, mode="strict")
    with pytest.raises(ValueError, match="row 0: label id 7 is not in id2label"):
        make_compute_metrics(ID2LABEL)((np.array([[0, 7, 0, 0]]), label_ids))
    with pytest.raises(ValueError, match="shape"):
        make_compute_metrics(ID2LABEL)((np.zeros((1, 3)), label_ids))


# --- Paired bootstrap.


@pytest.fixture(scope="module")
def wnut_gold():
    return [tags for _, tags in downloads.read_wnut16()]


def drop_entities(sequences, fraction, seed):
    """A worse system: each gold entity is forgotten (tagged O) with probability ``fraction``."""
    rng = random.Random(seed)
    out = []
    for tags in sequences:
        tags = convert_tags(tags, "BIO", "BIOES")
        kept, dropping = [], False
        for tag in tags:
            if tag[0] in "BS":
                dropping = rng.random() < fraction
            kept.append("O" if tag != "O" and dropping else tag)
        out.append(convert_tags(kept, "BIOES", "BIO"))
    return out


def test_bootstrap_identical_systems(wnut_gold):
    pred = drop_entities(wnut_gold, 0.3, seed=1)
    result = paired_bootstrap(wnut_gold, pred, pred, n_samples=200)
    assert result["delta"] == 0.0
    assert result["p_value"] == 1.0
    assert result["n_samples"] == 200


def test_bootstrap_clearly_better_system(wnut_gold):
    good = drop_entities(wnut_gold, 0.1, seed=1)
    bad = drop_entities(wnut_gold, 0.5, seed=2)
    result = paired_bootstrap(wnut_gold, good, bad, n_samples=1000, seed=3)
    expected_delta = entity_scores(wnut_gold, good)["f1"] - entity_scores(wnut_gold, bad)["f1"]
    assert result["delta"] == pytest.approx(expected_delta)
    assert result["delta"] > 0.2
    assert result["p_value"] < 0.01
    # The other direction has no support at all.
    assert paired_bootstrap(wnut_gold, bad, good, n_samples=200)["p_value"] == 1.0
    assert paired_bootstrap(wnut_gold, good, bad, n_samples=1000, seed=3) == result


def test_bootstrap_counts_equal_rescoring_each_sample(wnut_gold):
    """Resampled counts give the same δ as re-running seqeval on each resampled test set."""
    gold = wnut_gold[:150]
    a = drop_entities(gold, 0.2, seed=4)
    b = drop_entities(gold, 0.3, seed=5)
    n_samples, seed = 15, 7
    result = paired_bootstrap(gold, a, b, n_samples=n_samples, seed=seed)
    # Same draws as the implementation: sentence multiplicities from one multinomial per sample.
    draws = np.random.default_rng(seed).multinomial(len(gold), np.full(len(gold), 1 / len(gold)), size=n_samples)
    counts_a = entity_counts(gold, a)
    deltas = []
    for draw in draws:
        chosen = [i for i, count in enumerate(draw) for _ in range(count)]
        f1_a = entity_scores([gold[i] for i in chosen], [a[i] for i in chosen])["f1"]
        f1_b = entity_scores([gold[i] for i in chosen], [b[i] for i in chosen])["f1"]
        # The per-sentence counts, weighted by the draw, give seqeval's F1 on the resampled set.
        assert f1(*(draw @ counts_a)) == pytest.approx(f1_a)
        deltas.append(f1_a - f1_b)
    assert len(set(np.round(deltas, 9))) > 1
    assert result["p_value"] == pytest.approx(np.mean(np.array(deltas) >= 2 * result["delta"] - 1e-12))


def test_bootstrap_errors():
    with pytest.raises(ValueError, match="n_samples must be positive"):
        paired_bootstrap([["O"]], [["O"]], [["O"]], n_samples=0)
    with pytest.raises(ValueError, match="pred_a has 1 sentences but pred_b has 2"):
        paired_bootstrap([["O"]], [["O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match="at least one sentence"):
        paired_bootstrap([], [], [])


def test_tag_scores_equal_scikit_learn():
    """tag_scores counts by hand (faster on string tags); its values are scikit-learn's, also for a tag never
    predicted and a tag only predicted."""
    from sklearn.metrics import precision_recall_fscore_support

    rng = random.Random(0)
    tags = ["NN", "VB", "DT", "PRP$", ",", "RARE"]
    gold = [[rng.choice(tags[:-1]) for _ in range(rng.randint(1, 20))] for _ in range(200)]
    pred = [[tag if rng.random() < 0.7 else rng.choice(tags) for tag in sentence] for sentence in gold]
    gold[0][0], pred[0][0] = "GOLD_ONLY", "NN"  # a tag never predicted
    scores = tag_scores(gold, pred)
    flat_gold, flat_pred = [t for s in gold for t in s], [t for s in pred for t in s]
    labels = sorted(set(flat_gold) | set(flat_pred))
    assert list(scores["per_tag"]) == labels and {"RARE", "GOLD_ONLY"} <= set(labels)
    precision, recall, f1, support = precision_recall_fscore_support(
        flat_gold, flat_pred, labels=labels, average=None, zero_division=0
    )
    for index, tag in enumerate(labels):
        row = scores["per_tag"][tag]
        assert (row["precision"], row["recall"], row["f1"], row["support"]) == pytest.approx(
            (precision[index], recall[index], f1[index], support[index]), abs=1e-15
        )
    macro = precision_recall_fscore_support(flat_gold, flat_pred, labels=labels, average="macro", zero_division=0)
    assert (scores["macro_precision"], scores["macro_recall"], scores["macro_f1"]) == pytest.approx(macro[:3], abs=1e-15)
    assert scores["micro_f1"] == scores["accuracy"] == pytest.approx(np.mean(np.array(flat_gold) == np.array(flat_pred)))
