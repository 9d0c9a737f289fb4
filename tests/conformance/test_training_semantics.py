"""The training-semantics parity matrix (issue 24): for every head, one optimizer step on a batch of 8
equals 4 accumulated micro-batches of 2 and 2 processes of 4 (gloo on CPU): the same gradients, the
same weights after the step, the same logged loss and gradient norm. See docs/training_semantics.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import Trainer

from tests.helpers import make_tiny_config
from tests.conformance.semantics_cases import CASES
from tests.conformance.semantics_cases import IN_BATCH_NEGATIVES
from tests.conformance.semantics_cases import ROWS
from tests.conformance.semantics_cases import batch_loss
from tests.conformance.semantics_cases import train_one_step
from mlm_suite import MlmSuiteForMaskedLM

# The stock Trainer counts only "labels"; MLM + NSP's NSP term is exact with JobTrainer, which also counts
# the next-sentence labels (the stock Trainer's approximation is checked separately below).
ONE_BATCH_EXACT = [name for name in CASES if name not in IN_BATCH_NEGATIVES]
STOCK_EXACT = [name for name in ONE_BATCH_EXACT if name != "mlm_nsp"]


def assert_same_step(actual: dict, expected: dict, what: str) -> None:
    assert actual.keys() == expected.keys(), what
    assert actual["loss"].item() == pytest.approx(expected["loss"].item(), abs=1e-4), f"{what}: logged loss"
    assert actual["grad_norm"].item() == pytest.approx(expected["grad_norm"].item(), rel=1e-5), f"{what}: grad norm"
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=1e-5, atol=1e-5, msg=f"{what}: {key}")


@pytest.fixture(scope="module")
def one_batch(tmp_path_factory):
    """Each case's step on one batch of 8 rows, trained once for the whole module."""
    folder = tmp_path_factory.mktemp("one_batch")
    return {name: train_one_step(name, folder / name, batch_size=ROWS) for name in CASES}


@pytest.mark.parametrize("name", list(CASES))
def test_the_logged_loss_is_the_batch_mean_and_the_step_moves_the_weights(name, one_batch):
    step = one_batch[name]
    assert step["loss"].item() == pytest.approx(batch_loss(name), abs=1e-4)
    assert step["grad_norm"] > 0
    assert any(key.startswith("grad.") for key in step)


@pytest.mark.parametrize("name", ONE_BATCH_EXACT)
def test_accumulated_micro_batches_equal_one_batch(name, one_batch, tmp_path):
    assert_same_step(train_one_step(name, tmp_path, batch_size=2, accumulation=4), one_batch[name], name)


@pytest.mark.parametrize("name", STOCK_EXACT)
def test_the_stock_trainer_accumulates_exactly_too(name, one_batch, tmp_path):
    accumulated = train_one_step(name, tmp_path, batch_size=2, accumulation=4, trainer_class=Trainer)
    assert_same_step(accumulated, one_batch[name], name)


def test_the_stock_trainer_weights_nsp_by_masked_tokens(one_batch, tmp_path):
    """Without JobTrainer's pair count, MLM + NSP weights each micro-batch's NSP mean by its share of the
    masked tokens: the rows' uneven masks make that differ from the batch mean, which JobTrainer gets."""
    stock = train_one_step("mlm_nsp", tmp_path, batch_size=2, accumulation=4, trainer_class=Trainer)
    exact, approximate = one_batch["mlm_nsp"]["grad.nsp_head.weight"], stock["grad.nsp_head.weight"]
    assert (approximate - exact).norm() > 1e-2 * exact.norm()


def test_gradient_caching_equals_embedding_the_whole_batch(one_batch):
    cached, whole = dict(one_batch["embeddings_cached"]), dict(one_batch["embeddings"])
    assert_same_step(cached, whole, "gradient caching")


@pytest.fixture(scope="module")
def two_halves(tmp_path_factory):
    """In-batch negatives: one process accumulating the two halves of 4 that 2 processes would each get."""
    folder = tmp_path_factory.mktemp("two_halves")
    return {name: train_one_step(name, folder / name, batch_size=ROWS // 2, accumulation=2) for name in IN_BATCH_NEGATIVES}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_processes_equal_one_process(one_batch, two_halves, tmp_path, warm_python):
    """2 processes × 4 rows (gloo): the Trainer sums the labelled items of both processes and multiplies each
    process's loss by 2, which DDP's averaging of the gradients undoes (the gradient cache does the same)."""
    result = warm_python.launch(Path(__file__).with_name("semantics_cases.py"), [str(tmp_path)], timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    for name in CASES:
        expected = two_halves[name] if name in IN_BATCH_NEGATIVES else one_batch[name]
        assert_same_step(load_file(str(tmp_path / f"{name}.safetensors")), expected, f"{name}, 2 processes")


def test_the_trainer_finds_only_the_real_label_arguments():
    """The Trainer takes every forward argument whose name holds "label" for a label: a count passed as a
    loss argument must not be one, or evaluation would find no labels (and return the wrong outputs)."""
    from transformers.utils import find_labels

    from mlm_suite import MlmSuiteForPreTraining

    assert find_labels(MlmSuiteForPreTraining) == ["labels", "next_sentence_label"]


@pytest.mark.parametrize("count", [0, torch.tensor(0)])
def test_a_batch_with_nothing_to_predict_has_a_zero_loss_and_gradient(count):
    """No token selected in the whole step (num_items_in_batch 0): a loss of 0 with a zero gradient, not 0 / 0."""
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(make_tiny_config())
    input_ids = torch.randint(5, model.config.vocab_size, (2, 8))
    labels = torch.full_like(input_ids, -100)
    loss = model(input_ids=input_ids, labels=labels, num_items_in_batch=count).loss
    loss.backward()
    assert loss.item() == 0.0
    assert all(parameter.grad is None or not parameter.grad.any() for parameter in model.parameters())
