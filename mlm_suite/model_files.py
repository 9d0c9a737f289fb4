"""The files of a model folder, checked before anything loads them: ``config.json``, the weights, the tokenizer.

A truncated download, an interrupted copy or a file of another kind would otherwise surface as a traceback from
deep inside safetensors, tokenizers or transformers, or as a model that loads with the wrong weights. Each check
reads only the files' structure (JSON, a safetensors header against the file's size, a zip archive's directory,
never the weights) and raises :class:`~mlm_suite.errors.UsageError` naming the file and what is wrong. The jobs
call them through :mod:`mlm_suite.jobs.common.model_loading`.

Every model folder a job writes (a checkpoint's, the final model, ``quickstart``'s, ``convert``'s) is saved
through :func:`staged_model_folder`, so that it never holds a ``config.json`` without the weights saved with it.
See docs/command_line.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlm_suite.errors import UsageError, writing

#: Files a tokenizer is built from; a folder needs at least one of them.
TOKENIZER_VOCABULARY_FILES = (
    "tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
)
#: The tokenizer's settings, JSON objects when present.
TOKENIZER_SETTINGS_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
#: Weights a folder holds, in the order ``from_pretrained`` looks for them.
WEIGHTS_FILES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin")
#: Any weights file of a folder: those, and their shards (``model-00001-of-00003.safetensors``).
_WEIGHTS_FILE = re.compile(r"(model|pytorch_model)(-\d{5}-of-\d{5})?\.(safetensors|bin)(\.index\.json)?")
#: The folder, inside the model folder, that a save writes before its files are moved into place.
STAGING_FOLDER = ".saving"


def found_files(folder: Path) -> str:
    """What ``folder`` holds, for a message: ``found: a, b`` (at most 8 names) or ``found: nothing``."""
    names = sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []
    if not names:
        return "found: nothing"
    return "found: " + ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        UsageError: the file is missing, empty, not UTF-8, not JSON or not an object (naming it and where).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist ({found_files(path.parent)})") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"{path} is not UTF-8 text (byte {error.start}); is it a JSON file?") from None
    if not text.strip():
        raise UsageError(f"{path} is empty; it should hold a JSON object")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{path} is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    if not isinstance(value, dict):
        raise UsageError(f"{path} holds a JSON {type(value).__name__} where an object of settings belongs")
    return value


def check_config_file(folder: Path) -> dict[str, Any]:
    """``folder``'s ``config.json``, read (see :func:`read_json_object`)."""
    return read_json_object(folder / "config.json")


def check_safetensors_file(path: Path) -> None:
    """``path`` is a complete safetensors file: its header parses and its tensors end where the file ends.

    Raises:
        UsageError: naming the file and what is wrong (truncated, not safetensors).
    """
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise UsageError(f"{path} is truncated ({size} bytes): not a safetensors file; save or download it again")
        (header_size,) = struct.unpack("<Q", prefix)
        if header_size > size - 8:
            raise UsageError(
                f"{path} is truncated or not a safetensors file: its header claims {header_size} bytes, the file "
                f"has {size}; save or download it again"
            )
        try:
            header = json.loads(handle.read(header_size))
            ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, IndexError, TypeError):
            raise UsageError(f"{path} is not a safetensors file (its header is not one); save or download it again") from None
    expected = 8 + header_size + max(ends, default=0)
    if size != expected:
        what = "truncated" if size < expected else "longer than its tensors"
        raise UsageError(f"{path} is {what}: {size} bytes where its header describes {expected}; save or download it again")


def check_torch_file(path: Path) -> None:
    """``path`` is a complete zip archive, the format ``torch.save`` writes (its directory sits at the end)."""
    try:
        with zipfile.ZipFile(path):
            pass
    except (zipfile.BadZipFile, OSError) as error:
        raise UsageError(f"{path} is truncated or not a torch weights file ({error}); save or download it again") from None


def check_weights_files(folder: Path) -> None:
    """``folder``'s weights: a sharded index's every shard, else ``model.safetensors``, else ``pytorch_model.bin``.

    Raises:
        UsageError: no weights file, a shard the index names that is missing, or a damaged file.
    """
    for name in WEIGHTS_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            shards = sorted(set(read_json_object(path).get("weight_map", {}).values()))
            if not shards:
                raise UsageError(f"{path} names no weight files (its weight_map is empty or missing)")
            files = [folder / shard for shard in shards]
        else:
            files = [path]
        for file in files:
            if not file.is_file():
                raise UsageError(f"{file} is missing: {path.name} names it ({found_files(folder)})")
            (check_safetensors_file if file.suffix == ".safetensors" else check_torch_file)(file)
        return
    raise UsageError(f"{folder} holds no model weights: it needs model.safetensors or pytorch_model.bin ({found_files(folder)})")


def check_tokenizer_files(folder: Path) -> None:
    """``folder`` holds a tokenizer: a vocabulary file (:data:`TOKENIZER_VOCABULARY_FILES`) that parses, and
    settings files (:data:`TOKENIZER_SETTINGS_FILES`) that are JSON objects.

    Raises:
        UsageError: naming the folder and the files a tokenizer needs, or the damaged file.
    """
    vocabularies = [folder / name for name in TOKENIZER_VOCABULARY_FILES if (folder / name).is_file()]
    if not vocabularies:
        raise UsageError(
            f"{folder} holds no tokenizer: it needs tokenizer.json, or vocab.txt (WordPiece), vocab.json with "
            f"merges.txt (BPE) or a sentencepiece .model file ({found_files(folder)})"
        )
    for path in (folder / name for name in TOKENIZER_SETTINGS_FILES):
        if path.is_file():
            read_json_object(path)
    tokenizer_file = folder / "tokenizer.json"
    if tokenizer_file.is_file():
        from tokenizers import Tokenizer

        read_json_object(tokenizer_file)
        try:
            Tokenizer.from_file(str(tokenizer_file))
        # tokenizers raises a bare Exception for a JSON document that is not a tokenizer.
        except Exception as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UsageError(f"{tokenizer_file} is not a tokenizer file ({reason})") from None
    vocabulary = folder / "vocab.txt"
    if vocabulary.is_file():
        try:
            words = vocabulary.read_text(encoding="utf-8").split()
        except UnicodeDecodeError as error:
            raise UsageError(f"{vocabulary} is not UTF-8 text (byte {error.start}); is it a vocabulary?") from None
        if not words:
            raise UsageError(f"{vocabulary} is empty; a WordPiece vocabulary holds one token a line")


def file_mode() -> int:
    """The mode the process's umask gives a new file (0644 under umask 022): what ``open`` gives every file a job writes."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def save_tensors(tensors: dict[str, Any], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """``safetensors.torch.save_file``, then the file the mode of the run's other files (:func:`file_mode`):
    safetensors writes its files for their owner alone (0600), so others on a shared machine could not load them."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    os.chmod(path, file_mode())


def check_vocabulary(tokenizer: Any, config: Any, tokenizer_source: str, model_source: str) -> None:
    """Every id of ``tokenizer`` must have a word embedding in the model of ``config``: an id past them would stop
    training at the first batch holding it (``IndexError: index out of range in self``).

    Raises:
        UsageError: naming both sizes and where they come from.
    """
    if len(tokenizer) > config.vocab_size:
        raise UsageError(
            f"the tokenizer ({tokenizer_source}) has {len(tokenizer)} tokens but the model ({model_source}) has "
            f"vocab_size {config.vocab_size}, so ids from {config.vocab_size} on have no embedding: use the "
            f"tokenizer the model was trained with, or a model with vocab_size {len(tokenizer)} or more"
        )


@contextmanager
def staged_model_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Yield a folder to save a model (and its tokenizer) into; when the block ends, move its files into ``folder``,
    ``config.json`` last.

    ``folder`` thus never holds a ``config.json`` without the weights saved with it: the earlier ``config.json`` and
    weights files that the save does not replace go first. Every file moved in gets the mode of the run's other
    files (:func:`file_mode`; transformers' ``save_pretrained`` writes weights for their owner alone). A write failure in the block raises
    :class:`~mlm_suite.errors.WriteError` naming ``folder``, and then, as after any error, nothing of the save is
    left (a staging folder left by a killed process goes at the next save).
    """
    folder = Path(folder)
    staging = folder / STAGING_FOLDER
    with writing(folder):
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            yield staging
            saved = sorted(path.name for path in staging.iterdir())
            # The earlier config.json goes first, and the earlier weights this save does not replace (another
            # sharding) before the new ones: at no moment does a config.json stand beside weights of another save.
            (folder / "config.json").unlink(missing_ok=True)
            for path in list(folder.iterdir()):
                if _WEIGHTS_FILE.fullmatch(path.name) and path.name not in saved:
                    path.unlink()
            mode = file_mode()
            for name in sorted(saved, key=lambda name: name == "config.json"):
                if (staging / name).is_file():
                    os.chmod(staging / name, mode)
                os.replace(staging / name, folder / name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def check_model_folder(folder: Path, *, weights: bool = True, tokenizer: bool = False) -> None:
    """``folder``'s ``config.json``, its weights (``weights``) and its tokenizer (``tokenizer``), as above."""
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise UsageError(f"{folder} {what}; a model is a folder holding config.json and its weights")
    check_config_file(folder)
    if weights:
        check_weights_files(folder)
    if tokenizer:
        check_tokenizer_files(folder)


__all__ = [
    "TOKENIZER_SETTINGS_FILES",
    "TOKENIZER_VOCABULARY_FILES",
    "WEIGHTS_FILES",
    "check_config_file",
    "check_model_folder",
    "check_safetensors_file",
    "check_tokenizer_files",
    "check_vocabulary",
    "check_torch_file",
    "check_weights_files",
    "file_mode",
    "found_files",
    "read_json_object",
    "save_tensors",
    "staged_model_folder",
]
