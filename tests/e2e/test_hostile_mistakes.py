"""User mistakes that used to end in a traceback: a tokenizer larger than the model's vocabulary and config overrides
that cannot build a model are refused (one line naming the sizes or the field and value, exit status 2, no output
folder: docs/command_line.md); an anisotropy sample of more pairs than memory holds at once is computed in blocks."""

from __future__ import annotations

import json
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from mlm_suite import convert_checkpoint
from mlm_suite.model import MlmSuiteConfig, MlmSuiteModel
from tests.helpers import assert_refused, make_native_model, run_command

FAST = ["--max_steps", "2", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
        "--report_to", "none"]
PRETRAIN = ["--eval_strategy", "no", "--fill_mask_probes", "0"]


def command_line(command: str, model: Path, data_files: dict[str, Path]) -> list:
    """A command line of ``command`` on ``model`` that would run, without ``--output_dir``."""
    data = {
        "finetune-cls": ["--train_file", data_files["csv"], *FAST],
        "finetune-pair": ["--train_file", data_files["csv"], "--sentence1_column", "text", *FAST],
        "finetune-ner": ["--train_file", data_files["conll"], "--compare_hf", "false", *FAST],
        "finetune-retrieval": ["--train_file", data_files["pairs"], "--document_column", "passage", *FAST],
        "pretrain": ["--train_file", data_files["text"], "--validation_file", data_files["text"], *FAST, *PRETRAIN],
        "wsd": ["--train_file", data_files["wsd"], "--test_file", data_files["wsd"]],
        "anisotropy": ["--num_sentences", "4", "--n_pairs", "10"],
    }[command]
    return [command, "--model_name_or_path", model, *data]


@pytest.fixture(scope="module")
def small_vocabulary_model(tmp_path_factory, tiny_model) -> Path:
    """The tiny model with 1000 word embeddings, saved with the MiniLM tokenizer of 30522 tokens (as when a model
    pretrained on its own small vocabulary is given the wrong tokenizer)."""
    folder = tmp_path_factory.mktemp("small_vocabulary_model")
    config = MlmSuiteConfig.from_pretrained(tiny_model)
    config.vocab_size = 1000
    torch.manual_seed(0)
    MlmSuiteModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "command", ["finetune-cls", "finetune-pair", "finetune-ner", "finetune-retrieval", "pretrain", "wsd", "anisotropy"]
)
def test_a_tokenizer_larger_than_the_model_s_vocabulary_is_refused(
    command, tmp_path, small_vocabulary_model, data_files, capsys
):
    """Ids from 1000 on have no embedding: refused where the tokenizer is read, not `IndexError: index out of range
    in self` in the middle of training."""
    output_dir = tmp_path / "out"
    outcome = run_command([*command_line(command, small_vocabulary_model, data_files), "--output_dir", output_dir],
                          capsys)
    assert_refused(outcome, command, "30522 tokens", "vocab_size 1000", str(small_vocabulary_model))
    assert not output_dir.exists()


@pytest.mark.parametrize("command", ["finetune-cls", "finetune-pair", "finetune-ner", "finetune-retrieval", "pretrain"])
@pytest.mark.parametrize("converted", [False, True], ids=["native", "converted"])
def test_a_tokenizer_larger_than_a_roberta_s_vocabulary_is_refused(command, converted, tmp_path, tiny_model,
                                                                      data_files, capsys):
    """A RoBERTa folder of 1000 word embeddings with the MiniLM tokenizer of 30522 tokens, as given (every job that
    trains converts it on the fly) or converted first (``convert`` refuses that tokenizer: it joins the converted
    folder afterwards, as in a folder an earlier mlm_suite converted): one line naming both sizes and the folder
    given, no output folder."""
    model = tmp_path / "roberta"
    make_native_model("roberta", "ForMaskedLM", vocab_size=1000).save_pretrained(model)
    if converted:
        model = convert_checkpoint(model, tmp_path / "converted")
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(model)
    output_dir = tmp_path / "out"
    outcome = run_command([*command_line(command, model, data_files), "--output_dir", output_dir], capsys)
    assert_refused(outcome, command, "30522 tokens", f"the model ({model}) has vocab_size 1000")
    assert not output_dir.exists()


@pytest.mark.parametrize("override", ["num_attention_heads=0", "hidden_size=-64"])
def test_config_overrides_that_cannot_build_a_model_are_refused(override, tmp_path, tiny_model, data_files, capsys):
    output_dir = tmp_path / "out"
    outcome = run_command(["pretrain", "--train_file", data_files["text"], "--validation_file", data_files["text"],
                           "--tokenizer_name", tiny_model, *FAST, *PRETRAIN, "--config_overrides", override,
                           "--output_dir", output_dir], capsys)
    name, value = override.split("=")
    assert_refused(outcome, "pretrain", f"--config_overrides {override}", f"{name} must be", f"got {value}")
    assert not output_dir.exists()


@contextmanager
def data_memory_limit(extra_bytes: int) -> Iterator[None]:
    """Limit this process's heap and private writable mappings (RLIMIT_DATA, Linux's VmData) to what it uses now plus
    ``extra_bytes``: an allocation beyond fails at once, instead of growing the process."""
    used = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmData:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (used + extra_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmData from Linux's /proc")
def test_anisotropy_samples_more_pairs_than_memory_holds_at_once(tmp_path, tiny_model, capsys):
    """--n_pairs is the size of a sample, not of what is held at once: 4 million pairs of the tiny model's 32-wide
    vectors (1 GB for each side when gathered at once, as before: 10^8 pairs of 128-wide ones asked for 102 GB) run
    within 600 MB more than the process holds (libraries and threads of a first run included), and give cosines."""
    output_dir = tmp_path / "out"
    with data_memory_limit(600 * 2**20):
        outcome = run_command(["anisotropy", "--model_name_or_path", tiny_model, "--num_sentences", "4", "--n_pairs",
                               "4000000", "--output_dir", output_dir], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    layers = json.loads((output_dir / "anisotropy.json").read_text())["layers"]
    assert len(layers) == 3 and all(-1 <= layer[kind] <= 1 for layer in layers for kind in ("raw", "standardized"))
