"""Honest MLM metrics (``mlm_suite.evaluation.masked_lm``): accuracy per corruption kind on hand-made batches,
the logits preprocessing against a direct computation, and the fill-mask probe."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import EvalPrediction

from mlm_suite import MlmSuiteForMaskedLM
from mlm_suite.evaluation.masked_lm import (
    fill_mask_probe,
    make_mlm_compute_metrics,
    masked_lm_scores,
    preprocess_logits_for_mlm_metrics,
    probe_sentences,
)

MASK, BASELINE = 4, 7
X = -100  # not selected


def hand_made_batch() -> dict[str, np.ndarray]:
    """Two rows: 5 [MASK] positions (2 right, 2 are the baseline token), 2 random (1 right), 3 kept (all right)."""
    inputs = np.array(
        [
            [1, MASK, MASK, 9, 12, MASK, 3, 0],
            [1, 20, MASK, 11, MASK, 13, 3, 0],
        ]
    )
    labels = np.array(
        [
            [X, 7, 8, 9, 5, 7, X, X],  # [MASK]→7, [MASK]→8, kept 9, random 12→5, [MASK]→7
            [X, 21, 30, 11, 31, 13, X, X],  # random 20→21, [MASK]→30, kept 11, [MASK]→31, kept 13
        ]
    )
    predictions = np.array(
        [
            [0, 7, 6, 9, 6, 7, 0, 0],  # [MASK]: right, wrong, right; kept right; random wrong
            [0, 21, 2, 11, 2, 13, 0, 0],  # random right; [MASK] wrong, wrong; kept right, right
        ]
    )
    top_k = np.array(  # at [MASK]: in the top 5 where right, and at row 1's first [MASK]
        [
            [0, 1, 0, 1, 0, 1, 0, 0],
            [0, 1, 1, 1, 0, 1, 0, 0],
        ],
        dtype=bool,
    )
    log_probs = np.where(labels != X, -np.log(2.0), 0.0)
    return dict(inputs=inputs, labels=labels, predictions=predictions, top_k_hits=top_k, label_log_probs=log_probs)


def test_scores_split_by_corruption_kind():
    batch = hand_made_batch()
    scores = masked_lm_scores(
        batch["inputs"], batch["labels"], batch["predictions"], MASK, BASELINE, batch["top_k_hits"], batch["label_log_probs"]
    )
    assert (scores["mask_tokens"], scores["random_tokens"], scores["kept_tokens"]) == (5, 2, 3)
    assert scores["selected_tokens"] == 10
    assert scores["mask_accuracy"] == pytest.approx(2 / 5)
    assert scores["random_accuracy"] == pytest.approx(1 / 2)
    assert scores["kept_accuracy"] == pytest.approx(1.0)
    assert scores["mask_baseline_accuracy"] == pytest.approx(2 / 5)  # the two [MASK]→7
    assert scores["mask_top5_accuracy"] == pytest.approx(3 / 5)
    assert scores["mlm_loss"] == pytest.approx(math.log(2.0))


def test_a_kind_with_no_position_scores_nan():
    batch = hand_made_batch()
    only_masks = np.where(batch["inputs"] == MASK, batch["labels"], X)
    scores = masked_lm_scores(batch["inputs"], only_masks, batch["predictions"], MASK, BASELINE)
    assert scores["random_tokens"] == scores["kept_tokens"] == 0
    assert math.isnan(scores["random_accuracy"]) and math.isnan(scores["kept_accuracy"])
    assert "mask_top5_accuracy" not in scores and "mlm_loss" not in scores


def test_mismatched_shapes_are_an_error():
    batch = hand_made_batch()
    with pytest.raises(ValueError, match="differ in shape"):
        masked_lm_scores(batch["inputs"][:1], batch["labels"], batch["predictions"], MASK, BASELINE)


def test_preprocessing_and_compute_metrics_match_a_direct_computation():
    generator = torch.Generator().manual_seed(0)
    batch = hand_made_batch()
    labels = torch.as_tensor(batch["labels"])
    logits = torch.randn(*labels.shape, 40, generator=generator)
    predictions, top_k_hits, log_probs = preprocess_logits_for_mlm_metrics(logits, labels)

    selected = labels != X
    expected_top = logits.topk(5, dim=-1).indices
    assert torch.equal(predictions[selected], logits.argmax(-1)[selected])
    assert torch.equal(top_k_hits[selected], (expected_top == labels.clamp(min=0)[..., None]).any(-1)[selected])
    expected_log_probs = logits.log_softmax(-1).gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    torch.testing.assert_close(log_probs[selected], expected_log_probs[selected])
    assert (predictions[~selected] == X).all() and (log_probs[~selected] == 0).all()

    compute = make_mlm_compute_metrics(MASK, BASELINE)
    outputs = tuple(tensor.numpy() for tensor in (predictions, top_k_hits, log_probs))
    metrics = compute(EvalPrediction(outputs, batch["labels"], inputs=batch["inputs"]))
    direct = masked_lm_scores(batch["inputs"], batch["labels"], *outputs[:1], MASK, BASELINE, *outputs[1:])
    assert metrics == direct
    assert metrics["mlm_loss"] == pytest.approx(-float(expected_log_probs[selected].mean()))
    with pytest.raises(ValueError, match="include_for_metrics"):
        compute(EvalPrediction(outputs, batch["labels"]))


def test_probe_sentences_mask_one_whole_word(tokenizer):
    texts = [
        "Too short. The film follows a young detective through the rainy streets of the old city at night.",
        "Another review says the acting was wonderful and the music carried every single scene.",
    ]
    probes = probe_sentences(texts, tokenizer, count=5, seed=3)
    assert len(probes) == 2  # one per text, short sentences skipped
    for (sentence, answer), text in zip(probes, texts):
        assert sentence.count(tokenizer.mask_token) == 1
        assert sentence.replace(tokenizer.mask_token, answer) in text
        assert len(tokenizer.tokenize(answer)) == 1 and answer.isalpha()
    assert probe_sentences(texts, tokenizer, count=5, seed=3) == probes  # fixed


def test_fill_mask_probe_returns_the_pipeline_answers(tokenizer, tiny_config):
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(tiny_config(vocab_size=len(tokenizer))).train()
    probes = [("the film was [MASK] good .", "very"), ("a [MASK] movie about music .", "long")]
    results = fill_mask_probe(model, tokenizer, probes, top_k=3)
    assert model.training  # restored
    model.eval()
    for (sentence, answer), result in zip(probes, results):
        encoded = tokenizer(sentence, return_tensors="pt")
        position = int((encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero())
        with torch.inference_mode():
            top = model(**encoded).logits[0, position].topk(3).indices
        assert result["answer"] == answer and result["sentence"] == sentence
        assert result["predictions"] == [tokenizer.decode([int(i)]).strip() for i in top]


def test_no_probe_sentence_is_drawn_when_none_is_asked_for(tokenizer):
    texts = ["the movie was very good and the actors were great in every scene ."] * 5
    assert probe_sentences(texts, tokenizer, 0) == []
    assert len(probe_sentences(texts, tokenizer, 3)) == 3
