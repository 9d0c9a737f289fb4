"""The fine-tuning jobs end to end on tiny files, with a tiny mlm_suite model and the MiniLM tokenizer.

Each run trains 1–2 steps: these tests check plumbing (outputs, configs, parsing, errors,
scheme handling, distributed evaluation), not accuracy.
"""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModelForTokenClassification,
    AutoTokenizer,
    BertTokenizerLegacy,
    Trainer,
    TrainingArguments,
)

from mlm_suite import MlmSuiteForTokenClassification
from mlm_suite.data.inputs import downloads
from mlm_suite.data.inputs.builtin import review_coherence_splits
from mlm_suite.jobs import finetune_cls, finetune_ner, finetune_pair, seeds
from mlm_suite.data.finetuning.labels import infer_task_type
from mlm_suite.data.inputs.readers import TaggedSentences, read_conll, split_80_10_10
from mlm_suite.jobs.common.finetune_training import save_everything
from mlm_suite.data.finetuning.tagging import InvalidTagSequenceError, settle_scheme, validate_tags
from tests.helpers import (
    FAST,
    SENTENCES,
    assert_linked_png,
    assert_valid_model_card,
    make_tiny_config,
    polarity_rows,
    results_of,
    write_conll,
    write_jsonl,
    write_pairs,
)


def results(folder: Path) -> dict:
    return json.loads((folder / "all_results.json").read_text())


def config_of(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def n_entities(sentences) -> int:
    return sum(tag.startswith("B-") for _, tags in sentences for tag in tags)


# --------------------------------------------------------------------------------------------
# Token classification
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ner_run(tiny_model, tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("ner_data")
    out = tmp_path_factory.mktemp("ner_out")
    finetune_ner.main([
        "--model_name_or_path", str(tiny_model),
        "--train_file", str(write_conll(data / "train.conll", SENTENCES * 3)),
        "--validation_file", str(write_conll(data / "dev.conll", SENTENCES[:5])),
        "--test_file", str(write_conll(data / "test.conll", SENTENCES[2:])),
        "--output_dir", str(out), *FAST,
    ])
    return out


@pytest.mark.slow
def test_compare_hf_trains_the_baseline_and_tests_the_difference(tiny_model, tmp_path):
    out = tmp_path / "out"
    finetune_ner.main([
        "--model_name_or_path", str(tiny_model),
        "--train_file", str(write_conll(tmp_path / "train.conll", SENTENCES * 3)),
        "--validation_file", str(write_conll(tmp_path / "dev.conll", SENTENCES[:5])),
        "--test_file", str(write_conll(tmp_path / "test.conll", SENTENCES[2:])),
        "--compare_hf", "--output_dir", str(out), *FAST,
    ])
    metrics = results(out)
    for split in ("eval", "test"):
        assert 0.0 <= metrics[f"hf_{split}_f1"] <= 1.0
        assert metrics[f"{split}_f1_delta_vs_hf"] == pytest.approx(metrics[f"{split}_f1"] - metrics[f"hf_{split}_f1"])
        assert 0.0 <= metrics[f"{split}_bootstrap_p_value"] <= 1.0
    assert "paired bootstrap" in (out / "README.md").read_text()
    # hf_baseline/ (the baseline Trainer's output_dir) holds the baseline's results, not nothing
    baseline = results(out / "hf_baseline")
    assert {key: baseline[key] for key in ("hf_eval_f1", "hf_test_f1", "eval_f1_delta_vs_hf")} == {
        key: metrics[key] for key in ("hf_eval_f1", "hf_test_f1", "eval_f1_delta_vs_hf")
    }


def test_ner_outputs(ner_run):
    names = {path.name for path in ner_run.iterdir()}
    assert {"model.safetensors", "config.json", "modeling_mlm_suite.py", "tokenizer.json", "README.md",
            "all_results.json"} <= names
    metrics = results(ner_run)
    for split in ("eval", "test"):
        for key in ("f1", "precision", "recall", "accuracy", "conlleval_f1", "strict_f1"):
            assert 0.0 <= metrics[f"{split}_{key}"] <= 1.0
    # every sentence and gold entity scored exactly once, at word level
    assert metrics["eval_n_sentences"] == 5 and metrics["eval_gold_entities"] == n_entities(SENTENCES[:5])
    assert metrics["test_n_sentences"] == 5 and metrics["test_gold_entities"] == n_entities(SENTENCES[2:])
    assert "hf_eval_f1" not in metrics  # --compare_hf is off for user data

    config = config_of(ner_run)
    assert config["tagging_scheme"] == "BIO"
    assert config["id2label"] == {"0": "O", "1": "B-LOC", "2": "I-LOC", "3": "B-PER", "4": "I-PER"}
    assert config["label2id"] == {label: int(i) for i, label in config["id2label"].items()}
    assert config["auto_map"]["AutoModelForTokenClassification"] == "modeling_mlm_suite.MlmSuiteForTokenClassification"
    card = (ner_run / "README.md").read_text()
    assert "$" not in card
    assert "B-LOC" in card and "**BIO**" in card and "conlleval" in card
    assert f"{metrics['eval_f1']:.4f}" in card
    metadata = assert_valid_model_card(card)  # the metadata: the licence, the task and its headline scores
    assert (metadata["pipeline_tag"], metadata["license"]) == ("token-classification", "apache-2.0")
    assert "base_model" not in metadata and "datasets" not in metadata  # a local folder, local files
    scores = results_of(metadata)
    for split, prefix in (("validation", "eval"), ("test", "test")):
        assert scores[(split, "entity F1 (conlleval)")] == metrics[f"{prefix}_f1"]
        assert scores[(split, "token accuracy")] == metrics[f"{prefix}_accuracy"]
    # the pictures show the scores reported, of the final model
    for split, prefix in (("validation", "eval"), ("test", "test")):
        caption = assert_linked_png(ner_run, f"per_type_scores_{split}.png")
        assert f"{split} split (conlleval mode, BIO; micro F1 {metrics[f'{prefix}_f1']:.4f})" in caption

    reloaded = AutoModelForTokenClassification.from_pretrained(ner_run)
    assert isinstance(reloaded, MlmSuiteForTokenClassification) and reloaded.config.tagging_scheme == "BIO"


def test_read_conll_skips_docstart_and_takes_first_and_last_columns(tmp_path):
    path = tmp_path / "x.conll"
    path.write_text("-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n\n-DOCSTART- -X- O O\n\n"
                    "Peter NNP B-NP B-PER\n")
    assert read_conll(path) == [(["EU", "rejects"], ["B-ORG", "O"]), (["Peter"], ["B-PER"])]
    path.write_text("EU B-ORG\nrejects\n")
    with pytest.raises(ValueError, match=r"x.conll line 2: expected 'token ... tag'"):
        read_conll(path)


IOB1 = [
    ("john lives in paris".split(), ["I-PER", "O", "O", "I-LOC"]),
    ("paris london are cities".split(), ["I-LOC", "B-LOC", "O", "O"]),  # B- separates adjacent LOCs
    ("mary smith works in rome".split(), ["I-PER", "I-PER", "O", "O", "I-LOC"]),
]


def test_iob1_file_is_detected_and_converted(tiny_model, tmp_path):
    train = write_conll(tmp_path / "train.conll", IOB1 * 4)
    finetune_ner.main(["--model_name_or_path", str(tiny_model), "--train_file", str(train), "--convert_to", "BIO",
                       "--output_dir", str(tmp_path / "out"), *FAST])
    config = config_of(tmp_path / "out")
    assert config["tagging_scheme"] == "BIO"
    assert set(config["label2id"]) == {"O", "B-LOC", "I-LOC", "B-PER", "I-PER"}
    assert "converted from IOB1" in (tmp_path / "out" / "README.md").read_text()
    sources = {"train": TaggedSentences("f", [(words, list(tags)) for words, tags in IOB1])}
    assert settle_scheme(sources, None, "BIO") == ("IOB1", "BIO")
    assert sources["train"].sentences[1][1] == ["B-LOC", "B-LOC", "O", "O"]


def test_ner_input_errors(tiny_model, tmp_path):
    base = ["--model_name_or_path", str(tiny_model), "--output_dir", str(tmp_path / "out"), *FAST]
    bad_counts = write_jsonl(tmp_path / "bad.jsonl", [{"tokens": ["a", "b"], "ner_tags": ["O", "O"]},
                                                      {"tokens": ["john", "x", "y"], "ner_tags": ["B-PER", "O"]}])
    with pytest.raises(ValueError, match=r"bad.jsonl line 2: 3 tokens but 2 tags"):
        finetune_ner.main(["--train_file", str(bad_counts), *base])

    conll = write_conll(tmp_path / "train.conll", SENTENCES)
    with pytest.raises(ValueError, match=r"train.conll line 6: tag 'B-LOC' is not in the label list"):
        finetune_ner.main(["--train_file", str(conll), "--label_list", "O", "B-PER", "I-PER", *base])

    iob1 = write_conll(tmp_path / "iob1.conll", IOB1)
    with pytest.raises(InvalidTagSequenceError, match=r"iob1.conll line 3: I-PER after O is not allowed in BIO"):
        finetune_ner.main(["--train_file", str(iob1), "--tagging_scheme", "BIO", *base])


def test_slow_tokenizer_is_refused(tiny_model, tmp_path):
    folder = tmp_path / "slow"
    folder.mkdir()
    for path in tiny_model.iterdir():
        if not path.name.startswith("tokenizer"):
            (folder / path.name).write_bytes(path.read_bytes())
    BertTokenizerLegacy(vocab_file=str(downloads.minilm_dir() / "vocab.txt")).save_pretrained(folder)
    assert not AutoTokenizer.from_pretrained(folder).is_fast
    conll = write_conll(tmp_path / "train.conll", SENTENCES)
    with pytest.raises(ValueError, match="slow .*tokenizer.*fast tokenizer"):
        finetune_ner.main(["--model_name_or_path", str(folder), "--train_file", str(conll),
                           "--output_dir", str(tmp_path / "out"), *FAST])


def test_finetuned_checkpoint_with_other_labels(ner_run, tmp_path):
    org = [("google hired anna".split(), ["B-ORG", "O", "B-PER"])] * 10
    train = write_conll(tmp_path / "org.conll", org)
    args = ["--model_name_or_path", str(ner_run), "--train_file", str(train), "--output_dir", str(tmp_path / "out"), *FAST]
    with pytest.raises(ValueError, match=r"lack \['B-ORG', 'I-ORG'\].*--ignore_mismatched_sizes"):
        finetune_ner.main(args)
    finetune_ner.main(args + ["--ignore_mismatched_sizes"])
    assert set(config_of(tmp_path / "out")["label2id"]) == {"O", "B-ORG", "I-ORG", "B-PER", "I-PER"}


def test_default_label_names_warn_on_save(tmp_path):
    torch.manual_seed(0)

    model = MlmSuiteForTokenClassification(make_tiny_config(num_labels=3))
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to="none"))
    with pytest.warns(UserWarning, match=r"placeholder label names \['LABEL_0', 'LABEL_1', 'LABEL_2'\]"):
        save_everything(trainer, {})
    assert (tmp_path / "model.safetensors").exists()
    model.config.id2label = {0: "O", 1: "B-X", 2: "I-X"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_everything(trainer, {})


def test_crf_trains_and_predicts_valid_bio(tiny_model, tmp_path):
    conll = write_conll(tmp_path / "train.conll", SENTENCES * 4)
    out = tmp_path / "out"
    finetune_ner.main(["--model_name_or_path", str(tiny_model), "--train_file", str(conll), "--use_crf",
                       "--output_dir", str(out), *FAST, "--max_steps", "3", "--learning_rate", "1e-2"])
    metrics = results(out)
    assert torch.isfinite(torch.tensor(metrics["train_loss"]))
    model = AutoModelForTokenClassification.from_pretrained(out).eval()
    assert model.config.use_crf and model.config.tagging_scheme == "BIO"
    # Unconstrained, these emissions would put I- tags right after O.
    torch.manual_seed(1)
    logits = torch.randn(6, 10, model.config.num_labels)
    logits[..., [model.config.label2id["I-PER"], model.config.label2id["I-LOC"]]] += 3.0
    mask = torch.ones(6, 10, dtype=torch.bool)
    mask[:, 7:] = False
    paths = model.decode(logits, mask)
    for index, path in enumerate(paths):
        assert len(path) == 7
        validate_tags([model.config.id2label[i] for i in path], "BIO", sentence_index=index)
    assert any(model.config.id2label[i] != "O" for path in paths for i in path)


# --------------------------------------------------------------------------------------------
# Sequence and pair classification
# --------------------------------------------------------------------------------------------
def test_classification_job(tiny_model, tmp_path):
    rows = polarity_rows(1990, 2030)
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    out = tmp_path / "out"
    finetune_cls.main(["--model_name_or_path", str(tiny_model), "--train_file", str(train),
                                  "--text_column_name", "review", "--output_dir", str(out), *FAST])
    metrics = results(out)
    for key in ("eval_accuracy", "eval_f1", "test_accuracy", "test_f1"):
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["eval_n_examples"] == 4 and metrics["test_n_examples"] == 4  # 40 rows split 80/10/10
    config = config_of(out)
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["architectures"] == ["MlmSuiteForSequenceClassification"]
    card = (out / "README.md").read_text()
    assert "$" not in card and "negative" in card and "eval_accuracy" in card
    assert_confusion_matrices(out, metrics)
    metadata = assert_valid_model_card(card)
    assert (metadata["pipeline_tag"], metadata["license"], metadata["metrics"]) == ("text-classification", "apache-2.0",
                                                                                    ["accuracy", "f1"])
    assert results_of(metadata) == {(split, name): metrics[f"{prefix}_{key}"] for split, prefix in
                                    (("validation", "eval"), ("test", "test")) for key, name in
                                    (("accuracy", "accuracy"), ("f1", "macro F1"))}
    assert {r["dataset"]["name"] for r in metadata["model-index"][0]["results"]} == {"train.jsonl (a local file)"}


def assert_confusion_matrices(out: Path, metrics: dict) -> None:
    """A confusion matrix per evaluated split, shown in the card, of the examples and accuracy reported."""
    for split, prefix in (("validation", "eval"), ("test", "test")):
        caption = assert_linked_png(out, f"confusion_matrix_{split}.png")
        assert f"{split} split ({metrics[f'{prefix}_n_examples']} examples, accuracy {metrics[f'{prefix}_accuracy']:.4f})" in caption


def test_early_stopping_in_a_finetuning_job(tiny_model, tmp_path):
    """Learning rate 0: validation accuracy never beats the first evaluation, so patience 2 stops at the third
    (step 3 of 50); only the best checkpoint is kept, and the reported score is the best model's."""
    train = write_jsonl(tmp_path / "train.jsonl", polarity_rows(1990, 2030))
    out = tmp_path / "out"
    finetune_cls.main(["--model_name_or_path", str(tiny_model), "--train_file", str(train),
                                  "--text_column_name", "review", "--output_dir", str(out), "--max_steps", "50",
                                  "--learning_rate", "0", "--eval_strategy", "steps", "--eval_steps", "1",
                                  "--early_stopping_patience", "2", "--per_device_train_batch_size", "4",
                                  "--report_to", "none", "--disable_tqdm", "true"])
    metrics = results(out)
    assert metrics["epoch"] == pytest.approx(3 / 8)  # 32 training rows in batches of 4: stopped after step 3
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-1"]  # the best is kept
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["best_metric"] == metrics["eval_accuracy"]


@pytest.mark.slow
def test_intermediate_stage_equals_finetuning_its_checkpoint(tiny_model, tmp_path):
    """Intermediate data then the task, in one run, is the task trained from the intermediate checkpoint."""
    # the intermediate file is also the second run's training file: both classes (positive before 2000, negative after)
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", rows)
             for name, rows in {"train": polarity_rows(1990, 2020), "dev": polarity_rows(100, 108),
                                "test": polarity_rows(3000, 3008),
                                "intermediate": polarity_rows(500, 510) + polarity_rows(2500, 2510)}.items()}
    common = ["--text_column_name", "review", "--label_list", "negative", "positive",
              "--validation_file", str(files["dev"]), *FAST]
    task = ["--train_file", str(files["train"]), "--test_file", str(files["test"])]
    both, stage, then = tmp_path / "both", tmp_path / "stage", tmp_path / "then"
    finetune_cls.main(["--model_name_or_path", str(tiny_model), *task, *common, "--output_dir", str(both),
                                  "--intermediate_train_file", str(files["intermediate"])])
    finetune_cls.main(["--model_name_or_path", str(tiny_model), "--train_file", str(files["intermediate"]),
                                  "--do_predict", "false", *common, "--output_dir", str(stage)])
    finetune_cls.main(["--model_name_or_path", str(stage), *task, *common, "--output_dir", str(then)])

    combined, staged, continued = results(both), results(stage), results(then)
    assert combined["intermediate_train_samples"] == 20 and combined["train_samples"] == 30
    assert combined["intermediate_eval_loss"] == pytest.approx(staged["eval_loss"], abs=1e-5)
    for key in ("train_loss", "eval_loss", "test_loss"):
        assert combined[key] == pytest.approx(continued[key], abs=1e-5), key
    assert combined["eval_loss"] != pytest.approx(staged["eval_loss"], abs=1e-5)  # the task stage trained
    card = (both / "README.md").read_text()
    assert "intermediate data" in card and "intermediate_eval_accuracy" in card


def test_intermediate_input_errors(tiny_model, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", polarity_rows(1990, 2030))
    other_labels = write_jsonl(tmp_path / "other.jsonl", [{"review": "so so", "label": "neutral"}])
    base = ["--model_name_or_path", str(tiny_model), "--train_file", str(train), "--text_column_name", "review",
            "--output_dir", str(tmp_path / "out"), *FAST]
    with pytest.raises(ValueError, match=r"\['neutral'\] of the intermediate data"):
        finetune_cls.main([*base, "--intermediate_train_file", str(other_labels)])
    assert not (tmp_path / "out" / "all_results.json").exists()


@pytest.mark.slow
def test_seeds_runs_the_job_per_seed_and_summarizes(tiny_model, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", polarity_rows(1980, 2020))
    out = tmp_path / "seeds"
    seeds.main(["finetune-cls", "--seeds", "3", "5", "--output_dir", str(out), "--",
                "--model_name_or_path", str(tiny_model), "--train_file", str(train), "--text_column_name", "review",
                *FAST])
    runs = {seed: results(out / f"seed_{seed}") for seed in (3, 5)}
    summary = json.loads((out / "seed_summary.json").read_text())
    assert summary["metric"] == "accuracy" and set(summary["per_seed"]) == {"3", "5"}
    for key in ("eval_accuracy", "test_accuracy"):
        values = [runs[3][key], runs[5][key]]
        assert summary["summary"][key]["mean"] == pytest.approx(sum(values) / 2)
        assert summary["summary"][key]["std"] == pytest.approx(abs(values[0] - values[1]) / 2 ** 0.5)
    assert config_of(out / "seed_3")["id2label"] == {"0": "negative", "1": "positive"}
    assert "mean" in capsys.readouterr().out
    caption = assert_linked_png(out, "seed_scores.png")
    assert caption == "finetune-cls: accuracy per seed, mean ± sample sd over 2 seeds"
    card = (out / "README.md").read_text()
    assert "mlm-suite seeds finetune-cls --seeds 3 5 --output_dir" in card
    mean, std = summary["summary"]["test_accuracy"]["mean"], summary["summary"]["test_accuracy"]["std"]
    assert f"| 3 | {runs[3]['eval_accuracy']:.4f} | {runs[3]['test_accuracy']:.4f} |" in card
    assert f"{mean:.4f} ± {std:.4f} |" in card
    with pytest.raises(ValueError, match="--seed is set per run"):
        seeds.main(["finetune-cls", "--seeds", "1", "--output_dir", str(out), "--", "--seed", "4"])
    with pytest.raises(ValueError, match="repeats"):
        seeds.main(["finetune-cls", "--seeds", "1", "1", "--output_dir", str(out)])


def test_pair_classification_job(tiny_model, tmp_path):
    train = write_pairs(tmp_path / "pairs.csv", ["entailment", "neutral", "contradiction"] * 10)
    out = tmp_path / "out"
    finetune_pair.main(["--model_name_or_path", str(tiny_model), "--train_file", str(train),
                        "--sentence1_column", "premise", "--sentence2_column", "hypothesis",
                        "--output_dir", str(out), *FAST])
    metrics = results(out)
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0 and "test_f1" in metrics
    config = config_of(out)
    assert config["architectures"] == ["MlmSuiteForPairClassification"]
    assert config["auto_map"]["AutoModelForSequenceClassification"] == "modeling_mlm_suite.MlmSuiteForPairClassification"
    assert set(config["label2id"]) == {"contradiction", "entailment", "neutral"}
    assert "$" not in (out / "README.md").read_text()
    assert_confusion_matrices(out, metrics)


def test_pair_regression_job(tiny_model, tmp_path):
    train = write_pairs(tmp_path / "sts.csv", [f"{score:.2f}" for score in random.Random(0).choices(range(6), k=30)])
    out = tmp_path / "out"
    finetune_pair.main(["--model_name_or_path", str(tiny_model), "--train_file", str(train), "--task_type", "regression",
                        "--sentence1_column", "premise", "--sentence2_column", "hypothesis",
                        "--output_dir", str(out), *FAST])
    metrics = results(out)
    assert {"eval_pearson", "eval_spearman", "eval_mse", "test_pearson"} <= set(metrics)
    config = config_of(out)
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "score"}
    assert not list(out.glob("*.png")) and "### Figures" not in (out / "README.md").read_text()  # no classes to confuse
    metadata = assert_valid_model_card((out / "README.md").read_text())
    assert "mse" in metadata["metrics"] and set(metadata["metrics"]) <= {"pearsonr", "spearmanr", "mse"}


def test_coherence_pairs_are_balanced_and_split_by_review(monkeypatch):
    reviews = [(1, "\n".join(f"r{r}s{i} ." for i in range(6))) for r in range(40)]
    monkeypatch.setattr(downloads, "pang_lee_reviews", lambda: reviews)
    splits = review_coherence_splits(3, train_pairs=60, eval_pairs=10)
    def review_of(sentence: str) -> str:
        return sentence.split("s")[0]

    seen: dict[str, set[str]] = {}
    for split, examples in splits.items():
        assert len(examples) == (60 if split == "train" else 10)
        assert sum(e["label"] == "follows" for e in examples) == len(examples) // 2
        for e in examples:
            a, b = e["sentence1"].split()[0], e["sentence2"].split()[0]
            if e["label"] == "follows":
                assert review_of(a) == review_of(b) and int(b.split("s")[1]) == int(a.split("s")[1]) + 1
            else:
                assert review_of(a) != review_of(b)
        seen[split] = {review_of(e[c].split()[0]) for e in examples for c in ("sentence1", "sentence2")}
    assert not seen["train"] & seen["validation"] and not seen["train"] & seen["test"]
    assert not seen["validation"] & seen["test"]
    assert review_coherence_splits(3, train_pairs=60, eval_pairs=10) == splits  # fixed seed, same pairs


def test_split_and_task_type_helpers():
    train, validation, test = split_80_10_10(range(50), seed=1)
    assert (len(train), len(validation), len(test)) == (40, 5, 5)
    assert sorted(train + validation + test) == list(range(50))
    assert (train, validation, test) == split_80_10_10(range(50), seed=1) != split_80_10_10(range(50), seed=2)
    assert infer_task_type(["0", "1", "2"], "auto") == "classification"
    assert infer_task_type(["1", "2.5"], "auto") == "regression"
    assert infer_task_type([0.0, 1.0], "auto") == infer_task_type(["1.0", "0"], "auto") == "classification"
    assert infer_task_type([0.0, 0.5], "auto") == "regression"
    assert infer_task_type(["neutral", "0.5"], "auto") == infer_task_type(["0.5", "neutral"], "auto") == "classification"
    assert infer_task_type([0.5], "classification") == "classification"


# --------------------------------------------------------------------------------------------
# --init random: the same architecture without the pretrained weights
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("init", ["pretrained", "random"])
def test_init_random_keeps_the_architecture_and_drops_the_weights(tiny_model, tmp_path, init):
    from safetensors.torch import load_file

    train = write_jsonl(tmp_path / "train.jsonl", polarity_rows(1990, 2030))
    runs = []
    for name in ("first", "second"):
        out = tmp_path / name
        finetune_cls.main(["--model_name_or_path", str(tiny_model), "--train_file", str(train),
                                      "--text_column_name", "review", "--output_dir", str(out), "--init", init,
                                      "--learning_rate", "0", *FAST])
        runs.append(load_file(out / "model.safetensors"))
    pretrained = load_file(tiny_model / "model.safetensors")
    # With learning rate 0 the encoder's matrices are what the run started from (the checkpoint is a bare
    # encoder, saved without the "encoder." prefix; LayerNorms start at ones and zeros either way).
    start = {name.removeprefix("encoder."): tensor for name, tensor in runs[0].items() if tensor.dim() == 2}
    start = {name: tensor for name, tensor in start.items() if name in pretrained}
    assert len(start) >= 10
    same = [torch.equal(tensor, pretrained[name]) for name, tensor in start.items()]
    assert all(same) if init == "pretrained" else not any(same)
    assert all(torch.equal(runs[0][name], runs[1][name]) for name in runs[0])  # seeded by --seed
    config = config_of(tmp_path / "first")
    assert config["hidden_size"] == json.loads((tiny_model / "config.json").read_text())["hidden_size"]
    card = (tmp_path / "first" / "README.md").read_text()
    assert ("randomly initialised weights" in card) == (init == "random")
