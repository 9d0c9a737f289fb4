"""The ``evaluate`` modules shipped in the package (``mlm_suite/evaluation/metric_modules``).

* A wheel built from the repository holds them, and from that installed wheel ``evaluate.load`` reads
  them in a fresh process with the Hub switched off and every network connection refused; they give
  exactly what the library functions give on random inputs.
* The examples of their metric cards, scripts and of docs/metrics.md run as written (doctest).
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import mlm_suite.evaluation
from mlm_suite.evaluation import METRIC_NAMES, entity_scores, load_metric, make_compute_metrics, metric_path, tag_scores
from mlm_suite.evaluation.masked_lm import NOT_SELECTED, TOP_K, corruption_kinds, kind_scores, masked_lm_scores

REPO = Path(__file__).resolve().parents[2]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENTITY_CASES = [("BIO", "conlleval"), ("BIO", "strict"), ("IOB1", "conlleval"), ("IOB1", "strict"),
                ("BIOES", "conlleval"), ("BIOES", "strict"), ("IO", "strict"), (None, "conlleval")]
PREFIXES = {"BIO": "BI", "IOB1": "BI", "BIOES": "BIES", "IO": "I", None: "BIES"}
MASK, BASELINE, VOCAB = 3, 7, 12


def random_tag_pairs(rng: random.Random, tags: list[str], n_sentences: int = 120) -> tuple[list, list]:
    """Gold and predicted sequences of the same lengths, tags drawn uniformly (so malformed spans abound)."""
    lengths = [rng.randint(1, 15) for _ in range(n_sentences)]
    return tuple([[rng.choice(tags) for _ in range(length)] for length in lengths] for _ in range(2))


def entity_inputs(seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    for scheme, mode in ENTITY_CASES:
        tags = ["O"] * 4 + [f"{prefix}-{type_}" for prefix in PREFIXES[scheme] for type_ in ("PER", "LOC", "MISC")]
        references, predictions = random_tag_pairs(rng, tags)
        cases.append({"scheme": scheme, "mode": mode, "references": references, "predictions": predictions})
    return cases


def tag_inputs(seed: int = 1) -> dict:
    references, predictions = random_tag_pairs(random.Random(seed), ["NN", "NNS", "VB", "VBZ", "DT", "PRP$", "JJ", "IN"])
    return {"references": references, "predictions": predictions}


def masked_lm_batch(seed: int = 2) -> dict[str, np.ndarray]:
    """A batch as the pretraining evaluation sees it: inputs with [MASK]/random/kept corruption, labels
    (-100 where not selected), top-k ranked predictions (all at every position)."""
    rng = np.random.default_rng(seed)
    originals = rng.integers(4, VOCAB, size=(16, 24))
    labels = np.where(rng.random(originals.shape) < 0.4, originals, -100)
    draw = rng.random(originals.shape)
    inputs = np.where(labels == -100, originals, np.where(draw < 0.6, MASK, np.where(draw < 0.8, rng.integers(4, VOCAB, originals.shape), originals)))
    # a model that is right more often than chance: the original id is ranked first half the time
    ranked = rng.integers(4, VOCAB, size=(*originals.shape, TOP_K))
    ranked[..., 0] = np.where(rng.random(originals.shape) < 0.5, originals, ranked[..., 0])
    return {"inputs": inputs, "labels": labels, "ranked": ranked}


def masked_lm_inputs(batch: dict[str, np.ndarray]) -> dict:
    """The module's inputs: one example per selected position."""
    selected = batch["labels"] != -100
    kinds = corruption_kinds(batch["inputs"], batch["labels"], MASK)
    return {"predictions": batch["ranked"][selected].tolist(), "references": batch["labels"][selected].tolist(),
            "kinds": kinds[selected].tolist(), "baseline_token_id": BASELINE}


def library_masked_lm_scores(batch: dict[str, np.ndarray]) -> dict[str, float]:
    hits = (batch["ranked"] == batch["labels"][..., None]).any(-1)
    return masked_lm_scores(batch["inputs"], batch["labels"], batch["ranked"][..., 0], MASK, BASELINE, hits)


# Runs in a fresh interpreter that imports mlm_suite from the installed wheel: loads each module by the
# path the package gives, refusing (and recording) any network connection, and writes what they compute.
CHILD = r"""
import json, socket, sys
site, inputs_path, outputs_path = sys.argv[1:]
sys.path.insert(0, site)
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args[1:] or args))
    raise OSError("network access refused by the test")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse

import mlm_suite
from mlm_suite.evaluation import load_metric, metric_path
inputs = json.load(open(inputs_path))
outputs = {"package": mlm_suite.__file__, "paths": {}, "entity_f1": []}
for name in ("entity_f1", "token_accuracy", "masked_lm_accuracy"):
    outputs["paths"][name] = str(metric_path(name))
entity_f1 = load_metric("entity_f1")
for case in inputs["entity_f1"]:
    outputs["entity_f1"].append(entity_f1.compute(**case))
outputs["token_accuracy"] = load_metric("token_accuracy").compute(**inputs["token_accuracy"])
outputs["masked_lm_accuracy"] = load_metric("masked_lm_accuracy").compute(**inputs["masked_lm_accuracy"])
outputs["network_attempts"] = attempts
json.dump(outputs, open(outputs_path, "w"))
"""


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory) -> Path:
    """mlm-suite built into a wheel from a copy of the repository and installed (without dependencies) into a folder."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "mlm_suite", source / "mlm_suite", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(source)],
                   check=True, capture_output=True, text=True)
    wheel = next((root / "dist").glob("mlm_suite-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(root / "site"), str(wheel)],
                   check=True, capture_output=True, text=True)
    return root


@pytest.mark.multiprocess
def test_the_wheel_holds_each_module_script_and_metric_card(installed_wheel):
    names = set(zipfile.ZipFile(next((installed_wheel / "dist").glob("*.whl"))).namelist())
    for name in METRIC_NAMES:
        assert {f"mlm_suite/evaluation/metric_modules/{name}/{name}.py", f"mlm_suite/evaluation/metric_modules/{name}/README.md"} <= names


@pytest.mark.multiprocess
def test_the_wheel_holds_the_model_card_templates(installed_wheel):
    names = set(zipfile.ZipFile(next((installed_wheel / "dist").glob("*.whl"))).namelist())
    templates = {p.name for p in (REPO / "mlm_suite" / "cards" / "templates").glob("*.md")}
    assert templates >= {"finetuned.md", "pretraining.md", "retrieval.md", "seeds.md"}
    assert {f"mlm_suite/cards/templates/{name}" for name in templates} <= names


@pytest.mark.multiprocess
@pytest.mark.slow  # over 10 s on 2 cores
def test_installed_modules_load_offline_in_a_fresh_process_and_equal_the_library(installed_wheel, tmp_path):
    entity_cases, tag_case, batch = entity_inputs(), tag_inputs(), masked_lm_batch()
    inputs = {"entity_f1": entity_cases, "token_accuracy": tag_case, "masked_lm_accuracy": masked_lm_inputs(batch)}
    (tmp_path / "inputs.json").write_text(json.dumps(inputs))
    environment = {**os.environ, **OFFLINE, "HF_HOME": str(tmp_path / "hf_home")}  # evaluate's caches too
    environment.pop("PYTHONPATH", None)
    site = installed_wheel / "site"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(site), str(tmp_path / "inputs.json"), str(tmp_path / "outputs.json")],
        env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    outputs = json.loads((tmp_path / "outputs.json").read_text())

    assert outputs["network_attempts"] == []
    assert Path(outputs["package"]).is_relative_to(site)  # the installed wheel, not the repository
    for name in METRIC_NAMES:
        assert Path(outputs["paths"][name]) == site / "mlm_suite" / "evaluation" / "metric_modules" / name
    # evaluate copied each script into its modules cache (under HF_HOME) and imported it from there
    cached = {path.name for path in (tmp_path / "hf_home").rglob("*.py")}
    assert {f"{name}.py" for name in METRIC_NAMES} <= cached

    for case, result in zip(entity_cases, outputs["entity_f1"]):
        expected = entity_scores(case["references"], case["predictions"], scheme=case["scheme"], mode=case["mode"])
        assert result == expected, (case["scheme"], case["mode"])
        assert expected["per_type"] and 0.0 < expected["f1"] < 1.0  # the inputs exercise the metric
    assert outputs["token_accuracy"] == tag_scores(tag_case["references"], tag_case["predictions"])
    expected = library_masked_lm_scores(batch)
    assert outputs["masked_lm_accuracy"] == expected
    assert all(expected[f"{kind}_tokens"] > 20 for kind in ("mask", "random", "kept"))
    assert expected["mask_accuracy"] > expected["mask_baseline_accuracy"]


def test_make_compute_metrics_reports_what_the_modules_compute():
    """The Trainer's ``compute_metrics`` and the modules are the same functions: equal scores on the same tags."""
    rng = np.random.default_rng(3)
    id2label = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    label_ids = np.where(rng.random((30, 20)) < 0.2, -100, rng.integers(0, 5, (30, 20)))
    logits = rng.normal(size=(30, 20, 5))
    predicted = logits.argmax(-1)
    keep = label_ids != -100
    references = [[id2label[i] for i in row[mask]] for row, mask in zip(label_ids, keep)]
    predictions = [[id2label[i] for i in row[mask]] for row, mask in zip(predicted, keep)]
    for mode in ("conlleval", "strict"):
        module = load_metric("entity_f1").compute(predictions=predictions, references=references, mode=mode)
        trainer_scores = make_compute_metrics(id2label, scheme="BIO", mode=mode)((logits, label_ids))
        assert trainer_scores == {key: module[key] for key in trainer_scores}
    module = load_metric("token_accuracy").compute(predictions=predictions, references=references)
    trainer_scores = make_compute_metrics(id2label, scheme="none")((logits, label_ids))
    assert trainer_scores["accuracy"] == module["accuracy"] and trainer_scores["macro_f1"] == module["macro_f1"]
    assert trainer_scores["tag_B-PER_f1"] == module["per_tag"]["B-PER"]["f1"]


def _script(name: str):
    path = metric_path(name) / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"card_examples_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_card_and_script_examples_run_as_written(name):
    module, script = _script(name)
    card = metric_path(name) / "README.md"
    for text, source in ((card.read_text(encoding="utf-8"), card), (module._KWARGS_DESCRIPTION, script)):
        test = doctest.DocTestParser().get_doctest(text, {}, name, str(source), 0)
        assert len(test.examples) >= 3, source
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.failures == 0, f"{runner.failures} failing example(s) in {source} (see the output above)"


def test_the_docs_example_runs_as_written():
    page = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    block = page.split("<!-- metric-modules-example -->\n```python\n", 1)[1].split("```", 1)[0]
    test = doctest.DocTestParser().get_doctest(block, {}, "docs/metrics.md", "docs/metrics.md", 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert len(test.examples) >= 5 and runner.failures == 0


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_metric_cards_have_the_sections_of_an_evaluate_card(name):
    card = (metric_path(name) / "README.md").read_text(encoding="utf-8")
    assert card.startswith(f"---\ntitle: {name}\n")
    for heading in ("## Metric Description", "## How to Use", "### Inputs", "### Output Values", "### Examples",
                    "## Limitations and Bias", "## Citation"):
        assert f"\n{heading}\n" in card, heading
    module, _ = _script(name)
    assert "@" in module._CITATION and module._CITATION.strip().splitlines()[1] in card  # the same reference


def test_bad_input_is_a_clear_error():
    masked_lm_accuracy = load_metric("masked_lm_accuracy")
    with pytest.raises(ValueError, match=r"kind 'masked' at position 1 is not one of"):
        masked_lm_accuracy.compute(predictions=[1, 2], references=[1, 2], kinds=["mask", "masked"])
    with pytest.raises(ValueError, match=r"the same number k >= 1 of ids, got lengths \[1, 2\]"):
        masked_lm_accuracy.compute(predictions=[[1], [2, 3]], references=[1, 2], kinds=["mask", "mask"])
    with pytest.raises(ValueError, match="strict.* needs a tag scheme"):
        load_metric("entity_f1").compute(predictions=[["B-PER"]], references=[["B-PER"]], mode="strict", scheme=None)
    with pytest.raises(ValueError, match="unknown metric 'seqeval'"):
        metric_path("seqeval")


def test_kinds_are_read_off_the_inputs():
    inputs = np.array([[1, MASK, 5, 9]])
    labels = np.array([[-100, 4, 5, 8]])
    kinds = corruption_kinds(inputs, labels, MASK)
    assert kinds.tolist() == [[NOT_SELECTED, "mask", "kept", "random"]]
    scores = kind_scores(kinds, labels, np.array([[0, 4, 0, 0]]), baseline_token_id=4)
    assert (scores["mask_accuracy"], scores["kept_accuracy"], scores["random_accuracy"]) == (1.0, 0.0, 0.0)
    assert (scores["selected_tokens"], scores["mask_baseline_accuracy"]) == (3, 1.0)
    with pytest.raises(ValueError, match=r"kind 'MASK' at position \(0, 1\)"):
        kind_scores(np.array([["", "MASK"]]), labels[:, :2], labels[:, :2])


def test_every_public_name_is_documented():
    """``mlm_suite.evaluation.__all__`` is the public API: each name exists and docs/metrics.md names it (its
    snippets run in tests/conformance/test_docs.py)."""
    page = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert sorted(mlm_suite.evaluation.__all__) == mlm_suite.evaluation.__all__
    for name in mlm_suite.evaluation.__all__:
        assert hasattr(mlm_suite.evaluation, name) and re.search(rf"\b{name}\b", page), name
