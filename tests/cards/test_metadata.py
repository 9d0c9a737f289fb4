"""Model-card metadata: huggingface_hub's own card checks, offline, and the licence, data and results it records.

:func:`assert_valid_model_card` is what the tests of every job family run on the card of their tiny run
(``test_pretrain``, ``test_finetune``, ``test_retrieval``, ``jobs/test_arguments``, ``test_outputs`` with
``push_to_hub(license=..., tags=...)``). ``ModelCard.validate()`` asks the Hub, which the tests cannot
reach, and huggingface_hub has no local schema check; so the card must parse as ``huggingface_hub.ModelCard``,
its results round-trip through ``model_index_to_eval_results``/``eval_results_to_model_index``, its metadata
re-create itself through ``ModelCardData``, and its ``model-index`` have the structure the Hub's validator
requires. The tests below check what the metadata says, without training anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlm_suite.cards import (
    HELD_OUT_OF_TRAIN,
    MINILM_HUB_ID,
    PROJECT_LICENSE,
    CardDataset,
    CardScore,
    FinetunedCard,
    base_model_license,
    card_scores,
    front_matter,
    model_card_data,
    PretrainingRecipe,
    pretraining_card,
    render_card,
    seed_summary_card,
    update_card_data,
)
from mlm_suite.model import MlmSuiteForMaskedLM
from mlm_suite.training.trainer import JobTrainer
from tests.helpers import assert_valid_model_card, make_documents, results_of, roberta_tokenizer


def card_text(**metadata) -> str:
    """A whole finetuned card with the given metadata fields (``TrainedModelCard``'s; a text classifier unless told)."""
    metadata.setdefault("pipeline_tag", "text-classification")
    card = FinetunedCard(task_description="A model", auto_class="AutoModel", labels="", data="", training="",
                         metrics="", **metadata)
    return render_card(card, model_name="m", model_id="m")


SCORES = [CardScore("validation", "accuracy", 0.75, "accuracy"), CardScore("validation", "f1", 0.5, "macro F1"),
          CardScore("test", "accuracy", 0.625, "accuracy")]


# --------------------------------------------------------------------------------------------
# Licence
# --------------------------------------------------------------------------------------------
def test_the_licence_is_the_base_models_where_its_card_says_one_else_the_projects(tmp_path):
    with_card = tmp_path / "with-card"
    with_card.mkdir()
    (with_card / "README.md").write_text("---\nlicense: mit\n---\n# a model\n", encoding="utf-8")
    assert base_model_license(with_card) == {"license": "mit"}
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.md").write_text("---\nlicense: other\nlicense_name: tiny\nlicense_link: LICENSE.md\n---\n")
    assert base_model_license(other) == {"license": "other", "license_name": "tiny", "license_link": "LICENSE.md"}
    converted = tmp_path / "all-minilm-l6-v2-mlm_suite"  # the folder name of conversion.converted_minilm_dir()
    converted.mkdir()
    (converted / "config.json").write_text("{}")
    assert base_model_license(converted) == {"license": "apache-2.0"}  # all-MiniLM-L6-v2's card
    for silent in ("no card", "no licence", "not yaml"):
        folder = tmp_path / silent
        folder.mkdir()
        if silent != "no card":
            (folder / "README.md").write_text("---\ntags: [a]\n---\n" if silent == "no licence" else "---\n: [\n---\n")
        assert base_model_license(folder) == {}

    assert PROJECT_LICENSE == "apache-2.0"
    licence = {base: assert_valid_model_card(card_text(base_model=base, dataset=CardDataset("local", "x"), scores=SCORES))
               ["license"] for base in (None, with_card, converted, tmp_path / "no card")}
    assert licence == {None: "apache-2.0", with_card: "mit", converted: "apache-2.0", tmp_path / "no card": "apache-2.0"}
    metadata = assert_valid_model_card(card_text(base_model=other, dataset=CardDataset("local", "x"), scores=SCORES))
    assert (metadata["license"], metadata["license_name"], metadata["license_link"]) == ("other", "tiny", "LICENSE.md")


def test_the_project_licence_is_declared_once_and_the_same_everywhere():
    repo = Path(__file__).resolve().parents[2]
    assert "Apache License\n                           Version 2.0" in (repo / "LICENSE").read_text(encoding="utf-8")
    pyproject = (repo / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license = "Apache-2.0"' in pyproject and 'license-files = ["LICENSE"]' in pyproject
    assert PROJECT_LICENSE == "apache-2.0"  # the Hub's identifier of the same licence


def test_a_hub_base_models_licence_is_read_from_the_local_hub_cache_only(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    snapshot = tmp_path / "models--someone--some-bert" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc")
    (snapshot / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n", encoding="utf-8")
    assert base_model_license("someone/some-bert") == {"license": "cc-by-4.0"}
    assert base_model_license("someone/not-downloaded") == {}  # and the Hub is not asked
    metadata = assert_valid_model_card(card_text(base_model="someone/some-bert", dataset=CardDataset("local", "x"),
                                                 scores=SCORES))
    assert (metadata["license"], metadata["base_model"]) == ("cc-by-4.0", "someone/some-bert")


# --------------------------------------------------------------------------------------------
# Data and results
# --------------------------------------------------------------------------------------------
def test_datasets_name_a_hub_dataset_only_and_the_embedded_data_are_english(tmp_path):
    hub = CardDataset.read_by_job("nyu-mll/glue", "mrpc", ("ignored.jsonl",), None)
    assert (hub.type, hub.name, hub.config, hub.hub_id, hub.language) == ("nyu-mll/glue", "nyu-mll/glue (mrpc)", "mrpc",
                                                                         "nyu-mll/glue", None)
    metadata = assert_valid_model_card(card_text(pipeline_tag="text-classification", dataset=hub, scores=SCORES))
    assert metadata["datasets"] == ["nyu-mll/glue"] and "language" not in metadata
    assert {result["dataset"]["config"] for result in metadata["model-index"][0]["results"]} == {"mrpc"}
    mnli = CardDataset.read_by_job("nyu-mll/glue", "mnli", (), None, {"validation": "validation_matched", "test": "test"})
    metadata = assert_valid_model_card(card_text(dataset=mnli, scores=SCORES))
    assert [result["dataset"]["split"] for result in metadata["model-index"][0]["results"]] == ["validation_matched", "test"]

    saved = tmp_path / "saved"
    (saved / "dataset_dict.json").parent.mkdir()
    (saved / "dataset_dict.json").write_text("{}")
    for dataset in (CardDataset.read_by_job(str(saved), None, (), None),
                    CardDataset.read_by_job(None, None, (str(tmp_path / "train.jsonl"), None, "dev.jsonl"), None)):
        metadata = assert_valid_model_card(card_text(pipeline_tag="text-classification", dataset=dataset, scores=SCORES))
        assert "datasets" not in metadata and "language" not in metadata and str(tmp_path) not in json.dumps(metadata)
        assert {result["dataset"]["type"] for result in metadata["model-index"][0]["results"]} == {"local"}

    embedded = CardDataset.embedded("pang_lee_sentence_polarity", "Pang & Lee")
    assert CardDataset.read_by_job(None, None, (None, None), embedded) is embedded
    metadata = assert_valid_model_card(card_text(pipeline_tag="text-classification", dataset=embedded, scores=SCORES))
    assert metadata["language"] == ["en"] and "datasets" not in metadata


def test_the_model_index_holds_each_splits_scores_under_the_jobs_task():
    metrics = {"eval_accuracy": 0.75, "eval_f1": 0.5, "test_accuracy": 0.625, "test_f1": float("nan"),
               "hf_eval_accuracy": 0.1, "intermediate_eval_accuracy": 0.2}
    scores = card_scores(metrics, {"accuracy": ("accuracy", "accuracy"), "f1": ("f1", "macro F1")})
    assert scores == SCORES  # NaN, other models' and other stages' scores left out
    metadata = assert_valid_model_card(card_text(pipeline_tag="text-classification", base_model=None,
                                                 dataset=CardDataset("local", "x"), scores=scores))
    assert metadata["metrics"] == ["accuracy", "f1"]
    task = {(r["task"]["type"], r["task"]["name"]) for r in metadata["model-index"][0]["results"]}
    assert task == {("text-classification", "Text Classification")}
    assert results_of(metadata) == {("validation", "accuracy"): 0.75, ("validation", "macro F1"): 0.5,
                                    ("test", "accuracy"): 0.625}
    # Without results there is no model-index (nor a stray model_name).
    text = card_text(pipeline_tag="text-classification", dataset=CardDataset("local", "x"))
    assert "model-index" not in text and "model_name" not in text and "metrics:" not in text.split("---")[1]


def test_front_matter_keeps_its_reading_order_and_the_body_its_text():
    text = card_text(pipeline_tag="token-classification", base_model=None, dataset=CardDataset("local", "x"),
                     scores=SCORES)
    keys = [line.split(":")[0] for line in text.split("---\n")[1].splitlines() if line and line[0] not in " -"]
    assert keys == ["library_name", "pipeline_tag", "license", "tags", "metrics", "model-index"]
    assert text.split("---\n", 2)[2].startswith("\n# m\n\nA model, fine-tuned with mlm_suite")


# --------------------------------------------------------------------------------------------
# push_to_hub(license=..., tags=..., ...): Trainer.create_model_card's arguments
# --------------------------------------------------------------------------------------------
def test_create_model_card_arguments_update_the_metadata():
    data = model_card_data("pretraining", model_name="m", base_model=None, dataset=CardDataset("local", "x"),
                           scores=SCORES[:1])
    updated = update_card_data(data, license="mit", tags=["x", "mlm_suite"], language="fr", finetuned_from="someone/bert",
                               dataset_tags="conll2003", dataset="CoNLL-2003", dataset_args="conll2003")
    assert data.license == PROJECT_LICENSE and data.tags == ["mlm_suite", "masked-language-modeling", "custom_code"]
    assert updated.license == "mit" and updated.tags == ["mlm_suite", "masked-language-modeling", "custom_code", "x"]
    assert updated.language == ["fr"] and updated.base_model == "someone/bert" and updated.datasets == ["conll2003"]
    result = updated.eval_results[0]
    assert (result.dataset_type, result.dataset_name, result.dataset_config) == ("conll2003", "CoNLL-2003", "conll2003")
    assert result.task_type == "fill-mask"
    metadata = assert_valid_model_card("---\n" + front_matter(updated) + "\n---\n# m\n")
    assert metadata["license"] == "mit" and "x" in metadata["tags"]
    # Several datasets do not say which one the results were scored on: the model-index stays.
    several = update_card_data(data, dataset_tags=["a/b", "c/d"], tasks="text-classification")
    assert several.datasets == ["a/b", "c/d"] and several.eval_results[0].dataset_type == "local"
    assert several.eval_results[0].task_type == "text-classification"
    with pytest.raises(TypeError):
        update_card_data(data, licence="mit")
    assert update_card_data(data).to_dict() == data.to_dict()
    assert model_card_data("finetuned", model_name="m", base_model=MINILM_HUB_ID).base_model == MINILM_HUB_ID


# --------------------------------------------------------------------------------------------
# The pretraining card: where the model and the held-out documents came from
# --------------------------------------------------------------------------------------------
def pretraining_card_text(tiny_config, tokenizer, probe=(), **given) -> str:
    """The pretraining card of a tiny run (baseline token "the"), with its fill-mask ``probe`` and ``given``
    replacing the defaults of a from-scratch run on files."""
    eval_metrics = {"eval_mask_accuracy": 0.5, "eval_mask_baseline_accuracy": 0.1, "eval_mask_top5_accuracy": 0.7,
                    "eval_random_accuracy": 0.2, "eval_kept_accuracy": 0.9, "eval_mlm_loss": 2.0, "perplexity": 7.4,
                    "eval_mask_tokens": 8, "eval_random_tokens": 1, "eval_kept_tokens": 1}
    recipe = dict(
        base_model=None, config_name=None, config_preset="tiny", dataset_name=None, dataset_config_name=None,
        prepared_data=None, train_file=("c.txt",), validation_file=(), builtin_dataset=None, objective="mlm", masking="token",
        mlm_probability=0.2, eval_mlm_probability=0.15, value_sources={}, max_steps=20, rows_per_step=16,
        learning_rate=5e-4, adam_beta2=0.98, lr_schedule="linear", weight_decay=0.01, max_seq_length=64,
        packing=True, seed=0, max_train_minutes=None, head_warmup_steps=0, controls={},
    )  # fmt: skip
    card = pretraining_card(
        model=MlmSuiteForMaskedLM(tiny_config()), tokenizer=tokenizer, held_out_split=given.pop("held_out_split", None),
        recipe=PretrainingRecipe(**{**recipe, **given}), data={"source": "`c.txt`"},
        train_metrics={"train_steps": 20, "train_loss": 5.0, "train_runtime": 3.0}, eval_metrics=eval_metrics,
        probe=list(probe), baseline_token="the",
    )
    return render_card(card, model_name="m", model_id="m")


def test_the_pretraining_card_names_the_config_a_new_model_was_built_from(tiny_config, tokenizer):
    assert "| initialisation | preset `tiny` |" in pretraining_card_text(tiny_config, tokenizer)
    text = pretraining_card_text(tiny_config, tokenizer, config_name="configs/my-encoder")
    assert "| initialisation | config `configs/my-encoder` |" in text and "preset" not in text
    text = pretraining_card_text(tiny_config, tokenizer, base_model="someone/bert", config_name="configs/my-encoder")
    assert "| initialisation | continued from `someone/bert` |" in text


def test_the_pretraining_cards_held_out_split_is_named_for_where_it_came_from(tiny_config, tokenizer):
    def held_out(**given) -> set[str]:
        metadata = assert_valid_model_card(pretraining_card_text(tiny_config, tokenizer, **given))
        return {split for split, _ in results_of(metadata)}

    hub = dict(dataset_name="someone/corpus", train_file=())
    assert held_out(**hub, held_out_split="validation") == {"validation"}
    assert held_out(**hub, held_out_split="dev") == {"dev"}
    # No validation split: the held-out documents are part of train, and the card says so.
    assert held_out(**hub) == {HELD_OUT_OF_TRAIN} == {"held-out part of train"}
    assert held_out(**hub, validation_file=("data/dev.txt",)) == {"dev.txt (--validation_file)"}
    assert held_out() == {"validation"}  # local files: the card names no dataset split


def test_the_pretraining_card_writes_the_tokenizer_s_own_mask_token(tiny_config, tokenizer):
    """The usage snippet and the probe's sentences write ``<mask>`` for a RoBERTa tokenizer, ``[MASK]`` for BERT's;
    the probe table escapes what a Hub card would render as HTML (``<mask>``, ``<s>``)."""
    roberta = roberta_tokenizer(make_documents(50))
    for mask_token, model_tokenizer in (("[MASK]", tokenizer), ("<mask>", roberta)):
        probe = [{"sentence": f"the film was {mask_token} good .", "answer": "very", "predictions": ["so", "␣", "<s>"]}]
        text = pretraining_card_text(tiny_config, model_tokenizer, probe=probe)
        assert f'print(fill_mask("the movie was {mask_token} ."))' in text
        escaped = mask_token.replace("<", "&lt;").replace(">", "&gt;")
        assert f"| the film was {escaped} good . | very | so, ␣, &lt;s&gt; |" in text
        assert "The baseline predicts the most frequent training token, `the`, at every `[MASK]`." in text
        note = "`[MASK]` stands for this tokenizer's mask token, `<mask>`."
        assert (note in text) == (mask_token == "<mask>")


# --------------------------------------------------------------------------------------------
# mlm-suite seeds: a card without metadata, through the same writer
# --------------------------------------------------------------------------------------------
def test_the_seed_summary_card_is_written_by_the_job_trainer(tmp_path):
    per_seed = {3: {"eval_accuracy": 0.5, "test_accuracy": 0.75}, 5: {"eval_accuracy": 0.25}}
    summary = {"eval_accuracy": {"mean": 0.375, "std": 0.125}, "test_accuracy": {"mean": 0.75, "std": 0.0}}
    card = seed_summary_card(job="finetune-cls", command="mlm-suite seeds finetune-cls --seeds 3 5", metric="accuracy",
                             per_seed=per_seed, summary=summary,
                             series={"eval_accuracy": "validation", "test_accuracy": "test"}, figures="\n\n![f](f.png)")
    path = JobTrainer.write_card(tmp_path, card)
    assert path == tmp_path / "README.md"
    assert path.read_text(encoding="utf-8") == (
        "# finetune-cls: accuracy over 2 seeds\n\n`mlm-suite seeds finetune-cls --seeds 3 5` ran the job once per seed, "
        "into `seed_<seed>/` (each with its model card); `seed_summary.json` holds these numbers.\n\n"
        "| seed | validation accuracy | test accuracy |\n|---|---|---|\n| 3 | 0.5000 | 0.7500 |\n| 5 | 0.2500 | - |\n"
        "| mean ± sd | 0.3750 ± 0.1250 | 0.7500 ± 0.0000 |\n\n![f](f.png)\n"
    )
    with pytest.raises(TypeError, match="no metadata"):
        JobTrainer.write_card(tmp_path, card, license="mit")
