"""What a run delivers (mlm_suite.training.throughput): real tokens per second over the steady steps and the model
FLOPs utilisation against a device's peak, as the jobs write them to all_results.json and the model card, and the
Trainer's FLOP count without walking the model at every step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from mlm_suite.cli import main
from mlm_suite.training.throughput import UNKNOWN, model_flops_utilisation, peak_tflops, real_tokens
from tests.helpers import make_random_batch, make_tiny_config

TINY = "num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64"
QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false"]


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-40GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA A10G", None),  # not listed: unknown rather than the A10's figure
        ("Tesla V100-SXM2-16GB", None),
    ],
)
def test_the_peak_of_a_gpu_comes_from_its_name(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert peak_tflops(torch.device("cuda", 0)) == (peak, name)


def test_a_cpu_has_no_peak_unless_one_is_given():
    assert peak_tflops(torch.device("cpu")) == (None, "cpu")
    assert peak_tflops(torch.device("cpu"), 2.5) == (2.5, "--peak_tflops")


def test_model_flops_utilisation_is_achieved_over_peak_flops():
    # 1e6 tokens/s × 6e6 FLOPs per token = 6 TFLOP/s, against 2 devices × 10 TFLOP/s.
    assert model_flops_utilisation(1e6, 6e6, 10.0, devices=2) == pytest.approx(0.3)
    assert model_flops_utilisation(1e6, 6e6, None, devices=1) == UNKNOWN


def test_real_tokens_leave_padding_out():
    padded = {"input_ids": torch.ones(2, 5, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1] * 5])}
    assert int(real_tokens(padded)) == 8
    flattened = {"input_ids": torch.ones(1, 11, dtype=torch.long), "cu_seq_lens_q": torch.tensor([0, 4, 11])}
    assert real_tokens(flattened) == 11
    # a token-budget batch: 7 real tokens filled to 11 with a padding sequence of pad ids (0)
    budget = {"input_ids": torch.tensor([[5] * 7 + [0] * 4]), "cu_seq_lens_q": torch.tensor([0, 4, 7, 11])}
    assert int(real_tokens(budget, pad_token_id=0)) == 7
    retrieval = {"query_input_ids": torch.ones(2, 3), "query_attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]]),
                 "document_input_ids": torch.ones(2, 4), "document_attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])}  # fmt: skip
    assert int(real_tokens(retrieval)) == 9
    assert real_tokens({"input_ids": torch.ones(3, 4)}) == 12


def test_the_trainer_counts_flops_as_the_stock_one_without_walking_the_model_each_step(tmp_path):
    import accelerate.optimizer
    import transformers

    from mlm_suite import MlmSuiteForMaskedLM
    from mlm_suite.training.trainer import JobTrainer

    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    trainer = JobTrainer(model=MlmSuiteForMaskedLM(make_tiny_config()), args=args)
    batch = make_random_batch()
    stock = transformers.Trainer.floating_point_ops(trainer, batch)
    assert stock > 0 and trainer.floating_point_ops(batch) == stock == trainer.floating_point_ops(batch)
    assert hasattr(accelerate.optimizer.is_lomo_available, "cache_info")  # asked once per process, not per step


def _results(output_dir: Path) -> tuple[dict, dict, str]:
    return (json.loads((output_dir / "all_results.json").read_text()), json.loads((output_dir / "train_results.json").read_text()),
            (output_dir / "README.md").read_text(encoding="utf-8"))  # fmt: skip


def test_pretraining_reports_tokens_per_second_and_mfu(tmp_path, data_files, capsys):
    argv = ["pretrain", "--train_file", data_files["text"], "--validation_file", data_files["text"], "--vocab_size", "120",
            "--config_overrides", TINY, "--max_seq_length", "16", "--per_device_train_batch_size", "4", "--max_steps", "10",
            "--eval_strategy", "no", "--fill_mask_probes", "0", *QUIET]  # fmt: skip
    assert main([str(arg) for arg in [*argv, "--output_dir", tmp_path / "cpu"]]) == 0
    everything, train, card = _results(tmp_path / "cpu")
    assert everything["train_mfu"] == train["train_mfu"] == UNKNOWN  # a CPU has no listed peak
    assert everything["train_tokens_per_second"] == train["train_tokens_per_second"] > 0
    # Four rows of at most 16 tokens per step.
    assert train["train_tokens_per_second"] <= 4 * 16 * train["train_steady_steps_per_second"] * 1.001
    assert "| model FLOPs utilisation | unknown (no dense bf16 peak known for cpu; give --peak_tflops) |" in card
    assert "'train_tokens_per_second'" in capsys.readouterr().out  # the metrics the job prints

    assert main([str(arg) for arg in [*argv, "--output_dir", tmp_path / "peak", "--peak_tflops", "0.001"]]) == 0
    everything, train, card = _results(tmp_path / "peak")
    tokens_per_second = train["train_tokens_per_second"]
    parameters = json.loads((tmp_path / "peak" / "config.json").read_text())
    assert isinstance(train["train_mfu"], float) and 0 < train["train_mfu"] == everything["train_mfu"]
    flops_per_token = train["train_mfu"] * 1e9 / tokens_per_second  # 0.001 TFLOP/s
    assert flops_per_token > 6 * parameters["hidden_size"] ** 2  # at least one layer's attention projections
    assert f"of 0.001 TFLOP/s per device (--peak_tflops)" in card


def test_finetuning_reports_real_tokens_per_second_without_mfu(tmp_path, tiny_model, data_files):
    # The batch is the whole training file, so every step trains on the same real tokens.
    argv = ["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"], "--validation_file",
            data_files["csv"], "--max_steps", "10",
            "--per_device_train_batch_size", "12", "--output_dir", tmp_path / "out", *QUIET]  # fmt: skip
    assert main([str(arg) for arg in argv]) == 0
    _, train, card = _results(tmp_path / "out")
    assert "train_mfu" not in train
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    texts = [line.split(",")[0] for line in data_files["csv"].read_text().splitlines()[1:]]
    tokens_per_step = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    assert train["train_tokens_per_second"] == pytest.approx(tokens_per_step * train["train_steady_steps_per_second"], rel=1e-3)
    assert f"| real (non-pad) tokens per second, steady steps | {train['train_tokens_per_second']:,.0f} |" in card
