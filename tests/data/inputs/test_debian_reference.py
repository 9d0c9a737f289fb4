"""The multilingual built-in corpus (mlm_suite.data.inputs.downloads.debian_reference): packages fetched once with
``apt-get download`` into the cache and read as archives, a translation's paragraphs left in English left out, the
running text only, and a one-line error where apt is missing or the download fails. Nothing is fetched: the tests
make their own packages."""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from mlm_suite.data.inputs import downloads
from mlm_suite.errors import FetchError

ENGLISH = """Debian Reference

---------------------------------------------------------------------

1. GNU/Linux tutorial

    I think learning a computer system is like learning a new foreign
    language. Although tutorial books and documentation are helpful.

    $ ls -l /etc/passwd

      * a list item that is not running text

    This paragraph is left untranslated by every translation of the
    manual, word for word.
"""
GERMAN = """Debian Referenz

1. GNU/Linux-Einführung

    Ich denke, dass das Erlernen eines Computersystems wie das Erlernen
    einer neuen Fremdsprache ist.

    This paragraph is left untranslated by every translation of the
    manual, word for word.
"""
JAPANESE = """1. チュートリアル

    本 Debian リファレンスはシ
    ステムインストール後のユーザー案内書として提供します。
"""


def fake_deb(path: Path, member: str, text: str) -> Path:
    """A ``.deb`` as Debian builds it: an ar archive of ``debian-binary``, ``control.tar.xz`` and ``data.tar.xz``."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as archive:
        content = gzip.compress(text.encode("utf-8"))
        info = tarfile.TarInfo(member)
        info.size = len(content)
        archive.addfile(info, io.BytesIO(content))
    parts = [("debian-binary", b"2.0\n"), ("control.tar.xz", b"\0" * 3), ("data.tar.xz", data.getvalue())]
    body = b"!<arch>\n"
    for name, content in parts:
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(content):<10}`\n".encode()
        body += header + content + (b"\n" if len(content) % 2 else b"")
    path.write_bytes(body)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("MLM_SUITE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "debian"


def test_the_debian_reference_is_read_out_of_its_packages_each_language_its_own_text(cache, monkeypatch):
    fetched = []

    def fake_apt(command, cwd, **kwargs):
        package = command[-1]
        fetched.append(package)
        language = package.removeprefix("debian-reference-")
        text = {"en": ENGLISH, "de": GERMAN, "ja": JAPANESE}[language]
        fake_deb(Path(cwd) / f"{package}_2.100_all.deb", f"./usr/share/debian-reference/debian-reference.{language}.txt.gz", text)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(downloads.shutil, "which", lambda name: "/usr/bin/apt-get")
    monkeypatch.setattr(downloads.subprocess, "run", fake_apt)
    paragraphs = downloads.debian_reference(["en", "de", "ja"])
    assert paragraphs["en"] == [
        "I think learning a computer system is like learning a new foreign language. Although tutorial books and "
        "documentation are helpful.",
        "This paragraph is left untranslated by every translation of the manual, word for word.",
    ]  # the running text: no title, heading, command line or list item
    assert paragraphs["de"] == ["Ich denke, dass das Erlernen eines Computersystems wie das Erlernen einer neuen "
                                "Fremdsprache ist."]  # the paragraph left in English is not German
    assert paragraphs["ja"] == ["本 Debian リファレンスはシステムインストール後のユーザー案内書として提供します。"]  # no space inside a word
    assert sorted(path.name for path in cache.glob("*.deb")) == [
        "debian-reference-de_2.100_all.deb", "debian-reference-en_2.100_all.deb", "debian-reference-ja_2.100_all.deb"]
    count = len(fetched)
    assert downloads.debian_reference(["de"]) == {"de": paragraphs["de"]} and len(fetched) == count  # cached


def test_a_corpus_that_cannot_be_fetched_is_one_line(cache, monkeypatch):
    monkeypatch.setattr(downloads.shutil, "which", lambda name: None)
    with pytest.raises(FetchError) as missing:
        downloads.debian_reference(["en"])
    assert str(missing.value) == (
        "debian-reference-en is fetched with `apt-get download`, which this machine lacks (not Debian or Ubuntu): "
        f"download debian-reference-en_*.deb elsewhere into {cache}, or give --train_file")
    monkeypatch.setattr(downloads.shutil, "which", lambda name: "/usr/bin/apt-get")
    monkeypatch.setattr(downloads.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(
        command, 100, "", "Reading package lists...\nE: Unable to locate package debian-reference-en\n"))
    with pytest.raises(FetchError) as failed:
        downloads.debian_reference(["en"])
    assert str(failed.value) == ("could not download the Debian package debian-reference-en with apt-get download (E: "
                                 "Unable to locate package debian-reference-en): run `apt-get update` first, or give "
                                 "--train_file")
    assert not list(cache.iterdir())  # nothing half-fetched left


def test_a_damaged_package_is_named_with_the_way_to_fetch_it_again(cache):
    cache.mkdir(parents=True)
    (cache / "debian-reference-en_2.100_all.deb").write_bytes(b"not an archive")
    with pytest.raises(FetchError, match=r"the cached download .*debian-reference-en_2.100_all.deb is damaged \(not an ar "
                                         r"archive\); remove it with `rm "):
        downloads.debian_reference(["en"])


def test_pretraining_on_the_built_in_multilingual_corpus(cache, tmp_path, capsys):
    """``--builtin_dataset debian_reference --languages en de``: each language held out on its own, results per
    language, and a card that names the data, its licence and its languages."""
    from tests.helpers import TINY_PRETRAIN_MODEL, assert_valid_model_card, read_json, run_command

    cache.mkdir(parents=True)
    for language, words in (("en", "the system shell file package user"), ("de", "das system datei paket nutzer und")):
        paragraphs = "\n".join(f"    {' '.join(words.split()[index % 6:] + words.split()[: index % 6])} number {index}\n"
                               f"    goes on here for {language}.\n" for index in range(30))
        fake_deb(cache / f"debian-reference-{language}_2.100_all.deb",
                 f"./usr/share/debian-reference/debian-reference.{language}.txt.gz", paragraphs)
    output_dir = tmp_path / "out"
    outcome = run_command([
        "pretrain", "--builtin_dataset", "debian_reference", "--languages", "en", "de", "--output_dir", output_dir,
        "--config_overrides", TINY_PRETRAIN_MODEL, "--vocab_size", "80", "--max_seq_length", "32", "--max_steps", "2",
        "--eval_strategy", "no", "--fill_mask_probes", "0", "--report_to", "none", "--disable_tqdm", "true",
        "--dataloader_pin_memory", "false",
    ], capsys)  # fmt: skip
    assert outcome.status == 0, outcome.err[-3000:]
    results = read_json(output_dir / "all_results.json")
    assert {"train_language_share_en", "train_language_share_de", "eval_de_mask_accuracy"} <= results.keys()
    card = (output_dir / "README.md").read_text()
    metadata = assert_valid_model_card(card)
    assert metadata["language"] == ["en", "de"]  # the languages the run read
    assert "The Debian Reference in 8 languages (built in, GPL-2+" in card
