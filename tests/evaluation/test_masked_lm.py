"""Honest MLM metrics (``mlm_suite.evaluation.masked_lm``): accuracy per corruption kind on hand-made batches,
the logits preprocessing against a direct computation, and the fill-mask probe, with WordPiece (BERT), byte-level
BPE (RoBERTa) and SentencePiece (XLM-RoBERTa) tokenizers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import EvalPrediction

from mlm_suite import MlmSuiteForMaskedLM
from mlm_suite.data.inputs import downloads
from mlm_suite.evaluation.masked_lm import (
    fill_mask_probe,
    make_mlm_compute_metrics,
    masked_lm_scores,
    preprocess_logits_for_mlm_metrics,
    probe_sentences,
    readable_token,
)
from tests.helpers import roberta_tokenizer, xlm_roberta_tokenizer

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
        assert result["predictions"] == [readable_token(tokenizer, int(i)) for i in top]


def test_a_probe_without_the_mask_token_is_refused_naming_it(tokenizer, tiny_config):
    model = MlmSuiteForMaskedLM(tiny_config(vocab_size=len(tokenizer)))
    with pytest.raises(ValueError, match=r"^probe 'the film was <mask> good \.': no \[MASK\] standing for a word 'very'$"):
        fill_mask_probe(model, tokenizer, [("the film was <mask> good .", "very")])


def test_no_probe_sentence_is_drawn_when_none_is_asked_for(tokenizer):
    texts = ["the movie was very good and the actors were great in every scene ."] * 5
    assert probe_sentences(texts, tokenizer, 0) == []
    assert len(probe_sentences(texts, tokenizer, 3)) == 3


# --------------------------------------------------------------------------------------------
# The probe with the tokenizers of the families mlm_suite converts
# --------------------------------------------------------------------------------------------
#: Tokenizer kind -> the mask token its probe sentences write.
MASK_TOKENS = {"bert": "[MASK]", "roberta": "<mask>", "xlm-roberta": "<mask>"}
#: The vocabulary's own markers, which no prediction shows: byte-level BPE's word start and line break,
#: SentencePiece's word start.
MARKERS = ("Ġ", "Ċ", "▁")


@pytest.fixture(scope="module")
def reviews() -> list[str]:
    return [text for _, text in downloads.pang_lee_reviews()[:400]]


@pytest.fixture(scope="module")
def tokenizers(reviews, minilm_dir) -> dict:
    """BERT's WordPiece, and a RoBERTa and an XLM-RoBERTa tokenizer trained on the first 200 reviews."""
    from transformers import AutoTokenizer

    return {"bert": AutoTokenizer.from_pretrained(minilm_dir), "roberta": roberta_tokenizer(reviews[:200]),
            "xlm-roberta": xlm_roberta_tokenizer(reviews[:200])}


class InputRecorder(torch.nn.Module):
    """``model``, recording the ``input_ids`` of every call."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.seen: list[list[int]] = []

    def forward(self, **inputs):
        self.seen.append(inputs["input_ids"][0].tolist())
        return self.model(**inputs)


@pytest.mark.parametrize("kind", MASK_TOKENS)
def test_the_probe_masks_one_token_words_with_the_tokenizer_s_mask_token_and_shows_words(kind, tokenizers, reviews,
                                                                                         tiny_config):
    tokenizer = tokenizers[kind]
    probes = probe_sentences(reviews[200:], tokenizer, count=8, seed=1, max_length=64)  # the model's positions
    assert len(probes) == 8 and tokenizer.mask_token == MASK_TOKENS[kind]
    torch.manual_seed(0)
    model = InputRecorder(MlmSuiteForMaskedLM(tiny_config(vocab_size=len(tokenizer))))
    results = fill_mask_probe(model, tokenizer, probes)
    for (sentence, answer), seen, result in zip(probes, model.seen, results):
        assert sentence.count(MASK_TOKENS[kind]) == 1 and "[MASK]" not in sentence.replace(MASK_TOKENS[kind], "")
        # The model reads the sentence's own tokens with the answer's one token (its word-start marker included)
        # replaced by the mask: what training masks.
        original = tokenizer(sentence.replace(tokenizer.mask_token, answer))["input_ids"]
        changed = [position for position, (a, b) in enumerate(zip(original, seen)) if a != b]
        assert len(seen) == len(original) and len(changed) == 1 and seen[changed[0]] == tokenizer.mask_token_id
        assert readable_token(tokenizer, original[changed[0]]) == answer
        if kind != "xlm-roberta":  # whose tokenizer drops the space before a mask token, not before a word
            assert seen == tokenizer(sentence)["input_ids"]  # what pipeline("fill-mask") reads
        assert len(result["predictions"]) == 5
        assert all(prediction and not any(marker in prediction for marker in MARKERS) for prediction in result["predictions"])


def test_a_mask_token_that_keeps_the_space_before_it_gets_no_lone_space_token(reviews):
    """With a byte-level BPE whose ``<mask>`` does not take in the space before it, tokenizing ``"was <mask>"`` leaves
    a lone "Ġ" before the mask, which training never shows; the probe reads the sentence as training masks it."""
    from tests.helpers import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(reviews[:200])
    probes = probe_sentences(reviews[200:], tokenizer, count=3, max_length=64)
    assert probes and all("<mask>" in sentence for sentence, _ in probes)
    model = InputRecorder(torch.nn.Linear(1, 1))  # records, then fails where the logits would be read
    space = tokenizer.convert_tokens_to_ids("Ġ")
    with pytest.raises(TypeError):
        fill_mask_probe(model, tokenizer, probes)
    assert tokenizer(probes[0][0])["input_ids"].count(space) > model.seen[0].count(space)
    before_mask = model.seen[0][model.seen[0].index(tokenizer.mask_token_id) - 1]
    assert before_mask != space


@pytest.mark.parametrize("kind", ["roberta", "xlm-roberta"])
def test_readable_tokens_show_no_vocabulary_marker(kind, tokenizers):
    tokenizer = tokenizers[kind]
    shown = [readable_token(tokenizer, token_id) for token_id in range(len(tokenizer))]
    assert all(text and not any(marker in text for marker in MARKERS) for text in shown)
    pieces = {"roberta": {"Ġthe": "the", "the": "the", "Ġ": "␣", "Ċ": "↵", "ĉ": "⇥", "č": "\\r", "<s>": "<s>"},
              "xlm-roberta": {"▁the": "the", "▁": "␣", "<mask>": "<mask>"}}[kind]
    assert {piece: shown[tokenizer.convert_tokens_to_ids(piece)] for piece in pieces} == pieces


def test_readable_wordpiece_tokens(tokenizers):
    tokenizer = tokenizers["bert"]
    pieces = {"the": "the", "##s": "s", ".": ".", "[SEP]": "[SEP]"}
    assert {piece: readable_token(tokenizer, tokenizer.convert_tokens_to_ids(piece)) for piece in pieces} == pieces
