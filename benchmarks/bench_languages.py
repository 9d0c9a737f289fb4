"""Several languages at one fixed budget: the sampling exponent, the vocabulary it draws, and a new language for MiniLM.

    python benchmarks/bench_languages.py                          # all four parts, about an hour and a half on 2 cores
    python benchmarks/bench_languages.py --parts sampling --seeds 1 --steps 300   # a smoke run of one part
    python benchmarks/bench_languages.py --markdown table.md      # the tables of docs/results.md

Data: the built-in Debian Reference (``--builtin_dataset debian_reference``: one manual in 8 languages, fetched once
with ``apt-get download``), made unequal as real corpora are: ``--languages`` with the share of each one's paragraphs
trained on (default en 100 %, de 25 %, fr 8 %, ja 4 %), one file per language; every language's last 150 paragraphs
are held out, never trained on (one ``--validation_file`` per language), so that each language is scored on as much
text whatever its share. Every run is ``mlm-suite pretrain`` in this process, scored with the same fixed masks.

* **sampling**: α = 1.0 (each language as often as it has rows), XLM-R's 0.3, and mmBERT's annealed 0.7 → 0.5 → 0.3, at
  ``--steps`` steps of the tiny preset, ``--seeds`` seeds: held-out ``[MASK]`` accuracy per language (mean ± standard
  deviation), its most-frequent-token baseline and the share of the rows each language got. All three with one
  vocabulary (trained on documents drawn with α 0.3), so that only the rows differ;
* **own-vocabulary**: the same three, each with a vocabulary trained on its own α-sampled documents (the job's default;
  the accuracies are then of other pieces, not comparable across rows);
* **vocabulary**: pieces per word of each language under a WordPiece and a Unigram vocabulary trained on documents
  drawn with α = 1.0 and with α = 0.3 (no training);
* **extension**: all-MiniLM-L6-v2 (English) continued for ``--extension_steps`` steps on German, with and without
  ``--extend_vocabulary 2000``: pieces per word, and held-out German ``[MASK]`` accuracy at equal steps (its pieces are
  then longer: the accuracy is per piece, not per word).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

from transformers import AutoTokenizer

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining.documents import read_documents
from mlm_suite.data.pretraining.languages import pieces_per_word, sample_multilingual_corpus
from mlm_suite.data.pretraining.vocabulary import train_tokenizer
from mlm_suite.jobs import pretrain

DEFAULT_SHARES = {"en": 1.0, "de": 0.25, "fr": 0.08, "ja": 0.04}
SAMPLINGS = {
    "α 1.0 (proportional)": ["--language_sampling_alpha", "1.0"],
    "α 0.3 (XLM-R)": ["--language_sampling_alpha", "0.3"],
    "α 0.7 → 0.5 → 0.3 (mmBERT)": ["--language_sampling_alpha_schedule", "0.7,0.5@0.3,0.3@0.7"],
}


PARTS = ["vocabulary", "sampling", "own-vocabulary", "extension"]
HELD_OUT = 150  # each language's last paragraphs, never trained on: held-out sets of one size, whatever the share


def write_languages(folder: Path, shares: dict[str, float]) -> tuple[list[Path], list[Path]]:
    """Two files per language, blank-line separated: for training, the first ``share`` of its Debian Reference
    paragraphs (at least 40); held out, its last :data:`HELD_OUT` paragraphs."""
    paragraphs = downloads.debian_reference(list(shares))
    files, held_out = [], []
    for language, share in shares.items():
        texts = paragraphs[language][:-HELD_OUT]
        kept = texts[: max(40, round(share * len(texts)))]
        files.append(folder / f"{language}.txt")
        files[-1].write_text("\n\n".join(kept) + "\n", encoding="utf-8")
        held_out.append(folder / "held_out" / f"{language}.txt")
        held_out[-1].parent.mkdir(exist_ok=True)
        held_out[-1].write_text("\n\n".join(paragraphs[language][-HELD_OUT:]) + "\n", encoding="utf-8")
    return files, held_out


def run_job(output_dir: Path, flags: list[str]) -> dict:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        status = pretrain.main(["--output_dir", str(output_dir), "--overwrite_output_dir", "--report_to", "none",
                                "--disable_tqdm", "true", "--fill_mask_probes", "0", "--eval_strategy", "no", *flags])
    if status:
        raise SystemExit(f"the run {output_dir.name} failed ({status})")
    return json.loads((output_dir / "all_results.json").read_text())


def mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def sampling(files: list[Path], held_out: list[Path], languages: list[str], steps: int, seeds: int, vocab_size: int,
             work: Path, shared: Path | None = None) -> str:
    """The three samplings, each with its own α-sampled vocabulary (the job's default), or all with the ``shared``
    tokenizer (the rows' effect alone). A cell: held-out [MASK] accuracy (mean ± sd over seeds), the language's
    most-frequent-token baseline and its share of the rows trained on."""
    vocabulary = ["--tokenizer_name", str(shared)] if shared else ["--vocab_size", str(vocab_size)]
    data = ["--train_file", *map(str, files), "--validation_file", *map(str, held_out), *vocabulary]
    rows = []
    for name, flags in SAMPLINGS.items():
        runs = [run_job(work / f"sampling-{'shared' if shared else 'own'}-{len(rows)}-{seed}",
                        [*data, *flags, "--max_steps", str(steps), "--seed", str(seed)]) for seed in range(seeds)]
        cells = []
        for language in languages:
            accuracy = mean_sd([run[f"eval_{language}_mask_accuracy"] for run in runs])
            baseline = statistics.mean(run[f"eval_{language}_mask_baseline_accuracy"] for run in runs)
            share = statistics.mean(run[f"train_language_share_{language}"] for run in runs)
            cells.append(f"{accuracy} ({baseline:.3f}; {share:.0%})")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
        print(rows[-1], file=sys.stderr, flush=True)
    kind = "one vocabulary for all, trained on documents drawn with α 0.3" if shared else "each its own vocabulary"
    header = f"| sampling ({kind}) | " + " | ".join(languages) + " |"
    return "\n".join([header, "|---|" + "---:|" * len(languages), *rows])


def shared_vocabulary(files: list[Path], languages: list[str], vocab_size: int, work: Path) -> Path:
    """A WordPiece vocabulary trained, as the job trains it, on documents drawn with α 0.3: one for every sampling."""
    corpora = {language: read_documents(str(file)) for language, file in zip(languages, files)}
    sample = sample_multilingual_corpus(corpora, sum(len(texts) for texts in corpora.values()), 0.3, seed=0)[0]
    folder = work / "shared-vocabulary"
    train_tokenizer("wordpiece", sample, vocab_size, several_languages=True).save_pretrained(folder)
    return folder


def vocabularies(files: list[Path], languages: list[str], vocab_size: int) -> str:
    corpora = {language: read_documents(str(file)) for language, file in zip(languages, files)}
    count = sum(len(texts) for texts in corpora.values())
    rows = []
    for kind in ("wordpiece", "unigram"):
        for alpha in (1.0, 0.3):
            sample = sample_multilingual_corpus(corpora, count, alpha, seed=0)[0]
            tokenizer = train_tokenizer(kind, sample, vocab_size, several_languages=True)
            rows.append(f"| {kind}, α {alpha:g} | " + " | ".join(f"{pieces_per_word(tokenizer, corpora[language][:500]):.2f}"
                                                                for language in languages) + " |")
    header = "| vocabulary (" + f"{vocab_size:,} pieces, trained on documents drawn with) | " + " | ".join(languages) + " |"
    return "\n".join([header, "|---|" + "---:|" * len(languages), *rows])


def extension(steps: int, seeds: int, work: Path) -> str:
    paragraphs = downloads.debian_reference(["de"])["de"]
    german, held_out = work / "de-full.txt", work / "de-held-out.txt"
    german.write_text("\n\n".join(paragraphs[:-HELD_OUT]) + "\n", encoding="utf-8")
    held_out.write_text("\n\n".join(paragraphs[-HELD_OUT:]) + "\n", encoding="utf-8")
    minilm = str(downloads.minilm_dir())
    data = ["--model_name_or_path", minilm, "--train_file", str(german), "--validation_file", str(held_out)]
    rows = []
    for name, flags in (("MiniLM's vocabulary", []), ("+ 2,000 German pieces (--extend_vocabulary 2000)",
                                                      ["--extend_vocabulary", "2000"])):
        runs = [run_job(work / f"extension-{len(rows)}-{seed}", [*data, "--max_steps", str(steps), "--seed", str(seed), *flags])
                for seed in range(seeds)]
        pieces = runs[0].get("pieces_per_word_after_extension")
        if pieces is None:
            pieces = pieces_per_word(AutoTokenizer.from_pretrained(minilm), german.read_text().split("\n\n")[:2000])
        rows.append(f"| {name} | {pieces:.2f} | {mean_sd([run['eval_mask_accuracy'] for run in runs])} | "
                    f"{runs[0]['eval_mask_baseline_accuracy']:.3f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    header = "| all-MiniLM-L6-v2 continued on German | pieces per word | German [MASK] accuracy | baseline |"
    return "\n".join([header, "|---|---:|---:|---:|", *rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS)
    parser.add_argument("--languages", nargs="+", default=[f"{language}={share}" for language, share in DEFAULT_SHARES.items()],
                        help="LANGUAGE=SHARE of its paragraphs kept")
    parser.add_argument("--steps", type=int, default=4000, help="steps of each sampling run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--vocab_size", type=int, default=8000, help="the trained vocabularies' size (Japanese characters "
                        "alone take up to 1,000 of a WordPiece vocabulary's places)")
    parser.add_argument("--extension_steps", type=int, default=300)
    parser.add_argument("--extension_seeds", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    args = parser.parse_args()
    shares = {item.split("=")[0]: float(item.split("=")[1]) for item in args.languages}
    tables = []
    with tempfile.TemporaryDirectory(prefix="bench-languages-") as folder:
        work = Path(folder)
        files, held_out = write_languages(work, shares)
        languages = list(shares)
        if "vocabulary" in args.parts:
            tables.append(vocabularies(files, languages, args.vocab_size))
        if "sampling" in args.parts:
            shared = shared_vocabulary(files, languages, args.vocab_size, work)
            tables.append(sampling(files, held_out, languages, args.steps, args.seeds, args.vocab_size, work, shared))
        if "own-vocabulary" in args.parts:
            tables.append(sampling(files, held_out, languages, args.steps, args.seeds, args.vocab_size, work))
        if "extension" in args.parts:
            tables.append(extension(args.extension_steps, args.extension_seeds, work))
    text = "\n\n".join(tables) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
