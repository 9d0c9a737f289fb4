"""Every job takes the flags of transformers' example scripts (``run_mlm.py``, ``run_glue.py``, ``run_ner.py``).

Parse-level checks for every job (the transformers names parse), then one tiny run per family:
``--max_train_samples`` limits the training rows, ``--validation_split_name`` picks a split of another name from a
``DatasetDict`` saved on disk (how the tests feed ``--dataset_name`` offline), and the Hub flags reach
``from_pretrained``. Hub splits stay Arrow and give the same rows
as the same data read from files.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value, load_from_disk
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel

from mlm_suite.data.inputs import readers
from mlm_suite.jobs import finetune_cls, finetune_ner, finetune_pair, finetune_retrieval, prepare_data, pretrain
from mlm_suite.jobs.common import arguments, model_loading
from mlm_suite.data.pretraining.documents import DocumentOrigin, load_pretraining_documents
from mlm_suite.data.pretraining.rows import document_rows
from mlm_suite.jobs.common.arguments import JobTrainingArguments
from mlm_suite.jobs.common.pretraining_arguments import PretrainingArguments
from mlm_suite.jobs.common.running import run_job
from tests.helpers import FAST, job_dataclasses, make_documents, write_text
from tests.helpers import job_args as pretrain_args

FINETUNING = {
    "finetune-ner": finetune_ner,
    "finetune-cls": finetune_cls,
    "finetune-pair": finetune_pair,
    "finetune-retrieval": finetune_retrieval,
}
JOBS = ["pretrain", "prepare-data", *FINETUNING]
PREPARE_REQUIRED = ["--train_file", "corpus.txt", "--output_dir", "prepared"]
HUB_KEYS = ("cache_dir", "revision", "token", "trust_remote_code")
WORDS = "the cat sleeps on a warm mat while the dog runs in the park near a big old tree".split()


def sentence(i: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(4 + i % 3))


def parse(job: str, argv: list[str]) -> tuple:
    """``argv`` parsed as ``mlm-suite <job>`` parses it: the job's argument objects."""
    if job == "pretrain":
        return pretrain.parse_arguments(argv)
    if job == "prepare-data":
        tokenizer = [] if any(flag.startswith("--tokenizer") for flag in argv) else ["--tokenizer_name", "tok"]
        return prepare_data.parse_arguments(PREPARE_REQUIRED + tokenizer + argv)
    return arguments.parse_arguments(job_dataclasses(FINETUNING[job]), argv)


def parser_of(job: str) -> argparse.ArgumentParser:
    if job == "pretrain":
        return arguments.argument_parser((PretrainingArguments, JobTrainingArguments))
    if job == "prepare-data":
        return arguments.argument_parser([prepare_data.PrepareDataArguments, prepare_data.HubArguments])
    return arguments.argument_parser(job_dataclasses(FINETUNING[job]))


def value(parsed: tuple, name: str):
    for group in parsed:
        if hasattr(group, name):
            return getattr(group, name)
    raise AssertionError(f"no argument object has {name!r}")


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------
HUB = ["cache_dir", "model_revision", "token", "trust_remote_code", "use_fast_tokenizer"]
FINETUNING_DATA = ["dataset_name", "dataset_config_name", "train_file", "validation_file", "test_file",
                   "label_column_name", "max_seq_length", "preprocessing_num_workers", "max_train_samples",
                   "max_eval_samples", "max_predict_samples", "validation_split_name", "test_split_name"]
#: The transformers flags each job takes (the others do not apply to it: see the job's docstring).
TRANSFORMERS_FLAGS = {
    "pretrain": HUB + ["model_name_or_path", "config_name", "tokenizer_name", "dataset_name", "dataset_config_name",
                       "train_file", "validation_file", "text_column_name", "max_seq_length", "preprocessing_num_workers",
                       "overwrite_cache", "max_train_samples", "max_eval_samples", "validation_split_percentage",
                       "validation_split_name"],
    "prepare-data": HUB + ["tokenizer_name", "train_file", "validation_file", "text_column_name", "max_seq_length",
                           "preprocessing_num_workers", "max_train_samples", "validation_split_percentage"],
    "finetune-ner": HUB + ["model_name_or_path", "config_name", "tokenizer_name", "text_column_name", *FINETUNING_DATA],
    "finetune-cls": HUB + ["model_name_or_path", "config_name", "tokenizer_name", "text_column_name", "overwrite_cache",
                           *FINETUNING_DATA],
    "finetune-pair": HUB + ["model_name_or_path", "config_name", "tokenizer_name", "overwrite_cache", *FINETUNING_DATA],
    "finetune-retrieval": HUB + ["model_name_or_path", "config_name", "tokenizer_name", "train_file",
                                 "text_column_name", "max_seq_length", "max_train_samples", "max_eval_samples",
                                 "max_predict_samples"],
}
# flag -> (command-line value, parsed value)
SAMPLE_VALUES = {
    "cache_dir": ("hf-cache", "hf-cache"), "model_revision": ("v1.0", "v1.0"), "token": ("hf_abc", "hf_abc"),
    "trust_remote_code": ("true", True), "use_fast_tokenizer": ("false", False), "model_name_or_path": ("m", "m"),
    "config_name": ("cfg", "cfg"), "tokenizer_name": ("tok", "tok"), "dataset_name": ("glue", "glue"),
    "dataset_config_name": ("mnli", "mnli"), "train_file": ("train.txt", "train.txt"),
    "validation_file": ("dev.txt", "dev.txt"), "test_file": ("test.txt", "test.txt"),
    "text_column_name": ("body", "body"), "label_column_name": ("tags", "tags"), "max_seq_length": ("48", 48),
    "preprocessing_num_workers": ("3", 3), "overwrite_cache": ("true", True), "max_train_samples": ("7", 7),
    "max_eval_samples": ("5", 5), "max_predict_samples": ("4", 4), "validation_split_percentage": ("10", 10.0),
    "validation_split_name": ("validation_matched", "validation_matched"),
    "test_split_name": ("test_matched", "test_matched"),
}


@pytest.mark.parametrize("job", JOBS)
def test_every_job_takes_the_transformers_flags(job, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the input files named exist: a job checks them as it parses its flags
    for name in ("train.txt", "dev.txt", "test.txt", PREPARE_REQUIRED[1]):
        (tmp_path / name).write_text("A document.\n")
    for name in ("train_file", "validation_file", "test_file"):
        write_text(tmp_path / SAMPLE_VALUES[name][0], ["a document"])
    flags = TRANSFORMERS_FLAGS[job]
    groups = [flags]
    if job == "pretrain":  # --train_file and --dataset_name exclude each other
        groups = [[name for name in flags if name != "train_file"], [name for name in flags if "dataset" not in name]]
    for group in groups:
        parsed = parse(job, [item for name in group for item in (f"--{name}", SAMPLE_VALUES[name][0])])
        for name in group:
            expected = SAMPLE_VALUES[name][1]
            if (job, name) in (("prepare-data", "train_file"), ("pretrain", "train_file"), ("pretrain", "validation_file")):
                expected = [expected]  # one per file (prepare-data) or per language (pretrain)
            assert value(parsed, name) == expected, name
    defaults = parse(job, [])
    assert value(defaults, "model_revision") == "main" and value(defaults, "trust_remote_code") is False
    assert value(defaults, "cache_dir") is None and value(defaults, "token") is None


# --------------------------------------------------------------------------------------------
# Tiny runs
# --------------------------------------------------------------------------------------------
@pytest.fixture
def recorded(monkeypatch) -> list[tuple[str, str, dict]]:
    """``(class, path, Hub keyword arguments)`` of every config, tokenizer and model ``from_pretrained``.

    The calls then go on without ``trust_remote_code`` (the tests' folders would otherwise load their own copy of
    the modelling code), so only the plumbing is under test.
    """
    calls = []
    depth = [0]  # calls made inside a recorded call (AutoTokenizer loads its config) are the library's, not the job's

    def record(name: str, original, path, args, kwargs):
        if depth[0] == 0:
            calls.append((name, str(path), {key: kwargs.get(key) for key in HUB_KEYS}))
        kwargs.pop("trust_remote_code", None)
        depth[0] += 1
        try:
            return original(path, *args, **kwargs)
        finally:
            depth[0] -= 1

    for cls in (AutoConfig, AutoTokenizer):

        def auto_from_pretrained(path, *args, _original=cls.from_pretrained, _name=cls.__name__, **kwargs):
            return record(_name, _original, path, args, kwargs)

        monkeypatch.setattr(cls, "from_pretrained", auto_from_pretrained)

    # Every model class (MlmSuiteForSequenceClassification, ...), recorded under its own name.
    original_model = PreTrainedModel.from_pretrained.__func__

    def model_from_pretrained(model_class, path, *args, **kwargs):
        return record(model_class.__name__, functools.partial(original_model, model_class), path, args, kwargs)

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(model_from_pretrained))
    return calls


HUB_FLAGS = ["--cache_dir", "{cache}", "--model_revision", "main", "--trust_remote_code", "true"]


def hub_flags(tmp_path: Path) -> list[str]:
    return [flag.format(cache=tmp_path / "hf-cache") for flag in HUB_FLAGS]


def assert_hub_flags_reached(calls, tmp_path: Path, classes: set[str]) -> None:
    expected = {"cache_dir": str(tmp_path / "hf-cache"), "revision": "main", "token": None, "trust_remote_code": True}
    assert {name for name, _, _ in calls} >= classes, calls
    for name, path, kwargs in calls:
        if "minilm" in path.lower() or "all-MiniLM" in path:
            continue  # the job's own resources (the default tokenizer of a trained vocabulary ...) are not the user's
        assert kwargs == expected, (name, path, kwargs)


def save_classification_data(folder: Path) -> Path:
    """Splits train (20), validation (3), validation_matched (5) and test_matched (6); ClassLabel labels."""
    features = Features({"text": Value("string"), "label": ClassLabel(names=["neg", "pos"])})
    sizes = {"train": 20, "validation": 3, "validation_matched": 5, "test_matched": 6}
    splits, start = {}, 0
    for name, size in sizes.items():
        rows = range(start, start + size)
        splits[name] = Dataset.from_dict({"text": [sentence(i) for i in rows], "label": [i % 2 for i in rows]},
                                         features=features)
        start += size
    DatasetDict(splits).save_to_disk(str(folder))
    return folder


def test_classification_split_names_sample_limits_and_hub_flags(tiny_model, tmp_path, recorded):
    data = save_classification_data(tmp_path / "data")
    out = tmp_path / "out"
    finetune_cls.main([
        "--model_name_or_path", str(tiny_model), "--dataset_name", str(data), "--output_dir", str(out),
        "--validation_split_name", "validation_matched", "--test_split_name", "test_matched",
        "--max_train_samples", "8", "--max_predict_samples", "4", *hub_flags(tmp_path), *FAST,
    ])  # fmt: skip
    metrics = json.loads((out / "all_results.json").read_text())
    assert metrics["train_samples"] == 8
    assert metrics["eval_n_examples"] == 5  # validation_matched, not validation (3 rows)
    assert metrics["test_n_examples"] == 4  # test_matched (6 rows) cut to --max_predict_samples
    assert_hub_flags_reached(recorded, tmp_path, {"AutoConfig", "AutoTokenizer", "MlmSuiteForSequenceClassification"})


def test_a_split_name_the_dataset_lacks_is_a_one_line_user_error(tiny_model, tmp_path, capsys):
    data = save_classification_data(tmp_path / "data")
    argv = ["--model_name_or_path", str(tiny_model), "--dataset_name", str(data), "--output_dir", str(tmp_path / "o"),
            "--validation_split_name", "validation_mismatched"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run_job(finetune_cls.main, argv, prog="mlm-suite finetune-cls", debug=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1, err
    assert err[0] == (f"mlm-suite finetune-cls: error: --validation_split_name validation_mismatched: {data} has no such "
                      "split; its splits are ['train', 'validation', 'validation_matched', 'test_matched']")
    assert not (tmp_path / "o").exists()


def test_hub_splits_stay_arrow_and_equal_the_same_rows_read_from_files(tmp_path):
    data = save_classification_data(tmp_path / "data")
    args = arguments.parse_arguments(job_dataclasses(finetune_cls),
                                      ["--dataset_name", str(data), "--test_split_name", "test_matched"])[1]
    splits, description = readers.load_labelled_text_splits(["text"], args.label_column_name, 0, lambda: None,
                                                            **args.data_source())
    assert description.endswith("(test split `test_matched`)"), description
    assert isinstance(splits["train"], readers.TextSplit)
    assert isinstance(splits["train"].texts, Dataset) and splits["train"].texts.column_names == ["text"]
    files = {}
    for split in ("train", "validation", "test_matched"):
        rows = [{"text": row["text"], "label": ["neg", "pos"][row["label"]]} for row in load_from_disk(str(data))[split]]
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(row) + "\n" for row in rows))
    file_args = arguments.parse_arguments(job_dataclasses(finetune_cls), [
        "--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
        "--test_file", str(files["test_matched"])])[1]  # fmt: skip
    from_files, _ = readers.load_labelled_text_splits(["text"], file_args.label_column_name, 0, lambda: None,
                                                      **file_args.data_source())
    for split in ("train", "validation", "test"):
        listed = readers.TextSplit.of(from_files[split], ["text"])
        assert splits[split].texts["text"] == listed.texts["text"] and splits[split].labels == listed.labels
        assert splits[split].head(2).texts["text"] == listed.texts["text"][:2]


def save_ner_data(folder: Path) -> Path:
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    features = Features({"tokens": List(Value("string")), "ner_tags": List(ClassLabel(names=tags))})
    rows = [("john lives in paris".split(), [1, 0, 0, 3]), ("mary smith works in new york".split(), [1, 2, 0, 0, 3, 4]),
            ("the cat sleeps".split(), [0, 0, 0]), ("anna met john in berlin".split(), [1, 0, 1, 0, 3])]
    splits = {"train": rows * 3, "dev": rows[:2], "heldout": rows[1:]}
    DatasetDict({name: Dataset.from_dict({"tokens": [t for t, _ in part], "ner_tags": [g for _, g in part]},
                                         features=features) for name, part in splits.items()}).save_to_disk(str(folder))
    return folder


def test_ner_split_names_and_sample_limits(tiny_model, tmp_path):
    data = save_ner_data(tmp_path / "data")
    out = tmp_path / "out"
    finetune_ner.main(["--model_name_or_path", str(tiny_model), "--dataset_name", str(data), "--output_dir", str(out),
                       "--validation_split_name", "dev", "--test_split_name", "heldout", "--max_train_samples", "5",
                       "--compare_hf", "false", *FAST])
    metrics = json.loads((out / "all_results.json").read_text())
    assert metrics["train_samples"] == 5
    assert metrics["eval_n_sentences"] == 2 and metrics["test_n_sentences"] == 3


@pytest.mark.multiprocess
def test_tokenising_on_several_processes_gives_the_same_rows(tokenizer):
    sentences = [(sentence(i).split(), ["O"] * len(sentence(i).split())) for i in range(40)]
    one = finetune_ner.encode(sentences, tokenizer, {"O": 0}, "first", 6)
    two = finetune_ner.encode(sentences, tokenizer, {"O": 0}, "first", 6, num_proc=2)
    assert one.to_dict() == two.to_dict() and len(one) > len(sentences)  # windows: several rows per sentence

    texts = Dataset.from_dict({"text": make_documents(60, seed=3)})
    alone = document_rows(texts, tokenizer, 24, packing=True)
    parallel = document_rows(texts, tokenizer, 24, packing=True, num_proc=2)
    assert parallel.column_names == alone.column_names
    for column in alone.column_names:
        assert parallel[column] == alone[column], column


def test_pretrain_split_names_sample_limits_and_hub_flags(tmp_path, minilm_dir, recorded):
    data = tmp_path / "data"
    DatasetDict({
        "train": Dataset.from_dict({"body": make_documents(30, seed=1), "id": list(range(30))}),
        "heldout": Dataset.from_dict({"body": make_documents(6, seed=2), "id": list(range(6))}),
    }).save_to_disk(str(data))  # fmt: skip
    out = tmp_path / "out"
    assert pretrain.main(pretrain_args(
        out, "--dataset_name", str(data), "--validation_split_name", "heldout", "--text_column_name", "body",
        "--tokenizer_name", str(minilm_dir), "--max_train_samples", "5", "--max_steps", "1", "--eval_strategy", "no",
        "--fill_mask_probes", "0", *hub_flags(tmp_path),
    )) == 0  # fmt: skip
    assert json.loads((out / "train_results.json").read_text())["train_samples"] == 5
    tokenizer_calls = [kwargs for name, path, kwargs in recorded if name == "AutoTokenizer" and path == str(minilm_dir)]
    assert tokenizer_calls == [{"cache_dir": str(tmp_path / "hf-cache"), "revision": "main", "token": None,
                                "trust_remote_code": True}]
    corpus = pretrain.open_corpus(pretrain.plan_run(pretrain_args(
        out, "--dataset_name", str(data), "--validation_split_name", "heldout", "--text_column_name", "body"
    )))  # fmt: skip
    assert corpus.validation["text"] == make_documents(6, seed=2)  # the split named, not 5 % of train
    assert corpus.held_out_split == "heldout"
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "split: heldout\n" in card.split("---\n")[1]  # the model-index names the split scored
    rows = corpus.eval_rows(AutoTokenizer.from_pretrained(minilm_dir))
    assert json.loads((out / "eval_results.json").read_text())["eval_samples"] == len(rows)


def test_pretrain_hub_documents_equal_the_same_documents_from_a_file(tmp_path):
    documents = make_documents(20, seed=4)
    data = tmp_path / "data"
    DatasetDict({"train": Dataset.from_dict({"text": documents[:10] + ["  ", ""] + documents[10:]})}).save_to_disk(str(data))
    hub, _, held_out_split = load_pretraining_documents(DocumentOrigin(dataset_name=str(data)))
    assert held_out_split is None  # no validation split: 5 % of train held out
    local, _, _ = load_pretraining_documents(DocumentOrigin(train_file=str(write_text(tmp_path / "c.txt", documents))))
    for split in ("train", "validation"):
        assert hub[split]["text"] == local[split]["text"], split  # blank documents dropped, same seeded hold-out


def test_prepare_data_sample_limit_and_hub_flags(tmp_path, minilm_dir, recorded):
    corpus = write_text(tmp_path / "corpus.txt", make_documents(40, seed=5))
    output = tmp_path / "prepared"
    assert prepare_data.main(["--train_file", str(corpus), "--tokenizer_name", str(minilm_dir), "--output_dir", str(output),
                              "--preprocessing_num_workers", "1", "--max_seq_length", "32", "--max_train_samples", "3",
                              *hub_flags(tmp_path)]) == 0
    metadata = json.loads((output / "mlm_suite_data.json").read_text())
    assert metadata["train_rows"] == 3
    assert [kwargs for name, _, kwargs in recorded if name == "AutoTokenizer"] == [
        {"cache_dir": str(tmp_path / "hf-cache"), "revision": "main", "token": None, "trust_remote_code": True}]


def test_retrieval_column_flag_sample_limit_and_hub_flags(tiny_model, tmp_path, recorded):
    texts = [sentence(i) for i in range(12)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"query": texts[i], "document": texts[i + 1]}) + "\n" for i in range(10)))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "body": text}) + "\n" for i, text in enumerate(texts)))
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"query": texts[i], "document_id": str(i + 1)}) + "\n" for i in range(4)))
    out = tmp_path / "out"
    finetune_retrieval.main([
        "--model_name_or_path", str(tiny_model), "--train_file", str(train), "--corpus_file", str(corpus),
        "--queries_file", str(queries), "--text_column_name", "body", "--max_train_samples", "6", "--output_dir", str(out),
        *hub_flags(tmp_path), *FAST,
    ])  # fmt: skip
    metrics = json.loads((out / "all_results.json").read_text())
    assert metrics["train_samples"] == 6
    assert_hub_flags_reached(recorded, tmp_path, {"AutoConfig", "AutoTokenizer", "MlmSuiteForSentenceEmbedding"})


def test_config_name_is_the_config_a_fine_tuning_job_loads(tiny_model, tmp_path, recorded):
    config_folder = tmp_path / "config"
    AutoConfig.from_pretrained(tiny_model).save_pretrained(config_folder)
    recorded.clear()
    args = arguments.parse_arguments(job_dataclasses(finetune_cls),
                                      ["--model_name_or_path", str(tiny_model), "--config_name", str(config_folder)])[0]
    model_loading.load_config(str(tiny_model), args)
    assert [path for name, path, _ in recorded if name == "AutoConfig"] == [str(config_folder)]


def test_pretrain_builds_the_model_of_config_name(tiny_model, tmp_path, minilm_dir, tokenizer, capsys):
    plan = pretrain.plan_run(["--config_name", str(tiny_model), "--config_preset", "mini"])
    config, _ = pretrain.build_config(plan, tokenizer)
    assert (config.num_hidden_layers, config.hidden_size) == (2, 32)  # tiny_model's, not the preset's
    described = plan.describe()
    assert f"from scratch, config {tiny_model}" in described and "ignored: --config_preset" in described
    with pytest.raises(ValueError, match="holds a 'bert' config"):  # refused by the plan, before the output folder
        pretrain.plan_run(["--config_name", str(minilm_dir)])
