"""The last edges (issue 54, items 3 to 6), whole commands as a hostile but realistic user runs them: a DistilBERT
folder whose tokenizer returns token types fine-tunes; ``prepare-data`` works in a writable folder under a read-only
parent; every file a job writes has the mode of the others (weights included) under umask 022; an output folder under
a regular file, a config of one family beside another's weights, a tokenizer larger than the embeddings and Ctrl-C
during a multi-worker ``prepare-data`` are each one line (docs/command_line.md)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import time
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from mlm_suite.data.pretraining import prepared
from mlm_suite.model_files import file_mode
from tests.helpers import (
    assert_refused,
    make_documents,
    make_native_model,
    pretrain_argv,
    run_command,
    write_csv,
    write_text,
)

FAST = ["--max_steps", "2", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
        "--max_seq_length", "32", "--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false"]


# --------------------------------------------------------------------------------------------
# Item 3: token types for a family without segment embeddings
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["finetune-cls", "finetune-pair"])
def test_a_distilbert_folder_whose_tokenizer_returns_token_types_fine_tunes(command, minilm_dir, tmp_path, capsys):
    """DistilBERT has no segment embeddings and its classes ignore token types; a BERT tokenizer in its folder returns
    them (1 for a pair's second sentence): the job trains, as transformers' DistilBertFor* would."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    assert "token_type_ids" in tokenizer("a", "b")
    folder = tmp_path / "distilbert"
    make_native_model("distilbert", "ForMaskedLM", vocab_size=len(tokenizer), pad_token_id=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    rows = [("a good film", "the plot works", "yes"), ("a dull film", "nothing happens", "no")] * 4
    data = write_csv(tmp_path / "train.csv", ["sentence1", "sentence2", "label"], rows)
    text_flags = ["--text_column_name", "sentence1"] if command == "finetune-cls" else []
    outcome = run_command([command, "--model_name_or_path", folder, "--train_file", data, *text_flags,
                           "--output_dir", tmp_path / "out", *FAST], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert (tmp_path / "out" / "model.safetensors").is_file()


# --------------------------------------------------------------------------------------------
# Item 4: prepare-data stages inside its own folder
# --------------------------------------------------------------------------------------------
def test_prepare_data_into_a_writable_folder_under_a_read_only_parent(tiny_model, tmp_path, monkeypatch, capsys):
    """It builds its data in a staging folder inside the output folder, never beside it (the parent of a per-user
    folder of a shared scratch area is not writable); as root the parent's mode stops nothing, so where the staging
    folder is made is recorded too."""
    shared = tmp_path / "shared"
    mine = shared / "mine"
    mine.mkdir(parents=True)
    corpus = write_text(tmp_path / "corpus.txt", make_documents(40))
    staged_in = []
    real_staging_folder = prepared.staging_folder

    def recording(parent, prefix):
        staged_in.append(Path(parent))
        return real_staging_folder(parent, prefix)

    monkeypatch.setattr(prepared, "staging_folder", recording)
    shared.chmod(0o555)
    try:
        outcome = run_command(["prepare-data", "--train_file", corpus, "--tokenizer_name", tiny_model,
                               "--output_dir", mine, "--max_seq_length", "32"], capsys)
        assert os.listdir(shared) == ["mine"]
    finally:
        shared.chmod(0o755)
    assert outcome.status == 0, outcome.err[-3000:]
    assert staged_in == [mine]
    assert sorted(os.listdir(mine)) == ["mlm_suite_data.json", "tokenizer", "train", "validation"]


def test_a_staging_folder_a_killed_prepare_data_left_is_removed_by_the_next_run(tiny_model, tmp_path, capsys):
    output_dir = tmp_path / "prepared"
    (output_dir / ".partial-0123456789abcdef" / "cache").mkdir(parents=True)  # what a SIGKILL'd run leaves
    corpus = write_text(tmp_path / "corpus.txt", make_documents(40))
    outcome = run_command(["prepare-data", "--train_file", corpus, "--tokenizer_name", tiny_model,
                           "--output_dir", output_dir, "--max_seq_length", "32"], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert sorted(os.listdir(output_dir)) == ["mlm_suite_data.json", "tokenizer", "train", "validation"]


# --------------------------------------------------------------------------------------------
# Item 5: every file a run writes can be read by the others on the machine
# --------------------------------------------------------------------------------------------
@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def file_modes(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): stat.S_IMODE(path.stat().st_mode)
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.slow  # four jobs, about 15 s on 2 cores
def test_weights_get_the_mode_of_the_other_files_a_run_writes(umask_022, tiny_model, data_files, tmp_path, capsys):
    """safetensors and transformers' save_pretrained write weights (and a checkpoint's optimizer and RNG states) for
    their owner alone (0600), the other files 0644: every job's files are 0644 under umask 022."""
    assert file_mode() == 0o644
    native = tmp_path / "native"
    make_native_model("roberta", "ForMaskedLM").save_pretrained(native)
    runs = {
        "pretrain": pretrain_argv(tmp_path / "pretrain", data_files["text"], "--save_strategy", "steps",
                                  "--save_steps", "1"),
        "finetune": ["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"],
                     "--output_dir", tmp_path / "finetune", "--save_strategy", "steps", "--save_steps", "1", *FAST],
        "convert": ["convert", native, tmp_path / "convert"],
        "export": ["export-native", tmp_path / "convert", tmp_path / "export"],
    }
    for name, argv in runs.items():
        outcome = run_command(argv, capsys)
        assert outcome.status == 0, (name, outcome.err[-3000:])
        modes = file_modes(tmp_path / name)
        assert any(path.endswith("model.safetensors") for path in modes), name
        assert {path: oct(mode) for path, mode in modes.items() if mode != 0o644} == {}, name


# --------------------------------------------------------------------------------------------
# Item 6: one line each
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["finetune-cls", "prepare-data", "convert"])
def test_an_output_folder_under_a_regular_file_names_the_folder(command, tiny_model, data_files, tmp_path, capsys):
    regular = write_text(tmp_path / "notes.txt", ["a file"])
    output_dir = regular / "runs" / "out"
    argv = {
        "finetune-cls": ["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"],
                         "--output_dir", output_dir, *FAST],
        "prepare-data": ["prepare-data", "--train_file", data_files["text"], "--tokenizer_name", tiny_model,
                         "--output_dir", output_dir],
        "convert": ["convert", tiny_model, output_dir],
    }[command]
    flag = "dst" if command == "convert" else "--output_dir"
    line = assert_refused(run_command(argv, capsys), command, f"{flag} {output_dir} lies under {regular}, which is a file")
    assert "_mlm_suite.lock" not in line
    assert regular.read_text() == "a file\n"


@pytest.mark.parametrize("config_family, weights_family", [("bert", "roberta"), ("roberta", "bert"),
                                                           ("distilbert", "bert"), ("modernbert", "electra")])
def test_a_config_of_one_family_beside_another_s_weights_names_the_folder_and_the_cause(
        config_family, weights_family, tmp_path, capsys):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for family, name in ((config_family, "config.json"), (weights_family, "model.safetensors")):
        make_native_model(family, "ForMaskedLM").save_pretrained(tmp_path / family)
        shutil.copy(tmp_path / family / name, folder / name)
    line = assert_refused(run_command(["convert", folder, tmp_path / "out"], capsys), "convert",
                          f"{folder}: config.json is a config of", f"(model_type {config_family.replace('_', '-')!r})",
                          "their layers are named like", "config.json and the weights must come from one model")
    prefix = {"bert": "bert.", "roberta": "roberta.", "electra": "electra.", "distilbert": "distilbert."}[weights_family]
    assert f"named like {prefix}" in line
    assert not (tmp_path / "out").exists()


def test_convert_refuses_a_tokenizer_larger_than_the_embeddings(minilm_dir, tmp_path, capsys):
    """A folder whose tokenizer has ids past its embeddings converts into one that every job refuses: refused at the
    conversion, with the rule the jobs apply."""
    folder = tmp_path / "native"
    make_native_model("bert", "ForMaskedLM").save_pretrained(folder)  # 99 embeddings
    AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(folder)  # 30,522 tokens
    assert_refused(run_command(["convert", folder, tmp_path / "out"], capsys), "convert",
                   f"the tokenizer ({folder}) has 30522 tokens but the model ({folder}) has vocab_size 99")
    assert not (tmp_path / "out").exists()


def test_config_overrides_that_reshape_a_continued_checkpoint_s_weights_are_one_line(tiny_model, tmp_path, capsys):
    """Before, ``from_pretrained`` raised a size-mismatch RuntimeError with a traceback; a dropout override still works."""
    corpus = write_text(tmp_path / "corpus.txt", make_documents(8))
    output_dir = tmp_path / "out"
    argv = pretrain_argv(output_dir, corpus, "--model_name_or_path", tiny_model, "--config_overrides",
                         "max_position_embeddings=64,hidden_size=48", vocabulary=())
    assert_refused(run_command(argv, capsys), "pretrain", f"changes the shape of weights --model_name_or_path {tiny_model} "
                   "holds (hidden_size 32 → 48, max_position_embeddings 128 → 64): drop those overrides")
    assert not output_dir.exists()


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (and theirs), from /proc."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            pass
    return found + [grandchild for child in found for grandchild in children(child)]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_ctrl_c_during_a_multi_worker_prepare_data_prints_one_line(tiny_model, tmp_path, warm_python):
    """Ctrl-C reaches the terminal's whole process group, datasets' worker processes included: they leave it to the
    job, which prints its one line, not a worker's KeyboardInterrupt traceback."""
    corpus = write_text(tmp_path / "corpus.txt", make_documents(30000, sentences=4))
    output_dir = tmp_path / "prepared"
    argv = [Path(sys.executable).with_name("mlm-suite"), "prepare-data", "--train_file", corpus, "--tokenizer_name",
            tiny_model, "--output_dir", output_dir, "--preprocessing_num_workers", "2"]
    process = warm_python.start(argv)
    try:
        deadline = time.monotonic() + 120
        while len(children(process.pid)) < 2:  # the pool's workers are at work
            assert process.poll() is None, "prepare-data ended before it could be interrupted"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        for pid in [process.pid, *children(process.pid)]:  # what the terminal does on Ctrl-C
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    finally:
        try:
            process.wait(120)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
    result = process.completed()
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == "mlm-suite prepare-data: interrupted"
    assert not output_dir.exists()
