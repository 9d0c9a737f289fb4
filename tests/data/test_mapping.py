"""``map_options``: rows held in memory are mapped without hashing the function; rows in cache files keep
datasets' hash, so a second run finds the first one's result, and ``overwrite_cache`` recomputes it."""

from __future__ import annotations

import pytest
from datasets import Dataset, load_from_disk
from datasets.fingerprint import Hasher

from mlm_suite.data.mapping import map_options


def tokenize(tokenizer):
    return lambda batch: tokenizer(batch["text"], truncation=True, max_length=16)


@pytest.fixture
def counted_hashes(monkeypatch) -> list[str]:
    """The type names of what datasets hashes while the test runs."""
    hashed = []
    original = Hasher.hash.__func__

    def counting(cls, value):
        hashed.append(type(value).__name__)
        return original(cls, value)

    monkeypatch.setattr(Hasher, "hash", classmethod(counting))
    return hashed


def test_rows_in_memory_are_mapped_without_hashing_the_function(tokenizer, counted_hashes):
    documents = Dataset.from_dict({"text": ["a first text", "a second one", "and a third"]})
    options = map_options(documents, num_proc=1)
    assert options["num_proc"] is None and "load_from_cache_file" not in options
    assert options["new_fingerprint"] != map_options(documents)["new_fingerprint"]

    rows = documents.map(tokenize(tokenizer), batched=True, remove_columns=["text"], **options)
    assert "function" not in counted_hashes  # datasets' default: a dill hash of the function and its tokenizer
    assert list(rows["input_ids"]) == tokenizer(list(documents["text"]), truncation=True, max_length=16)["input_ids"]
    assert rows._fingerprint == options["new_fingerprint"]


def test_rows_in_cache_files_keep_datasets_hash_and_its_cache(tokenizer, tmp_path):
    Dataset.from_dict({"text": ["a first text", "a second one"]}).save_to_disk(tmp_path / "documents")
    documents = load_from_disk(str(tmp_path / "documents"))
    assert "new_fingerprint" not in map_options(documents)

    first = documents.map(tokenize(tokenizer), batched=True, **map_options(documents))
    again = documents.map(tokenize(tokenizer), batched=True, **map_options(documents))
    assert again._fingerprint == first._fingerprint and again.cache_files == first.cache_files  # the same cache file
    assert map_options(documents, overwrite_cache=True)["load_from_cache_file"] is False
    assert map_options(documents, num_proc=2)["num_proc"] == 2
