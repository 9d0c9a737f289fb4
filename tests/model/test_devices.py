"""Tensors follow their inputs' device: CPU-only CI catches what would fail on a GPU.

A function that builds a tensor without ``device=`` (``torch.arange(n)``, ``torch.zeros(...)``)
gets the *default* device, which is the CPU on a CPU machine, so on CPU the mistake is invisible;
with inputs on a GPU it fails (or silently copies) on the first CUDA run. These tests run each
path with its inputs on the CPU while the default device is ``meta``: a tensor made without its
inputs' device then lands on ``meta`` and either breaks the computation or shows up in the outputs.
Each path must give, under that default, exactly what it gives normally.
"""

from __future__ import annotations

from collections.abc import Callable

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
from mlm_suite.model.layout import SequenceLayout

from tests.helpers import make_random_batch, make_tiny_config

LENGTHS = (7, 4, 9, 2)
BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


def tensors_of(value) -> list[torch.Tensor]:
    """Every tensor in a (nested) output: dicts, ModelOutputs, tuples, dataclass layouts."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_of(item)]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors_of(item)]
    if hasattr(value, "__dataclass_fields__"):
        return [t for name in value.__dataclass_fields__ for t in tensors_of(getattr(value, name))]
    return []


def assert_same_off_the_default_device(run: Callable[[], object]) -> None:
    """``run()`` gives the same tensors, all on the CPU, when the default device is ``meta``."""
    expected = tensors_of(run())
    with torch.device("meta"):
        got = tensors_of(run())
    assert len(got) == len(expected) and expected
    for index, (value, reference) in enumerate(zip(got, expected)):
        assert value.device.type == "cpu", f"output tensor {index} was made on {value.device}, not its inputs' device"
        torch.testing.assert_close(value, reference, msg=lambda message: f"output tensor {index}: {message}")


def packed_batch() -> dict[str, torch.Tensor]:
    """Two rows, each packing documents: positions restart per document."""
    batch = make_random_batch((10, 10), pairs=False)
    batch["position_ids"] = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]])
    return batch


def left_padded_batch() -> dict[str, torch.Tensor]:
    batch = make_random_batch(LENGTHS)
    return {key: value.flip(1) for key, value in batch.items()}


# ------------------------------------------------------------------------------------------------
# Data: flattening
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: make_random_batch(LENGTHS),
        left_padded_batch,
        packed_batch,
        lambda: {"input_ids": torch.arange(1, 11)[None], "document_ids": torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2, 3]])},
        lambda: {**make_random_batch(LENGTHS), "labels": torch.randint(-1, 5, (4, 9)).clamp(min=-100)},
    ],
    ids=["padded", "left-padded", "packed", "documents", "labels"],
)
def test_flatten_batch_makes_its_tensors_on_its_inputs_device(make):
    batch = make()
    assert_same_off_the_default_device(lambda: flatten_batch(batch, max_length_multiple=8))


# ------------------------------------------------------------------------------------------------
# Model: layouts, and every head's forward and backward
# ------------------------------------------------------------------------------------------------
def test_sequence_layouts_make_their_tensors_on_their_inputs_device():
    batch, packed = make_random_batch(LENGTHS), packed_batch()
    flat = flatten_batch(batch)
    cpu = torch.device("cpu")
    for build in (
        lambda: SequenceLayout.from_inputs((4, 9), cpu, batch["attention_mask"]),
        lambda: SequenceLayout.from_inputs((2, 10), cpu, packed["attention_mask"], packed["position_ids"]),
        lambda: SequenceLayout.from_inputs((2, 10), cpu),
        lambda: SequenceLayout.from_offsets(tuple(flat["input_ids"].shape), flat["cu_seq_lens_q"], flat["max_length_q"]),
        lambda: SequenceLayout.traced_dense((2, 10), cpu, packed["attention_mask"], packed["position_ids"]),
    ):
        assert_same_off_the_default_device(lambda: (build(), build().token_segments()))


def mlm_labels(batch: dict) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    real = batch["attention_mask"].bool()
    chosen = (torch.rand(real.shape, generator=generator) < 0.4) & real
    chosen[:, 0] = True
    return torch.where(chosen, batch["input_ids"], torch.full_like(batch["input_ids"], -100))


def token_labels(batch: dict) -> torch.Tensor:
    labels = torch.randint(0, 5, batch["input_ids"].shape, generator=torch.Generator().manual_seed(1))
    return torch.where(batch["attention_mask"].bool(), labels, torch.full_like(labels, -100))


# (head, config overrides, labels of a padded batch of 4 rows, how the labels go with a flattened batch:
# "token" flattened with the tokens, "sequence" passed as they are, None: the head trains on padded batches)
HEADS = [
    (MlmSuiteModel, {}, lambda batch: {}, "sequence"),
    (MlmSuiteForMaskedLM, {}, lambda batch: {"labels": mlm_labels(batch)}, "token"),
    (
        MlmSuiteForPreTraining,
        {},
        lambda batch: {"labels": mlm_labels(batch), "next_sentence_label": torch.tensor([0, 1, 1, 0])},
        None,
    ),
    (MlmSuiteForNextSentencePrediction, {}, lambda batch: {"labels": torch.tensor([0, 1, 1, 0])}, "sequence"),
    (MlmSuiteForSequenceClassification, {"num_labels": 3}, lambda batch: {"labels": torch.tensor([0, 2, 1, 2])}, "sequence"),
    (
        MlmSuiteForSequenceClassification,
        {"num_labels": 3, "problem_type": "multi_label_classification"},
        lambda batch: {"labels": torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0]])},
        "sequence",
    ),
    (MlmSuiteForPairClassification, {"num_labels": 3}, lambda batch: {"labels": torch.tensor([0, 2, 1, 2])}, "sequence"),
    (MlmSuiteForTokenClassification, {"num_labels": 5}, lambda batch: {"labels": token_labels(batch)}, "token"),
    (
        MlmSuiteForTokenClassification,
        {"use_crf": True, "tagging_scheme": "BIO", "id2label": BIO},
        lambda batch: {"labels": token_labels(batch)},
        None,
    ),
    (
        MlmSuiteForQuestionAnswering,
        {},
        lambda batch: {"start_positions": torch.tensor([1, 0, 3, 1]), "end_positions": torch.tensor([2, 3, 5, 1])},
        None,
    ),
    (MlmSuiteForSentenceEmbedding, {}, lambda batch: {"labels": torch.tensor([1, 0])}, "sequence"),
]


@pytest.mark.parametrize("architecture", ["bert", "modern"])
@pytest.mark.parametrize("head, overrides, make_labels, flattened", HEADS, ids=lambda v: getattr(v, "__name__", None))
def test_every_head_trains_on_its_inputs_device_padded_and_flattened(head, overrides, make_labels, flattened, architecture):
    modern = dict(norm_position="pre", position_embedding_type="rotary") if architecture == "modern" else {}
    torch.manual_seed(0)
    model = head(make_tiny_config(**modern, **overrides)).train()  # dropout is off in the tiny config
    batch = make_random_batch(LENGTHS)
    labels = make_labels(batch)
    inputs = [{**batch, **labels}]
    if flattened == "token":
        inputs.append(flatten_batch({**batch, **labels}))
    elif flattened == "sequence":
        inputs.append({**flatten_batch(batch), **labels})

    def step(batch: dict):
        model.zero_grad(set_to_none=True)
        output = model(**batch)
        loss = output.get("loss")
        (tensors_of(output)[0].float().sum() if loss is None else loss).backward()
        return output, [parameter.grad for parameter in model.parameters() if parameter.grad is not None]

    for batch in inputs:
        assert_same_off_the_default_device(lambda: step(batch))


# ------------------------------------------------------------------------------------------------
# The same on a GPU, where one is present (CI has none; scripts/gpu_check.sh runs these)
# ------------------------------------------------------------------------------------------------
def on(device: str, batch: dict) -> dict:
    return {key: value.to(device) if torch.is_tensor(value) else value for key, value in batch.items()}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("head, overrides, make_labels, flattened", HEADS, ids=lambda v: getattr(v, "__name__", None))
def test_cuda_every_head_trains_like_on_cpu_padded_and_flattened(head, overrides, make_labels, flattened):
    torch.manual_seed(0)
    model = head(make_tiny_config(norm_position="pre", position_embedding_type="rotary", **overrides)).train()
    batch = make_random_batch(LENGTHS)
    labels = make_labels(batch)
    inputs = [{**batch, **labels}]
    if flattened == "token":
        inputs.append(flatten_batch(on("cuda", {**batch, **labels})))  # flattened on the GPU, as a user would
    elif flattened == "sequence":
        inputs.append({**flatten_batch(on("cuda", batch)), **labels})
    for inputs_here in inputs:
        results = {}
        for device in ("cpu", "cuda"):
            model.to(device).zero_grad(set_to_none=True)
            output = model(**on(device, inputs_here))
            loss = output.get("loss")
            (tensors_of(output)[0].float().sum() if loss is None else loss).backward()
            # Copies: model.to() moves the parameters' .grad tensors in place, and .cpu() of a CPU tensor is itself.
            results[device] = [t.detach().to("cpu", copy=True) for t in tensors_of(output)] + [
                parameter.grad.to("cpu", copy=True) for parameter in model.parameters() if parameter.grad is not None
            ]
            assert all(t.device.type == device for t in tensors_of(output))
        for index, (gpu, cpu) in enumerate(zip(results["cuda"], results["cpu"])):
            torch.testing.assert_close(gpu, cpu, atol=1e-4, rtol=1e-3, msg=lambda message: f"tensor {index}: {message}")
