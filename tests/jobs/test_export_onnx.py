"""The ``export-onnx`` command: a file onnxruntime runs like the eager model, and one-line user errors."""

from __future__ import annotations

import sys

import pytest
import torch

from mlm_suite import MlmSuiteForTokenClassification
from mlm_suite.jobs import export_onnx
from tests.helpers import layout_config


@pytest.mark.compile
def test_export_onnx_command_writes_a_file_onnxruntime_runs_like_eager(tmp_path, capsys):
    torch.manual_seed(0)
    source = tmp_path / "ner"
    MlmSuiteForTokenClassification(layout_config("bert", id2label={0: "O", 1: "B-X", 2: "I-X"})).save_pretrained(source)
    difference = export_onnx.main(["--model_name_or_path", str(source), "--output", str(tmp_path / "ner.onnx")])
    assert difference < 1e-4
    assert (tmp_path / "ner.onnx").stat().st_size > 10_000
    assert "outputs logits" in capsys.readouterr().out
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "ner.onnx"))
    assert [item.name for item in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]


@pytest.mark.multiprocess
def test_export_onnx_user_errors_are_one_line(tmp_path, warm_python):
    result = warm_python.run(
        [sys.executable, "-m", "mlm_suite.cli", "export-onnx", "--model_name_or_path", str(tmp_path), "--output", "x.onnx"]
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"mlm-suite export-onnx: error: --model_name_or_path {tmp_path}: no config.json there (an mlm_suite checkpoint folder)"
