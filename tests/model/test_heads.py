"""The task heads: output types and shapes, losses against torch's reference formulas, sparse MLM
prediction, weight tying, the CRF head, label-shape errors, gradient accumulation with
``num_items_in_batch`` (by hand and through ``transformers.Trainer``) and that every parameter of
every head receives a gradient (DDP ``find_unused_parameters=False``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import BertForQuestionAnswering
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from tests.helpers import TINY_VOCAB, make_random_batch, make_tiny_bert_config, make_tiny_config
from mlm_suite import (
    MlmSuiteForMaskedLM,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPairClassification,
    MlmSuiteForPreTraining,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)
from mlm_suite.conversion.bert import convert_bert_state_dict
from mlm_suite.conversion.core import load_converted_weights
from mlm_suite.model import MlmSuiteForPreTrainingOutput, modeling_mlm_suite

BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
LENGTHS = (7, 4, 9, 2)
B, S, H = len(LENGTHS), max(LENGTHS), 32


def build(cls, seed=0, **overrides):
    torch.manual_seed(seed)
    return cls(make_tiny_config(**overrides))


def mlm_labels(batch, seed=0, rate=0.4):
    generator = torch.Generator().manual_seed(seed)
    real = batch["attention_mask"].bool()
    chosen = (torch.rand(real.shape, generator=generator) < rate) & real
    chosen[:, 1] = real[:, 1]  # at least one labelled token per non-trivial row
    targets = torch.randint(1, TINY_VOCAB, real.shape, generator=generator)
    return torch.where(chosen, targets, torch.full_like(targets, -100))


def token_labels(batch, num_labels=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    real = batch["attention_mask"].bool()
    labels = torch.randint(0, num_labels, real.shape, generator=generator)
    labels[:, 0] = -100  # [CLS]
    labels[:, 3] = -100  # a continuation piece
    return torch.where(real, labels, torch.full_like(labels, -100))


def grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_grads_equal(a, b, atol=1e-6):
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=0, msg=name)


# ------------------------------------------------------------------------------------------------
# Output types and shapes
# ------------------------------------------------------------------------------------------------
HEADS = [
    (MlmSuiteModel, {}, BaseModelOutputWithPooling, {"last_hidden_state": (B, S, H), "pooler_output": (B, H)}),
    (MlmSuiteForMaskedLM, {}, MaskedLMOutput, {"logits": (B, S, TINY_VOCAB)}),
    (
        MlmSuiteForPreTraining,
        {},
        MlmSuiteForPreTrainingOutput,
        {"prediction_logits": (B, S, TINY_VOCAB), "seq_relationship_logits": (B, 2)},
    ),
    (MlmSuiteForNextSentencePrediction, {}, NextSentencePredictorOutput, {"logits": (B, 2)}),
    (MlmSuiteForSequenceClassification, {"num_labels": 3}, SequenceClassifierOutput, {"logits": (B, 3)}),
    (MlmSuiteForPairClassification, {"num_labels": 3}, SequenceClassifierOutput, {"logits": (B, 3)}),
    (MlmSuiteForTokenClassification, {"num_labels": 5}, TokenClassifierOutput, {"logits": (B, S, 5)}),
    (
        MlmSuiteForTokenClassification,
        {"use_crf": True, "tagging_scheme": "BIO", "id2label": BIO},
        TokenClassifierOutput,
        {"logits": (B, S, 5)},
    ),
    (MlmSuiteForQuestionAnswering, {}, QuestionAnsweringModelOutput, {"start_logits": (B, S), "end_logits": (B, S)}),
]


@pytest.mark.parametrize("cls, overrides, output_type, shapes", HEADS, ids=lambda v: getattr(v, "__name__", None))
def test_head_output_types_and_shapes(cls, overrides, output_type, shapes):
    model = build(cls, **overrides).eval()
    batch = make_random_batch(LENGTHS)
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
        as_tuple = model(**batch, return_dict=False)
    assert type(out) is output_type
    for name, shape in shapes.items():
        assert getattr(out, name).shape == shape, name
        assert torch.isfinite(getattr(out, name)).all()
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], getattr(out, next(iter(shapes))))


# ------------------------------------------------------------------------------------------------
# Masked LM
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [MlmSuiteForMaskedLM, MlmSuiteForPreTraining])
def test_sparse_prediction_matches_dense_loss_and_gradients(cls):
    model = build(cls).train()
    assert model.config.sparse_prediction
    batch = make_random_batch(LENGTHS)
    labels = mlm_labels(batch)
    n_labelled = int((labels != -100).sum())
    sparse = model(**batch, labels=labels)
    logits_name = "logits" if cls is MlmSuiteForMaskedLM else "prediction_logits"
    sparse_logits = getattr(sparse, logits_name)
    assert sparse_logits.shape == (n_labelled, TINY_VOCAB)
    sparse.loss.backward()
    sparse_grads = grads(model)
    model.zero_grad()

    model.config.sparse_prediction = False
    dense = model(**batch, labels=labels)
    dense_logits = getattr(dense, logits_name)
    assert dense_logits.shape == (B, S, TINY_VOCAB)
    dense.loss.backward()
    torch.testing.assert_close(sparse.loss, dense.loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(sparse_logits, dense_logits[labels != -100], atol=1e-5, rtol=0)
    assert_grads_equal(sparse_grads, grads(model))
    expected = F.cross_entropy(dense_logits.view(-1, TINY_VOCAB), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(dense.loss, expected, atol=1e-6, rtol=0)


def test_eval_mode_gives_dense_logits_with_labels():
    model = build(MlmSuiteForMaskedLM).eval()
    batch = make_random_batch(LENGTHS)
    labels = mlm_labels(batch)
    out = model(**batch, labels=labels)
    assert out.logits.shape == (B, S, TINY_VOCAB)
    expected = F.cross_entropy(out.logits.view(-1, TINY_VOCAB), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("cls", [MlmSuiteForMaskedLM, MlmSuiteForPreTraining])
def test_decoder_is_tied_to_embeddings_and_stays_tied(cls, tmp_path):
    model = build(cls)
    embedding = model.encoder.embeddings.word_embeddings.weight
    assert model.lm_head.decoder.weight is embedding or (
        model.lm_head.decoder.weight.data_ptr() == embedding.data_ptr()
    )
    model.save_pretrained(tmp_path)
    loaded = cls.from_pretrained(tmp_path)
    loaded_embedding = loaded.encoder.embeddings.word_embeddings.weight
    assert loaded.lm_head.decoder.weight.data_ptr() == loaded_embedding.data_ptr()
    torch.testing.assert_close(loaded_embedding, embedding)
    with torch.no_grad():
        loaded_embedding[5].fill_(3.0)
    assert torch.all(loaded.lm_head.decoder.weight[5] == 3.0)


@pytest.mark.parametrize("cls", [MlmSuiteForMaskedLM, MlmSuiteForTokenClassification, MlmSuiteForQuestionAnswering])
def test_heads_without_pooler_have_no_pooler_params(cls):
    model = build(cls, num_labels=3)
    assert model.encoder.pooler is None
    assert not [name for name, _ in model.named_parameters() if "pooler" in name]
    assert [name for name, _ in build(MlmSuiteForPreTraining).named_parameters() if "pooler" in name]


def test_pretraining_loss_is_mlm_plus_nsp():
    model = build(MlmSuiteForPreTraining).eval()
    batch = make_random_batch(LENGTHS)
    labels, nsp = mlm_labels(batch), torch.tensor([0, 1, 1, 0])
    out = model(**batch, labels=labels, next_sentence_label=nsp)
    mlm = F.cross_entropy(out.prediction_logits.view(-1, TINY_VOCAB), labels.view(-1), ignore_index=-100)
    nsp_loss = F.cross_entropy(out.seq_relationship_logits, nsp)
    torch.testing.assert_close(out.loss, mlm + nsp_loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(model(**batch, labels=labels).loss, mlm, atol=1e-6, rtol=0)
    torch.testing.assert_close(model(**batch, next_sentence_label=nsp).loss, nsp_loss, atol=1e-6, rtol=0)
    assert model(**batch).loss is None


def test_next_sentence_prediction_loss():
    model = build(MlmSuiteForNextSentencePrediction).eval()
    batch = make_random_batch(LENGTHS)
    nsp = torch.tensor([1, 0, 0, 1])
    out = model(**batch, labels=nsp)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, nsp), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        model(**batch, labels=torch.tensor([1, 0, 0]))


# ------------------------------------------------------------------------------------------------
# Sequence and pair classification
# ------------------------------------------------------------------------------------------------
def test_sequence_classification_single_label():
    model = build(MlmSuiteForSequenceClassification, num_labels=3).eval()
    batch = make_random_batch(LENGTHS)
    labels = torch.tensor([0, 2, 1, 2])
    out = model(**batch, labels=labels)
    assert model.config.problem_type == "single_label_classification"
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels), atol=1e-6, rtol=0)


def test_sequence_classification_multi_label():
    model = build(MlmSuiteForSequenceClassification, num_labels=3).eval()
    batch = make_random_batch(LENGTHS)
    labels = torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.float)
    out = model(**batch, labels=labels)
    assert model.config.problem_type == "multi_label_classification"
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, labels), atol=1e-6, rtol=0)


def test_sequence_classification_regression():
    model = build(MlmSuiteForSequenceClassification, num_labels=1).eval()
    batch = make_random_batch(LENGTHS)
    labels = torch.tensor([0.5, -1.0, 2.0, 0.0])
    out = model(**batch, labels=labels)
    assert model.config.problem_type == "regression"
    assert out.logits.shape == (B, 1)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.view(-1), labels), atol=1e-6, rtol=0)


def test_explicit_problem_type_is_respected():
    model = build(MlmSuiteForSequenceClassification, num_labels=2, problem_type="multi_label_classification").eval()
    batch = make_random_batch(LENGTHS)
    labels = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0]])  # integer multi-hot targets
    out = model(**batch, labels=labels)
    torch.testing.assert_close(
        out.loss, F.binary_cross_entropy_with_logits(out.logits, labels.float()), atol=1e-6, rtol=0
    )


def test_mean_pooling_classifier():
    model = build(MlmSuiteForSequenceClassification, num_labels=3, classifier_pooling="mean").eval()
    batch = make_random_batch(LENGTHS)
    with torch.no_grad():
        logits = model(**batch).logits
        hidden = model.encoder(**batch).last_hidden_state
        mask = batch["attention_mask"].float()[..., None]
        mean = (hidden * mask).sum(1) / mask.sum(1)
        expected = model.classifier(torch.tanh(model.encoder.pooler.dense(mean)))
        cls_expected = model.classifier(torch.tanh(model.encoder.pooler.dense(hidden[:, 0])))
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)
    assert (logits - cls_expected).abs().max() > 1e-4
    for row, length in enumerate(LENGTHS):
        alone = model(**{k: v[row : row + 1, :length] for k, v in batch.items() if k != "attention_mask"}).logits
        torch.testing.assert_close(logits[row], alone[0].detach(), atol=1e-5, rtol=0)


def test_pair_classification_errors():
    with pytest.raises(ValueError, match=r"type_vocab_size >= 2.*got 1"):
        MlmSuiteForPairClassification(make_tiny_config(type_vocab_size=1))
    model = build(MlmSuiteForPairClassification, num_labels=3).eval()
    batch = make_random_batch(LENGTHS)
    bad = batch["token_type_ids"].clone()
    bad[0, 1] = 2
    with pytest.raises(ValueError, match=r"token type id 2 .*type_vocab_size=2"):
        model(**{**batch, "token_type_ids": bad})
    out = model(**batch, labels=torch.tensor([0, 1, 2, 0]))
    assert out.logits.shape == (B, 3) and torch.isfinite(out.loss)


def test_pair_classification_without_segment_ids_warns_and_reads_segment_zero(caplog):
    model = build(MlmSuiteForPairClassification, num_labels=3).eval()
    batch = make_random_batch(LENGTHS)
    segment_zero = {**batch, "token_type_ids": torch.zeros_like(batch["token_type_ids"])}
    without = {k: v for k, v in batch.items() if k != "token_type_ids"}
    modeling_mlm_suite.logger.warning_once.cache_clear()  # warned once per process: let this test see it
    with torch.no_grad():
        expected = model(**segment_zero).logits
        logits = model(**without).logits
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    assert "no token_type_ids" in caplog.text


def test_pair_classification_uses_segments():
    model = build(MlmSuiteForPairClassification, num_labels=3).eval()
    batch = make_random_batch(LENGTHS)
    with torch.no_grad():
        a = model(**batch).logits
        b = model(**{**batch, "token_type_ids": torch.zeros_like(batch["token_type_ids"])}).logits
    assert (a - b).abs().max() > 1e-5


# ------------------------------------------------------------------------------------------------
# Token classification (with and without CRF), class weights, label smoothing, QA
# ------------------------------------------------------------------------------------------------
def test_token_classification_loss_is_cross_entropy():
    model = build(MlmSuiteForTokenClassification, num_labels=5).eval()
    batch = make_random_batch(LENGTHS)
    labels = token_labels(batch)
    out = model(**batch, labels=labels)
    expected = F.cross_entropy(out.logits.view(-1, 5), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=0)
    decoded = model.decode(out.logits, labels != -100)
    assert decoded == [row[keep].tolist() for row, keep in zip(out.logits.argmax(-1), labels != -100)]


def _bio_valid(tags: list[int]) -> bool:
    previous = "O"
    for tag in tags:
        label = BIO[tag]
        if label.startswith("I-") and previous[2:] != label[2:]:
            return False
        previous = label
    return True


def test_crf_token_classification():
    model = build(MlmSuiteForTokenClassification, use_crf=True, tagging_scheme="BIO", id2label=BIO).train()
    assert model.num_labels == 5
    with torch.no_grad():  # emissions strongly favour I-PER, which BIO forbids at the start / after O
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 6.0, 0.0, 3.0]))
    batch = make_random_batch(LENGTHS)
    labels = token_labels(batch)
    labels[labels > 0] = 1  # gold: B-PER or O everywhere: always valid
    out = model(**batch, labels=labels)
    assert torch.isfinite(out.loss) and out.loss > 0
    out.loss.backward()
    assert model.crf.transitions.grad is not None and model.crf.transitions.grad.abs().sum() > 0
    mask = labels != -100
    decoded = model.decode(out.logits.detach(), mask)
    assert [len(d) for d in decoded] == mask.sum(1).tolist()
    assert all(_bio_valid(d) for d in decoded)
    assert any(d and d[0] != 2 for d in decoded)
    # unconstrained argmax would start with the forbidden I-PER
    assert out.logits.argmax(-1)[mask].eq(2).all()
    # NLL matches the CRF module called directly, averaged per labelled token
    expected = model.crf.neg_log_likelihood(out.logits, labels, mask, reduction="sum") / mask.sum()
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize("weights, smoothing", [([1.0, 2.0, 0.5, 3.0, 1.5], 0.0), (None, 0.2), ([1.0, 2.0, 0.5, 3.0, 1.5], 0.1)])
def test_class_weights_and_label_smoothing_token_classification(weights, smoothing):
    model = build(MlmSuiteForTokenClassification, num_labels=5, class_weights=weights, label_smoothing=smoothing).eval()
    batch = make_random_batch(LENGTHS)
    labels = token_labels(batch)
    out = model(**batch, labels=labels)
    w = torch.tensor(weights) if weights else None
    # the mean of weight[label] x loss over the labelled tokens (not torch's sum / sum of weights: see test_training_semantics)
    expected = F.cross_entropy(
        out.logits.view(-1, 5), labels.view(-1), weight=w, ignore_index=-100, label_smoothing=smoothing, reduction="sum"
    ) / (labels != -100).sum()
    plain = F.cross_entropy(out.logits.view(-1, 5), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=0)
    assert (out.loss - plain).abs() > 1e-4


def test_class_weights_and_label_smoothing_sequence_classification():
    weights = [0.2, 1.0, 3.0]
    model = build(MlmSuiteForSequenceClassification, num_labels=3, class_weights=weights, label_smoothing=0.1).eval()
    batch = make_random_batch(LENGTHS)
    labels = torch.tensor([0, 2, 1, 2])
    out = model(**batch, labels=labels)
    expected = F.cross_entropy(out.logits, labels, weight=torch.tensor(weights), label_smoothing=0.1, reduction="sum") / 4
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=0)
    assert (out.loss - F.cross_entropy(out.logits, labels)).abs() > 1e-4


def test_class_weights_of_wrong_length():
    model = build(MlmSuiteForTokenClassification, num_labels=5, class_weights=[1.0, 2.0]).eval()
    batch = make_random_batch(LENGTHS)
    with pytest.raises(ValueError, match="2 entries for 5 labels"):
        model(**batch, labels=token_labels(batch))


def test_question_answering_loss():
    model = build(MlmSuiteForQuestionAnswering).eval()
    batch = make_random_batch(LENGTHS)
    start, end = torch.tensor([1, 2, 3, S + 5]), torch.tensor([2, 3, 8, S + 7])  # last answer out of window
    out = model(**batch, start_positions=start, end_positions=end)
    keep = slice(0, 3)
    expected = (
        F.cross_entropy(out.start_logits[keep], start[keep]) + F.cross_entropy(out.end_logits[keep], end[keep])
    ) / 2
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=0)


def test_question_answering_pads_take_no_part_in_the_softmax():
    """One example's loss is the same alone and padded: pads get the most negative finite score."""
    model = build(MlmSuiteForQuestionAnswering).eval()
    alone = make_random_batch((7,), seed=3)
    padded = {key: F.pad(value, (0, 30)) for key, value in alone.items()}
    answer = {"start_positions": torch.tensor([2]), "end_positions": torch.tensor([4])}
    with torch.no_grad():
        out_alone, out_padded = model(**alone, **answer), model(**padded, **answer)
    assert float(out_padded.start_logits[0, 7:].max()) == torch.finfo(torch.float32).min
    assert torch.isfinite(out_padded.start_logits).all() and torch.isfinite(out_padded.loss)
    torch.testing.assert_close(out_padded.loss, out_alone.loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(out_padded.end_logits[:, :7], out_alone.end_logits, atol=1e-6, rtol=0)


def bert_and_ours_question_answering():
    """A random ``BertForQuestionAnswering`` and the mlm_suite head holding its weights."""
    torch.manual_seed(0)
    bert = BertForQuestionAnswering(make_tiny_bert_config()).eval()
    ours = MlmSuiteForQuestionAnswering(make_tiny_config()).eval()
    load_converted_weights(ours, convert_bert_state_dict(bert.state_dict(), bert.config.num_hidden_layers))
    return bert, ours


def test_question_answering_ignores_a_target_on_a_pad_as_bert_ignores_one_outside_the_window():
    """BERT's softmax runs over pads too, so it reads rows of 9 without padding; ours reads them padded to 13. A
    target on a pad (run_qa.py labels one when an answer starts at a padded context's last token) would meet the
    pad's most negative logit (a loss of ~1e38): it is ignored, as BERT ignores one past its window of 9."""
    bert, ours = bert_and_ours_question_answering()
    rows = make_random_batch((9, 9, 9), seed=3)
    padded = {key: F.pad(value, (0, 4)) for key, value in rows.items()}
    in_text = {"start_positions": torch.tensor([1, 2, 3]), "end_positions": torch.tensor([2, 5, 8])}
    on_a_pad = {"start_positions": torch.tensor([1, 10, 3]), "end_positions": torch.tensor([2, 11, 8])}
    with torch.no_grad():
        for answers in (in_text, on_a_pad):
            expected, loss = bert(**rows, **answers).loss, ours(**padded, **answers).loss
            assert torch.isfinite(loss) and loss < 10
            torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
        ignored = {"start_positions": torch.tensor([1, 9, 3]), "end_positions": torch.tensor([2, 9, 8])}
        torch.testing.assert_close(ours(**padded, **on_a_pad).loss, bert(**rows, **ignored).loss, atol=1e-5, rtol=1e-5)


def test_question_answering_without_an_answer_in_the_text_has_loss_0():
    """Every target on a pad or outside the window: nothing to learn from, so loss and gradient are 0, not NaN (0 / 0,
    BERT's) nor the pads' ~1e38 (docs/training_semantics.md, steps with nothing to predict)."""
    _, ours = bert_and_ours_question_answering()
    padded = {key: F.pad(value, (0, 4)) for key, value in make_random_batch((9, 9, 9), seed=3).items()}
    out = ours(**padded, start_positions=torch.tensor([10, 12, 40]), end_positions=torch.tensor([11, 12, 40]))
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in ours.parameters() if p.grad is not None)


# ------------------------------------------------------------------------------------------------
# Padding changes nothing
# ------------------------------------------------------------------------------------------------
def _padding_case(kind, batch):
    rows = batch["input_ids"].shape[0]
    return {
        "none": {},
        "mlm": {"labels": mlm_labels(batch)},
        "pretraining": {"labels": mlm_labels(batch), "next_sentence_label": torch.arange(rows) % 2},
        "sequence": {"labels": torch.arange(rows) % 3},
        "nsp": {"labels": torch.arange(rows) % 2},
        "tokens": {"labels": token_labels(batch)},
        "qa": {"start_positions": torch.ones(rows, dtype=torch.long), "end_positions": torch.full((rows,), 2)},
        "pairs": {"labels": torch.arange(rows // 2).flip(0)},  # queries first, then their documents
    }[kind]


PADDING_HEADS = [
    (MlmSuiteModel, "none", {}),
    (MlmSuiteModel, "none", {"classifier_pooling": "mean"}),
    (MlmSuiteForMaskedLM, "mlm", {}),
    (MlmSuiteForPreTraining, "pretraining", {}),
    (MlmSuiteForNextSentencePrediction, "nsp", {}),
    (MlmSuiteForSequenceClassification, "sequence", {"num_labels": 3}),
    (MlmSuiteForSequenceClassification, "sequence", {"num_labels": 3, "classifier_pooling": "mean"}),
    (MlmSuiteForPairClassification, "sequence", {"num_labels": 3}),
    (MlmSuiteForTokenClassification, "tokens", {"num_labels": 5}),
    (MlmSuiteForTokenClassification, "tokens", {"use_crf": True, "tagging_scheme": "BIO", "id2label": BIO}),
    (MlmSuiteForQuestionAnswering, "qa", {}),
    (MlmSuiteForSentenceEmbedding, "pairs", {}),
    (MlmSuiteForSentenceEmbedding, "pairs", {"sentence_pooling": "max"}),
]


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("lengths", [(7,), LENGTHS], ids=["one-unpadded", "batch"])
@pytest.mark.parametrize("cls, kind, overrides", PADDING_HEADS, ids=lambda v: getattr(v, "__name__", None))
def test_padding_changes_no_loss_and_no_logit(cls, kind, overrides, lengths, training):
    """Every head, more padding: the same loss and the same outputs at real positions (to 1e-6)."""
    if kind == "pairs" and len(lengths) == 1:
        kind = "none"  # a single sequence has no in-batch negatives
    model = build(cls, **overrides).train(training)
    batch = make_random_batch(lengths)
    targets = _padding_case(kind, batch)
    extra = 13
    padded = {key: F.pad(value, (0, extra)) for key, value in batch.items()}
    padded_targets = {
        key: F.pad(value, (0, extra), value=-100) if value.dim() == 2 else value for key, value in targets.items()
    }
    out, out_padded = model(**batch, **targets), model(**padded, **padded_targets)
    seq_len = batch["input_ids"].shape[1]
    compared = 0
    for name, value in out.items():
        if not isinstance(value, torch.Tensor):
            continue
        other = out_padded[name]
        if value.dim() >= 2 and other.shape[1] == seq_len + extra:
            other = other[:, :seq_len]  # the padding added: no real position
        torch.testing.assert_close(other, value, atol=1e-6, rtol=0, msg=name)
        compared += 1
    assert compared >= (2 if targets else 1)


# ------------------------------------------------------------------------------------------------
# Label shape errors
# ------------------------------------------------------------------------------------------------
def test_wrong_label_shapes_raise_value_errors():
    batch = make_random_batch(LENGTHS)
    mlm = build(MlmSuiteForMaskedLM)
    with pytest.raises(ValueError, match=rf"MLM labels have shape \({B}, {S + 1}\).*\({B}, {S}\)"):
        mlm(**batch, labels=torch.full((B, S + 1), -100))
    tokens = build(MlmSuiteForTokenClassification, num_labels=5)
    with pytest.raises(ValueError, match=rf"\({B - 1}, {S}\).*\({B}, {S}\)"):
        tokens(**batch, labels=torch.zeros(B - 1, S, dtype=torch.long))
    single = build(MlmSuiteForSequenceClassification, num_labels=3)
    with pytest.raises(ValueError, match=rf"\({B + 1},\).*\({B},\)"):
        single(**batch, labels=torch.zeros(B + 1, dtype=torch.long))
    multi = build(MlmSuiteForSequenceClassification, num_labels=3, problem_type="multi_label_classification")
    with pytest.raises(ValueError, match=rf"\({B}, 2\).*\({B}, 3\)"):
        multi(**batch, labels=torch.zeros(B, 2))
    regression = build(MlmSuiteForSequenceClassification, num_labels=1)
    with pytest.raises(ValueError, match=rf"\({B + 1},?\).*\({B},?\)"):
        regression(**batch, labels=torch.zeros(B + 1))


# ------------------------------------------------------------------------------------------------
# Gradient accumulation with num_items_in_batch
# ------------------------------------------------------------------------------------------------
def _accumulation_case(cls, labels_fn, **overrides):
    model = build(cls, **overrides).train()
    batch = make_random_batch((9, 3, 7, 5, 9, 2, 6, 8), seed=3)
    labels = labels_fn(batch)
    counts = (labels != -100).sum(1)
    micro_counts = counts.view(4, 2).sum(1)
    assert len(set(micro_counts.tolist())) > 1  # unequal micro-batches: a plain mean would be wrong

    model(**batch, labels=labels).loss.backward()
    full = grads(model)
    model.zero_grad()
    total = int(counts.sum())
    for i in range(4):
        rows = slice(2 * i, 2 * i + 2)
        micro = {k: v[rows] for k, v in batch.items()}
        model(**micro, labels=labels[rows], num_items_in_batch=torch.tensor(total)).loss.backward()
    accumulated = grads(model)
    assert_grads_equal(full, accumulated)

    model.zero_grad()  # sanity check: averaging per-micro-batch means gives different gradients
    for i in range(4):
        rows = slice(2 * i, 2 * i + 2)
        (model(**{k: v[rows] for k, v in batch.items()}, labels=labels[rows]).loss / 4).backward()
    naive = grads(model)
    assert max((naive[n] - full[n]).abs().max() for n in full) > 1e-6


def test_num_items_in_batch_masked_lm():
    _accumulation_case(MlmSuiteForMaskedLM, lambda b: mlm_labels(b, seed=5, rate=0.3))


def test_num_items_in_batch_token_classification():
    _accumulation_case(MlmSuiteForTokenClassification, token_labels, num_labels=5)


def _trainer_weights(tmp_path, batch_size, accumulation):
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(make_tiny_config())
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    batch = make_random_batch((9, 3, 7, 5, 9, 2, 6, 8), seed=4, pairs=False)
    labels = torch.full_like(batch["input_ids"], -100)
    for row, count in enumerate([1, 2, 3, 4, 5, 6, 7, 1]):  # odd total: no 4/4 split has equal counts
        labels[row, :count] = batch["input_ids"][row, :count]
        labels[row, 0] = batch["input_ids"][row, 0]
    dataset = [
        {"input_ids": batch["input_ids"][i], "attention_mask": batch["attention_mask"][i], "labels": labels[i]}
        for i in range(8)
    ]
    args = TrainingArguments(
        output_dir=str(tmp_path / f"run{batch_size}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=0.5,
        optim="sgd",
        weight_decay=0.0,
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        seed=0,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=args, train_dataset=dataset).train()
    return initial, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_trainer_gradient_accumulation_gives_the_same_step(tmp_path):
    initial, one_step = _trainer_weights(tmp_path, 8, 1)
    _, accumulated = _trainer_weights(tmp_path, 4, 2)
    assert max((one_step[k] - initial[k]).abs().max() for k in initial) > 1e-3  # the step did something
    for name in one_step:
        # rtol: a tiny random LM head normalises near-constant vectors, so some steps are large (~100)
        torch.testing.assert_close(one_step[name], accumulated[name], atol=1e-5, rtol=1e-5, msg=name)


# ------------------------------------------------------------------------------------------------
# Every parameter gets a gradient
# ------------------------------------------------------------------------------------------------
def _targets(kind):
    batch = make_random_batch(LENGTHS)
    return batch, {
        "pretraining": {"labels": mlm_labels(batch), "next_sentence_label": torch.tensor([0, 1, 0, 1])},
        "mlm": {"labels": mlm_labels(batch)},
        "tokens": {"labels": token_labels(batch)},
        "sequence": {"labels": torch.tensor([0, 1, 2, 1])},
        "nsp": {"labels": torch.tensor([0, 1, 1, 0])},
        "qa": {"start_positions": torch.tensor([1, 2, 3, 1]), "end_positions": torch.tensor([2, 3, 5, 1])},
    }[kind]


@pytest.mark.parametrize(
    "cls, kind, overrides",
    [
        (MlmSuiteForPreTraining, "pretraining", {}),
        (MlmSuiteForMaskedLM, "mlm", {}),
        (MlmSuiteForMaskedLM, "mlm", {"norm_position": "pre", "ffn_type": "geglu", "position_embedding_type": "rotary"}),
        (MlmSuiteForTokenClassification, "tokens", {"num_labels": 5}),
        (MlmSuiteForTokenClassification, "tokens", {"use_crf": True, "tagging_scheme": "BIO", "id2label": BIO}),
        (MlmSuiteForSequenceClassification, "sequence", {"num_labels": 3}),
        (MlmSuiteForSequenceClassification, "sequence", {"num_labels": 3, "classifier_pooling": "mean"}),
        (MlmSuiteForPairClassification, "sequence", {"num_labels": 3}),
        (MlmSuiteForNextSentencePrediction, "nsp", {}),
        (MlmSuiteForQuestionAnswering, "qa", {}),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_every_parameter_gets_a_gradient(cls, kind, overrides):
    model = build(cls, **overrides).train()
    batch, targets = _targets(kind)
    model(**batch, **targets).loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing, f"parameters without gradient (DDP find_unused_parameters=False would fail): {missing}"
    zero = [name for name, p in model.named_parameters() if not p.grad.abs().sum() > 0]
    assert not zero, f"parameters with an all-zero gradient: {zero}"


def test_num_items_in_batch_pretraining_weights_nsp_as_one_average():
    """MLM + NSP: micro-batches with num_items_in_batch add up to the full batch's loss and gradients.

    Every sequence carries the same number of masked tokens, the case in which weighting each
    micro-batch's NSP mean by its share of the masked tokens is exactly the full-batch NSP mean.
    """
    model = build(MlmSuiteForPreTraining).train()
    batch = make_random_batch((9, 4, 7, 5, 9, 6, 6, 8), seed=6)
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, 1:3] = batch["input_ids"][:, 1:3]
    next_sentence = torch.tensor([0, 1, 1, 0, 1, 1, 0, 0])

    full_loss = model(**batch, labels=labels, next_sentence_label=next_sentence).loss
    full_loss.backward()
    full = grads(model)
    model.zero_grad()
    total = torch.tensor(int((labels != -100).sum()))
    accumulated_loss = 0.0
    for i in range(4):
        rows = slice(2 * i, 2 * i + 2)
        micro = {k: v[rows] for k, v in batch.items()}
        loss = model(**micro, labels=labels[rows], next_sentence_label=next_sentence[rows], num_items_in_batch=total).loss
        loss.backward()
        accumulated_loss += loss.item()
    assert accumulated_loss == pytest.approx(full_loss.item(), rel=1e-5)
    assert_grads_equal(full, grads(model))
