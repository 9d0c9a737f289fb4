"""The jobs' default start: the real all-MiniLM-L6-v2 weights (from a registry package), converted once into the
download cache (:func:`converted_minilm_dir`)."""

from __future__ import annotations

from pathlib import Path

from mlm_suite.conversion.checkpoint import convert_checkpoint
from mlm_suite.data.inputs import downloads
from mlm_suite.errors import UsageError
from mlm_suite.model_files import check_model_folder

#: The cache folder of the converted MiniLM (:func:`converted_minilm_dir`). Renamed when what the conversion writes
#: changes, so that a folder an earlier rule converted is not reused (it held ``classifier_pooling: cls``).
CONVERTED_MINILM_FOLDER = "all-minilm-l6-v2-mlm_suite"


def converted_minilm_dir() -> Path:
    """The real MiniLM-L6 weights as an mlm_suite folder, converted on first use and cached.

    A cached folder whose files are damaged (:func:`~mlm_suite.model_files.check_model_folder`) is converted
    again. Under ``accelerate launch`` call it inside ``training_args.main_process_first()`` so that only one
    process converts (two that do anyway each convert into a folder of their own; the first renamed in is kept).
    """
    destination = downloads.cache_dir() / CONVERTED_MINILM_FOLDER
    if destination.exists():
        try:
            check_model_folder(destination, tokenizer=True)
            return destination
        except UsageError as damage:
            downloads.report(f"mlm_suite: the cached MiniLM conversion is damaged ({damage}); converting it again")
            downloads.discard_folder(destination)
    source = downloads.minilm_dir()
    downloads.report(f"mlm_suite: converting all-MiniLM-L6-v2 to an mlm_suite folder in {destination} (once; cached)")
    # The conversion carries MiniLM's mean pooling to the classification heads: over five seeds it matched [CLS] on
    # sentiment and beat it by 2 validation points on coherence (benchmarks/bench_default_pooling.py).
    return downloads.build_folder(destination, lambda staging: convert_checkpoint(source, staging))


__all__ = ["CONVERTED_MINILM_FOLDER", "converted_minilm_dir"]
