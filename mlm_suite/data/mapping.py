"""The options of ``datasets.Dataset.map`` when a job tokenises its rows: one rule for every job."""

from __future__ import annotations

from typing import Any

from datasets import Dataset
from datasets.fingerprint import generate_random_fingerprint


def map_options(dataset: Dataset, num_proc: int | None = None, overwrite_cache: bool = False) -> dict[str, Any]:
    """Keyword arguments for ``dataset.map`` (and its ``filter``).

    ``num_proc`` processes when more than 1 (``--preprocessing_num_workers``); ``overwrite_cache`` recomputes rows
    that an earlier run cached (``--overwrite_cache``). datasets names a map's result with a dill hash of the mapped
    function, which takes ~0.5 s for a function holding a tokenizer, on every call. The name only matters for rows
    in cache files (a dataset loaded from disk, or from the Hub), where it finds an earlier run's result; rows held
    in memory are never cached, so they get a random name instead.
    """
    options: dict[str, Any] = {"num_proc": num_proc if num_proc and num_proc > 1 else None}
    if overwrite_cache:
        options["load_from_cache_file"] = False
    if not dataset.cache_files:
        options["new_fingerprint"] = generate_random_fingerprint()
    return options
