"""A row's outputs do not depend on its batch: every head gives each row, padded on the right or on the left, in a
padded, flattened or traced dense batch, what the row gets alone (docs/models.md#padding-and-batch-layouts).

The traced dense layout is the one ``torch.compile`` and ``torch.export`` trace; it is reached here in eager mode by
making ``torch.compiler.is_compiling`` answer True, which is what the model asks.
"""

from __future__ import annotations

import pytest
import torch

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
from mlm_suite.data.flattening import flatten_batch
from tests.helpers import ARCHITECTURES, LAYOUT_VOCAB, layout_config

LENGTHS = (9, 4, 11, 1, 6)
SEQ_LEN = 13
BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}

# Per-token outputs are compared at the row's real tokens, per-row outputs whole.
HEADS = {
    "encoder-cls": (MlmSuiteModel, {}),
    "encoder-mean": (MlmSuiteModel, {"classifier_pooling": "mean"}),
    "masked-lm": (MlmSuiteForMaskedLM, {}),
    "pretraining": (MlmSuiteForPreTraining, {}),
    "nsp": (MlmSuiteForNextSentencePrediction, {}),
    "sequence-cls": (MlmSuiteForSequenceClassification, {}),
    "sequence-mean": (MlmSuiteForSequenceClassification, {"classifier_pooling": "mean"}),
    "pair": (MlmSuiteForPairClassification, {}),
    "tokens": (MlmSuiteForTokenClassification, {"num_labels": 5}),
    "tokens-crf": (MlmSuiteForTokenClassification, {"num_labels": 5, "use_crf": True, "tagging_scheme": "BIO",
                                                    "id2label": BIO}),
    "qa": (MlmSuiteForQuestionAnswering, {}),
    "embeddings-cls": (MlmSuiteForSentenceEmbedding, {"sentence_pooling": "cls"}),
    "embeddings-mean": (MlmSuiteForSentenceEmbedding, {"sentence_pooling": "mean"}),
    "embeddings-max": (MlmSuiteForSentenceEmbedding, {"sentence_pooling": "max"}),
}
FAMILIES = {
    "bert": ARCHITECTURES["bert"],
    "roberta-positions": {**ARCHITECTURES["bert"], "positions_count": "real_tokens"},
    "modernbert": ARCHITECTURES["modernbert"],
}


def rows(seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Each row alone: ``(1, length)`` ids and segment ids (the second half of a row is segment 1)."""
    generator = torch.Generator().manual_seed(seed)
    alone = []
    for length in LENGTHS:
        token_type_ids = torch.zeros(1, length, dtype=torch.long)
        token_type_ids[:, length // 2 :] = 1
        alone.append({"input_ids": torch.randint(5, LAYOUT_VOCAB, (1, length), generator=generator),
                      "token_type_ids": token_type_ids})
    return alone


def padded(alone: list[dict[str, torch.Tensor]], side: str) -> dict[str, torch.Tensor]:
    """The rows in one ``(rows, SEQ_LEN)`` batch padded on ``side`` (pad id 0)."""
    batch = {name: torch.zeros(len(alone), SEQ_LEN, dtype=torch.long) for name in ("input_ids", "token_type_ids",
                                                                                   "attention_mask")}
    for row, inputs in enumerate(alone):
        length = inputs["input_ids"].shape[1]
        span = slice(SEQ_LEN - length, SEQ_LEN) if side == "left" else slice(0, length)
        batch["input_ids"][row, span] = inputs["input_ids"][0]
        batch["token_type_ids"][row, span] = inputs["token_type_ids"][0]
        batch["attention_mask"][row, span] = 1
    return batch


def outputs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The head's tensor outputs (a CRF's decoded tags as well), in float64."""
    with torch.no_grad():
        found = model(**batch)
    values = {name: value.double() for name, value in found.items() if isinstance(value, torch.Tensor)}
    if getattr(model.config, "use_crf", False) and "attention_mask" in batch:
        tags = model.decode(found.logits, batch["attention_mask"])
        values["crf_tags"] = torch.tensor([tag for row in tags for tag in row], dtype=torch.float64)
    return values


def per_row(values: dict[str, torch.Tensor], real: torch.Tensor | None, layout: str) -> list[dict[str, torch.Tensor]]:
    """Split a batch's outputs into its rows' real parts: per-token tensors at the row's real cells (a flattened
    batch's ``(1, total, ...)`` by the rows' lengths), per-row tensors by row; decoded tags by the rows' lengths."""
    split = [dict() for _ in LENGTHS]
    for name, value in values.items():
        if name == "crf_tags":
            parts = value.split(list(LENGTHS))
        elif layout.startswith("flattened") and value.dim() >= 2 and value.shape[0] == 1:
            parts = value[0].split(list(LENGTHS))
        elif value.dim() >= 2 and value.shape[1] == SEQ_LEN:
            parts = [value[row][real[row]] for row in range(len(LENGTHS))]
        else:
            parts = list(value)
        for row, part in enumerate(parts):
            split[row][name] = part
    return split


def batch_in(layout: str, alone: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    side = "left" if "left" in layout else "right"
    batch = padded(alone, side)
    return flatten_batch(batch, masked_lm_positions=False) if layout.startswith("flattened") else batch


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("head", list(HEADS))
def test_every_row_gets_what_it_gets_alone_in_every_layout(head, family, monkeypatch):
    cls, overrides = HEADS[head]
    torch.manual_seed(0)
    model = cls(layout_config(**{**FAMILIES[family], **overrides})).eval()
    alone = rows()
    expected = []
    for inputs in alone:
        found = outputs(model, inputs)
        found.pop("crf_tags", None)  # no mask alone: the row's tags come from the batch's mask below
        expected.append({name: value[0] if value.shape[0] == 1 else value for name, value in found.items()})
    if getattr(model.config, "use_crf", False):
        for inputs, row in zip(alone, expected):
            tags = model.decode(model(**inputs).logits.detach(), torch.ones_like(inputs["input_ids"]))
            row["crf_tags"] = torch.tensor(tags[0], dtype=torch.float64)
    layouts = ["right", "left", "flattened-right", "flattened-left", "traced-right", "traced-left"]
    if head == "tokens-crf":  # the CRF scores whole padded rows; it refuses flattened batches in training only
        layouts = [layout for layout in layouts if not layout.startswith("flattened")]
    for layout in layouts:
        batch = batch_in(layout, alone)
        with monkeypatch.context() as patch:
            if layout.startswith("traced"):
                patch.setattr(torch.compiler, "is_compiling", lambda: True)
            found = outputs(model, batch)
        real = batch["attention_mask"].bool() if "attention_mask" in batch else None
        for row, (got, want) in enumerate(zip(per_row(found, real, layout), expected)):
            assert got.keys() == want.keys(), layout
            for name in want:
                torch.testing.assert_close(got[name], want[name], atol=2e-5, rtol=0,
                                           msg=lambda message: f"{layout}, row {row}, {name}: {message}")


def test_a_left_padded_batch_is_not_read_at_column_0():
    """The failure this guards: ``[CLS]`` pooling read column 0, a pad in every left-padded row, so those rows got
    one and the same logits whatever their text."""
    torch.manual_seed(0)
    model = MlmSuiteForSequenceClassification(layout_config(**ARCHITECTURES["bert"])).eval()
    batch = padded(rows(), "left")
    with torch.no_grad():
        logits = model(**batch).logits  # (rows, labels)
    short_rows = [row for row, length in enumerate(LENGTHS) if length < SEQ_LEN]
    assert len({tuple(logits[row].tolist()) for row in short_rows}) == len(short_rows)


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_the_fill_mask_pipeline_gives_each_sentence_its_own_answers_in_a_left_padded_batch(family, tmp_path):
    """transformers' fill-mask pipeline batches sentences with the tokenizer's padding side."""
    from transformers import pipeline

    from mlm_suite.data.pretraining.vocabulary import train_wordpiece_tokenizer

    sentences = ["the film was good and the actors were fine .", "a bad movie .", "the plot is thin , the music loud ."]
    tokenizer = train_wordpiece_tokenizer(sentences * 20, vocab_size=120)
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(layout_config(**{**ARCHITECTURES[family], "vocab_size": len(tokenizer)})).eval()
    masked = [sentence.replace(word, tokenizer.mask_token, 1)
              for sentence, word in zip(sentences, ("good", "bad", "thin"))]
    alone = [pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")(text, top_k=5) for text in masked]
    tokenizer.padding_side = "left"
    batched = pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")(masked, top_k=5, batch_size=3)
    for one, many in zip(alone, batched):
        assert [answer["token"] for answer in one] == [answer["token"] for answer in many]
        for a, b in zip(one, many):
            assert abs(a["score"] - b["score"]) < 1e-5
