"""``mlm_suite.export``: a ``torch.export`` program of every head equals the eager model on shapes other than the
traced ones, and keeps packed documents apart."""

from __future__ import annotations

import pytest
import torch

from mlm_suite import MlmSuiteModel
from mlm_suite import export as mlm_export
from tests.helpers import ALL_HEADS, ARCHITECTURES, LAYOUT_VOCAB, layout_config, padded_batch


@pytest.mark.compile
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@pytest.mark.parametrize("head", ALL_HEADS, ids=lambda head: head.__name__)
def test_exported_program_equals_eager_on_other_shapes(head, architecture):
    torch.manual_seed(0)
    model = head(layout_config(architecture)).eval()
    program = mlm_export.export_program(model)
    batch = padded_batch((13, 4, 9), seq_len=13, seed=5)
    del batch["labels"]
    with torch.no_grad():
        expected, produced = model(**batch), program.module()(**batch)
    for name, value in expected.items():
        torch.testing.assert_close(produced[name], value, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.compile
def test_exported_program_keeps_packed_documents_apart():
    torch.manual_seed(0)
    model = MlmSuiteModel(layout_config()).eval()
    inputs = {"input_ids": torch.randint(5, LAYOUT_VOCAB, (2, 10)), "document_ids": torch.tensor([[0] * 4 + [1] * 6, [2] * 10])}
    program = torch.export.export(model, (), kwargs=inputs)
    with torch.no_grad():
        torch.testing.assert_close(
            program.module()(**inputs).last_hidden_state, model(**inputs).last_hidden_state, atol=1e-5, rtol=1e-5
        )
