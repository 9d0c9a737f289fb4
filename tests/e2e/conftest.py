"""Fixtures of the end-to-end tests: a tiny model and small valid data files for every kind of job, built once per
session (the helpers that run a command and check a refusal are in ``hostile.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from hostile import write_csv
from mlm_suite import MlmSuiteConfig, MlmSuiteModel


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, minilm_dir) -> Path:
    """A random 2-layer mlm_suite encoder (hidden 32, 128 positions) with the MiniLM tokenizer."""
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
    return {
        "csv": write_csv(folder / "train.csv", ["text", "sentence2", "label"], sentences),
        "conll": conll,
        "wsd": senses,
        "pairs": pairs,
        "text": text,
    }
