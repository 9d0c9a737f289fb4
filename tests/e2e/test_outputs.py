"""What the jobs leave behind: model cards whose usage snippet runs as written in a Python without
mlm_suite, ``base_model`` metadata that is a Hub id or nothing, ``--push_to_hub`` honoured by every
job after its card is written (the upload is faked: the Hub is not reachable from the tests), and
output folders and checkpoints without a single pickle (``training_args.json``; optimizer, scheduler
and RNG states in safetensors + JSON) that still resume exactly.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers.trainer as hf_trainer_module
from transformers import TrainingArguments

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM
from mlm_suite.jobs import finetune_cls, finetune_ner, finetune_pair, pretrain
from mlm_suite.cards import MINILM_HUB_ID, base_model_fields
from mlm_suite.training.checkpoint_format import join_optimizer_state, split_optimizer_state
from mlm_suite.training.trainer import JobTrainer
from tests.helpers import (
    FAST,
    PICKLE_SUFFIXES,
    SENTENCES,
    assert_no_pickle,
    assert_valid_model_card,
    job_args,
    make_documents,
    write_conll,
    write_text,
)

REPO = Path(__file__).resolve().parents[2]

# Runs a model card's snippet where mlm_suite cannot be imported, as if it had never been installed: the
# repository is off sys.path, the editable install's import hook is gone and the name is blocked. Then
# reports the classes the snippet's model and tokenizer came from.
RUNNER = r"""
import os, sys
snippet, repo = sys.argv[1], sys.argv[2]
sys.path[:] = [p for p in sys.path if p not in ("", ".") and os.path.realpath(p) != os.path.realpath(repo)]
sys.meta_path[:] = [f for f in sys.meta_path if "mlm_suite" not in getattr(f, "__module__", "")]
sys.modules["mlm_suite"] = None
try:
    import mlm_suite  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("mlm_suite is importable")
namespace = {"__name__": "__main__"}
exec(compile(open(snippet, encoding="utf-8").read(), "model card snippet", "exec"), namespace)
print("MODEL_MODULE", type(namespace["model"]).__module__)
print("TOKENIZER", type(namespace["tokenizer"]).__name__)
"""


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def usage_snippet(card: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    assert len(blocks) == 1, blocks
    return blocks[0]


def front_matter(card: str) -> str:
    assert card.startswith("---\n")
    return card.split("---\n")[1]


def run_without_mlm_suite(snippet: str, tmp_path: Path) -> str:
    """Run ``snippet`` in a fresh ``python -I`` outside the repository where ``import mlm_suite`` fails."""
    script = tmp_path / "snippet.py"
    script.write_text(snippet, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1",
               HF_MODULES_CACHE=str(tmp_path / "modules"))
    done = subprocess.run(
        [sys.executable, "-I", "-c", RUNNER, str(script), str(REPO)],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    everything = done.stdout + done.stderr
    # No prompt, no warning: every from_pretrained in the snippet passes trust_remote_code=True.
    assert "Do you wish to run the custom code" not in everything and "trust_remote_code" not in everything
    assert "MODEL_MODULE transformers_modules." in done.stdout, done.stdout
    return done.stdout


def cls_files(folder: Path) -> list[str]:
    rows = [("a fine film", "pos"), ("a dull film", "neg"), ("great acting", "pos"), ("bad plot", "neg")] * 3
    path = folder / "cls.jsonl"
    path.write_text("".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in rows))
    return ["--train_file", str(path), "--validation_file", str(path)]


def pair_files(folder: Path) -> list[str]:
    rows = [("the film starts", "then it ends", 1), ("a cat sleeps", "stocks fell today", 0)] * 4
    path = folder / "pair.jsonl"
    path.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "label": y}) + "\n" for a, b, y in rows))
    return ["--train_file", str(path), "--validation_file", str(path)]


def ner_files(folder: Path) -> list[str]:
    return ["--train_file", str(write_conll(folder / "train.conll", SENTENCES * 2)),
            "--validation_file", str(write_conll(folder / "dev.conll", SENTENCES[:3]))]


def pretrain_args(folder: Path, output_dir: Path, *extra: str) -> list[str]:
    train = write_text(folder / "train.txt", make_documents(30, seed=1))
    return job_args(output_dir, "--train_file", str(train), "--validation_split_percentage", "20", "--max_steps", "2",
                    "--train_tokenizer", "false", "--fill_mask_probes", "1", *extra)


def run_job(job: str, tiny_model: Path, folder: Path, output_dir: Path, *extra: str) -> None:
    if job == "pretrain":
        assert pretrain.main(pretrain_args(folder, output_dir, *extra)) == 0
        return
    data = {"finetune-ner": ner_files, "finetune-cls": cls_files, "finetune-pair": pair_files}[job](folder)
    main = {"finetune-ner": finetune_ner.main, "finetune-cls": finetune_cls.main,
            "finetune-pair": finetune_pair.main}[job]
    main(["--model_name_or_path", str(tiny_model), *data, "--output_dir", str(output_dir), *FAST, *extra])


# --------------------------------------------------------------------------------------------
# Model cards and pickle-free folders
# --------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.slow
def test_pretrain_card_snippet_runs_without_mlm_suite_and_nothing_is_pickled(tmp_path):
    out = tmp_path / "pretrain"
    run_job("pretrain", None, tmp_path, out, "--save_strategy", "steps", "--save_steps", "1")

    names = assert_no_pickle(out)
    assert "training_args.bin" not in names and "checkpoint-1/optimizer.safetensors" in names
    assert {"checkpoint-1/optimizer.json", "checkpoint-1/scheduler.json", "checkpoint-1/rng_state.json"} <= set(names)
    assert json.loads((out / "training_args.json").read_text())["output_dir"] == str(out)

    card = (out / "README.md").read_text(encoding="utf-8")
    assert "base_model" not in front_matter(card) and "pretrained from scratch" in card
    assert "pypi.org" not in card
    snippet = usage_snippet(card)
    assert snippet.count(json.dumps(str(out))) == 3  # model, tokenizer and pipeline load the output folder
    stdout = run_without_mlm_suite(snippet, tmp_path)
    assert "'token_str'" in stdout  # the fill-mask pipeline's answers were printed


@pytest.mark.multiprocess
@pytest.mark.slow
def test_finetuned_card_snippet_runs_without_mlm_suite_and_nothing_is_pickled(tiny_model, tmp_path):
    out = tmp_path / "cls"
    run_job("finetune-cls", tiny_model, tmp_path, out, "--save_strategy", "steps", "--save_steps", "1")

    names = assert_no_pickle(out)
    assert "training_args.json" in names and "checkpoint-2/optimizer.safetensors" in names
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "base_model" not in front_matter(card)  # a local folder is no Hub id
    assert str(tiny_model) not in card and f"a local checkpoint (folder `{tiny_model.name}`)" in card
    snippet = usage_snippet(card)
    assert "AutoModelForSequenceClassification.from_pretrained" in snippet
    assert "TOKENIZER" in run_without_mlm_suite(snippet, tmp_path)


def test_base_model_is_a_hub_id_or_absent(tmp_path):
    converted = tmp_path / "all-minilm-l6-v2-mlm_suite"  # the folder name of conversion.converted_minilm_dir()
    converted.mkdir()
    (converted / "config.json").write_text("{}")
    fields = base_model_fields(str(converted))
    assert fields["base_model_metadata"] == f"base_model: {MINILM_HUB_ID}\n"
    assert str(tmp_path) not in fields["base_model_text"] and "converted" in fields["base_model_text"]

    assert base_model_fields("someone/some-bert")["base_model_metadata"] == "base_model: someone/some-bert\n"
    local = tmp_path / "my-model"
    local.mkdir()
    assert base_model_fields(str(local)) == {"base_model_metadata": "", "base_model_text": "a local checkpoint (folder `my-model`)"}
    assert base_model_fields(None)["base_model_metadata"] == ""


# --------------------------------------------------------------------------------------------
# --push_to_hub
# --------------------------------------------------------------------------------------------
class FakeHub:
    """Stands in for ``huggingface_hub.HfApi``: records the repositories created and what each upload held."""

    def __init__(self) -> None:
        self.repos: list[str] = []
        self.uploads: list[dict] = []

    def create_repo(self, repo_id: str, **kwargs) -> SimpleNamespace:
        full = repo_id if "/" in repo_id else f"someone/{repo_id}"  # the Hub puts a bare name under the user
        self.repos.append(full)
        return SimpleNamespace(repo_id=full)

    def upload_folder(self, *, repo_id: str, folder_path: str, **kwargs) -> SimpleNamespace:
        folder = Path(folder_path)
        card = folder / "README.md"
        self.uploads.append({
            "repo_id": repo_id,
            "folder": folder,
            "files": {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()},
            "card": card.read_text(encoding="utf-8") if card.is_file() else None,
            "ignore_patterns": kwargs.get("ignore_patterns"),
        })
        return SimpleNamespace(commit_url=f"https://example.invalid/{repo_id}")


@pytest.mark.parametrize("job", ["pretrain", "finetune-ner", "finetune-cls", "finetune-pair"])
def test_every_job_pushes_once_after_writing_its_card(job, tiny_model, tmp_path, monkeypatch):
    hub = FakeHub()
    monkeypatch.setattr(hf_trainer_module, "hf_api", lambda: hub)
    # As a user's script would push: push_to_hub's card arguments reach mlm_suite's card rather than being dropped.
    push_to_hub = JobTrainer.push_to_hub
    monkeypatch.setattr(JobTrainer, "push_to_hub",
                        lambda self, *args, **kwargs: push_to_hub(self, *args, license="mit", tags=["x"], **kwargs))
    out = tmp_path / "out"
    run_job(job, tiny_model, tmp_path, out, "--push_to_hub", "true", "--hub_model_id", f"tiny-{job}")

    repo_id = f"someone/tiny-{job}"
    assert len(hub.uploads) == 1, hub.uploads  # not also from save_model, with the Trainer's generated card
    upload = hub.uploads[0]
    assert upload["repo_id"] == repo_id and upload["folder"] == out
    assert {"README.md", "model.safetensors", "config.json", "modeling_mlm_suite.py", "tokenizer.json",
            "all_results.json", "training_args.json"} <= upload["files"]
    assert not any(name.endswith(tuple(PICKLE_SUFFIXES)) for name in upload["files"])
    assert "checkpoint-*" in upload["ignore_patterns"]
    # The card uploaded is mlm_suite's, complete, and its snippet loads the repository pushed to.
    assert upload["card"] == (out / "README.md").read_text(encoding="utf-8")
    assert re.search(r"\$\w", upload["card"]) is None
    assert f'from_pretrained("{repo_id}", trust_remote_code=True)' in usage_snippet(upload["card"])
    assert upload["card"].startswith("---\nlibrary_name: transformers\n") and "custom_code" in upload["card"]
    assert "## Evaluation" in upload["card"]
    metadata = assert_valid_model_card(upload["card"])
    assert metadata["license"] == "mit"  # replaces the project's apache-2.0 (the tiny model's folder has no card)
    assert {"mlm_suite", "custom_code", "x"} <= set(metadata["tags"])  # added to the card's own tags
    assert metadata["model-index"][0]["name"] == f"tiny-{job}"  # push_to_hub's model name
    assert "datasets" not in metadata and {r["dataset"]["type"] for r in metadata["model-index"][0]["results"]} == {"local"}
    task = {"pretrain": "fill-mask", "finetune-ner": "token-classification"}.get(job, "text-classification")
    assert metadata["pipeline_tag"] == task and {r["task"]["type"] for r in metadata["model-index"][0]["results"]} == {task}


# --------------------------------------------------------------------------------------------
# Checkpoint states without pickle
# --------------------------------------------------------------------------------------------
def _trainer(tmp_path: Path, seed: int) -> JobTrainer:
    torch.manual_seed(seed)
    model = MlmSuiteForMaskedLM(MlmSuiteConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                               intermediate_size=24, max_position_embeddings=16))
    args = TrainingArguments(output_dir=str(tmp_path / f"run{seed}"), report_to="none", adam_beta2=0.98, use_cpu=True)
    trainer = JobTrainer(model=model, args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    return trainer


def test_optimizer_scheduler_and_rng_states_round_trip_through_safetensors_and_json(tmp_path):
    trainer = _trainer(tmp_path, 0)
    for _ in range(2):
        for parameter in trainer.model.parameters():
            parameter.grad = torch.randn_like(parameter)
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    trainer._save_optimizer_and_scheduler(str(checkpoint))
    trainer._save_rng_state(str(checkpoint))
    assert_no_pickle(checkpoint)
    expected_draws = (random.random(), float(np.random.rand()), float(torch.rand(1)))

    other = _trainer(tmp_path, 1)
    other._load_optimizer_and_scheduler(str(checkpoint))
    other._load_rng_state(str(checkpoint))
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected_draws

    saved, loaded = trainer.optimizer.state_dict(), other.optimizer.state_dict()
    assert loaded["param_groups"] == saved["param_groups"]
    assert isinstance(loaded["param_groups"][0]["betas"], tuple)
    assert saved["state"].keys() == loaded["state"].keys()
    for index, entries in saved["state"].items():
        for name, value in entries.items():
            torch.testing.assert_close(loaded["state"][index][name], value, rtol=0, atol=0)
    assert other.lr_scheduler.state_dict() == trainer.lr_scheduler.state_dict()


def test_split_optimizer_state_refuses_what_json_cannot_hold():
    state = {"state": {0: {"step": torch.tensor(1.0), "note": object()}}, "param_groups": [{"params": [0], "lr": 0.1}]}
    assert split_optimizer_state(state) is None
    tensors, data = split_optimizer_state({"state": {0: {"step": 3}}, "param_groups": [{"params": [0], "betas": (0.9, 0.9)}]})
    assert tensors == {} and join_optimizer_state(tensors, json.loads(json.dumps(data)), [{"betas": (0.9, 0.99)}]) == {
        "state": {0: {"step": 3}}, "param_groups": [{"params": [0], "betas": (0.9, 0.9)}]
    }
