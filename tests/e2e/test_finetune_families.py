"""The fine-tuning jobs on native folders of every family mlm_suite converts (issue 47): ``--model_name_or_path`` a
folder saved by transformers' own class is converted on the fly, as ``pretrain`` converts it
(``mlm_suite_checkpoint``), and the job trains the padding-free mlm_suite model, its head carried over when the
folder has one, with the folder's own tokenizer (a byte-level BPE one here, RoBERTa's kind).

The folders are tiny random fp32 models (tests/helpers.py ``make_native_model``); each run takes 2 steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForSequenceClassification

from mlm_suite import convert_checkpoint
from mlm_suite.conversion import REGISTRY
from tests.helpers import (
    SENTENCES,
    assert_refused,
    label_maps,
    make_documents,
    make_native_model,
    read_json,
    run_command,
    train_byte_level_bpe,
    write_conll,
    write_csv,
)

FAMILIES = [family.model_types[0] for family in REGISTRY]  # every family mlm_suite converts
LABELS = ["negative", "positive"]
STEPS = ["--max_steps", "2", "--per_device_train_batch_size", "4", "--max_seq_length", "32", "--do_eval", "false",
         "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return make_documents(24, sentences=1, seed=5)


@pytest.fixture(scope="module")
def tokenizer(texts):
    return train_byte_level_bpe(texts)


@pytest.fixture(scope="module")
def sentiment_csv(tmp_path_factory, texts) -> Path:
    rows = [(text, LABELS[index % 2]) for index, text in enumerate(texts)]
    return write_csv(tmp_path_factory.mktemp("sentiment") / "train.csv", ["text", "label"], rows)


def native_folder(family: str, head: str, tokenizer, folder: Path, **overrides) -> Path:
    """A random ``<family><head>`` folder of transformers' class with ``tokenizer``: its vocabulary, its pad id, and
    40 positions (RoBERTa's count its offset, pad id + 1, among them)."""
    make_native_model(family, head, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                      **overrides).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def native_classifier(family: str, tokenizer, folder: Path):
    """A fine-tuned sequence classifier of ``family`` (labels negative/positive) saved in ``folder``; returned."""
    native = make_native_model(family, "ForSequenceClassification", vocab_size=len(tokenizer),
                               pad_token_id=tokenizer.pad_token_id, problem_type="single_label_classification",
                               **label_maps(LABELS))
    native.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return native


@pytest.mark.parametrize("family", FAMILIES)
def test_finetune_cls_trains_a_native_classifier_as_mlm_suite_starting_from_its_head(
        family, tokenizer, texts, sentiment_csv, tmp_path, capsys):
    """Two steps at learning rate 0 leave the weights the job starts from: an mlm_suite classifier whose logits equal
    those of transformers' class on the same weights (to 1e-5), its labels kept; the card names the folder given."""
    source = tmp_path / f"native-{family}"
    native = native_classifier(family, tokenizer, source)
    output_dir = tmp_path / "out"
    outcome = run_command(["finetune-cls", "--model_name_or_path", source, "--train_file", sentiment_csv,
                           "--learning_rate", "0", "--output_dir", output_dir, *STEPS], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert f"checkpoint {source} to mlm_suite" in outcome.err  # converted on the fly, as pretrain does

    config = read_json(output_dir / "config.json")
    assert (config["model_type"], config["architectures"]) == ("mlm_suite", ["MlmSuiteForSequenceClassification"])
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    ours = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    batch = tokenizer(texts[:6], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected, found = native(**batch).logits, ours(**batch).logits
    assert (found - expected).abs().max().item() <= 1e-5
    assert f"a local checkpoint (folder `{source.name}`)" in (output_dir / "README.md").read_text(encoding="utf-8")


def test_a_hub_id_of_a_native_classifier_is_fetched_as_from_pretrained_fetches_it_and_converted(
        tokenizer, texts, sentiment_csv, tmp_path, monkeypatch, capsys):
    """``--model_name_or_path user/model`` of a family mlm_suite converts: its files come from the Hub as
    ``from_pretrained`` fetches them, with the Hub flags (here from a Hub cache, offline, at ``--model_revision``
    v1 in ``--cache_dir``; a cache without that revision is refused in one line), then convert as a folder does."""
    import huggingface_hub

    cache, commit = tmp_path / "hub", "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--someone--tiny-roberta"
    native = native_classifier("roberta", tokenizer, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "v1").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    command = ["finetune-cls", "--model_name_or_path", "someone/tiny-roberta", "--cache_dir", cache, "--train_file",
               sentiment_csv, "--learning_rate", "0", "--output_dir", tmp_path / "out", *STEPS]
    outcome = run_command([*command, "--model_revision", "v1"], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert "checkpoint someone/tiny-roberta to mlm_suite" in outcome.err
    ours = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out").eval()
    batch = tokenizer(texts[:6], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert (ours(**batch).logits - native(**batch).logits).abs().max().item() <= 1e-5

    refused = run_command([*command, "--model_revision", "v2", "--output_dir", tmp_path / "other"], capsys)
    assert_refused(refused, "finetune-cls", "revision 'v2' of 'someone/tiny-roberta' is not in the Hub cache "
                   f"({cache}) and the Hub is offline")
    assert len(refused.err.strip().splitlines()) == 1, refused.err[-3000:]
    assert not (tmp_path / "other").exists()


def test_finetune_pair_trains_a_native_masked_lm_with_a_new_head(tokenizer, texts, tmp_path, capsys):
    """A RoBERTa masked LM: its converted encoder gets a new pair head; RoBERTa has no segment embeddings, so the
    pair is read as RoBERTa reads it, ``<s> A </s></s> B </s>``, and the weights learn."""
    source = native_folder("roberta", "ForMaskedLM", tokenizer, tmp_path / "roberta")
    pairs = write_csv(tmp_path / "pairs.csv", ["sentence1", "sentence2", "label"],
                      [(first, second, "yes" if index % 2 else "no")
                       for index, (first, second) in enumerate(zip(texts, texts[1:]))])
    output_dir = tmp_path / "out"
    outcome = run_command(["finetune-pair", "--model_name_or_path", source, "--train_file", pairs,
                           "--learning_rate", "1e-2", "--output_dir", output_dir, *STEPS], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    config = read_json(output_dir / "config.json")
    assert (config["model_type"], config["architectures"]) == ("mlm_suite", ["MlmSuiteForSequenceClassification"])
    assert config["converted_from"] == "roberta" and config["label2id"] == {"no": 0, "yes": 1}
    before = load_file(convert_checkpoint(source, tmp_path / "converted") / "model.safetensors")
    after = load_file(output_dir / "model.safetensors")
    name = "encoder.layers.0.ffn.up.weight"
    assert name in before and not torch.equal(before[name], after[name])


def test_finetune_ner_trains_a_native_masked_lm_with_a_new_token_head_and_a_crf(tokenizer, tmp_path, capsys):
    """An ELECTRA generator: the converted encoder gets a token head over the data's tags, and ``--use_crf`` (an
    mlm_suite head) applies to it."""
    source = native_folder("electra", "ForMaskedLM", tokenizer, tmp_path / "electra")
    train = write_conll(tmp_path / "train.conll", SENTENCES * 3)
    output_dir = tmp_path / "out"
    outcome = run_command(["finetune-ner", "--model_name_or_path", source, "--train_file", train, "--use_crf",
                           "--compare_hf", "false", "--output_dir", output_dir, *STEPS], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    config = read_json(output_dir / "config.json")
    assert (config["model_type"], config["architectures"]) == ("mlm_suite", ["MlmSuiteForTokenClassification"])
    assert config["use_crf"] and set(config["label2id"]) == {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}


def test_max_seq_length_is_checked_against_the_converted_positions(tokenizer, sentiment_csv, tmp_path, capsys):
    """RoBERTa's 40 position embeddings start after its pad id (2 here): 37 positions for tokens, as the converted
    config says, not the 40 of the native ``config.json``."""
    source = native_folder("roberta", "ForMaskedLM", tokenizer, tmp_path / "roberta")
    assert AutoConfig.from_pretrained(source).max_position_embeddings == 40
    output_dir = tmp_path / "out"
    argv = ["finetune-cls", "--model_name_or_path", source, "--train_file", sentiment_csv, "--output_dir", output_dir,
            *STEPS, "--max_seq_length", "38"]
    outcome = run_command(argv, capsys)
    assert_refused(outcome, "finetune-cls", "--max_seq_length 38 exceeds the 37 positions", str(source))
    assert not output_dir.exists()


def test_a_native_config_name_is_refused(tokenizer, sentiment_csv, tiny_model, tmp_path, capsys):
    """The model is an mlm_suite one, so ``--config_name`` must be an mlm_suite config: a native one would build
    transformers' class around mlm_suite weights."""
    source = native_folder("roberta", "ForMaskedLM", tokenizer, tmp_path / "roberta")
    output_dir = tmp_path / "out"
    outcome = run_command(["finetune-cls", "--model_name_or_path", tiny_model, "--config_name", source,
                           "--train_file", sentiment_csv, "--output_dir", output_dir, *STEPS], capsys)
    assert_refused(outcome, "finetune-cls", f"--config_name {source} holds a 'roberta' config",
                   "pass its folder as --model_name_or_path")
    assert not output_dir.exists()


def test_a_run_from_a_native_folder_resumes_from_its_checkpoint(tokenizer, sentiment_csv, tmp_path, capsys):
    """Each run converts the folder anew: a run resumed from another's checkpoint-2 ends with the uninterrupted
    run's weights (to 1e-6)."""
    source = tmp_path / "roberta"
    native_classifier("roberta", tokenizer, source)
    common = ["finetune-cls", "--model_name_or_path", source, "--train_file", sentiment_csv, "--learning_rate", "1e-2",
              *STEPS, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert run_command([*common, "--output_dir", full], capsys).status == 0
    outcome = run_command([*common, "--output_dir", resumed, "--resume_from_checkpoint", full / "checkpoint-2"], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert sorted(path.name for path in resumed.glob("checkpoint-*")) == ["checkpoint-4"]  # it started at step 2
    first, second = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert first.keys() == second.keys()
    assert max(float((first[name] - second[name]).abs().max()) for name in first) < 1e-6
    changed = load_file(full / "checkpoint-2" / "model.safetensors")["classifier.weight"]
    assert not torch.equal(changed, first["classifier.weight"])  # steps 3 and 4 trained
