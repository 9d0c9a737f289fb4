"""What 25 small job runs write, as one digest per file: the check that a refactoring changes nothing a user sees.

    python scripts/job_output_digest.py --output before.json          # on the commit before the change
    python scripts/job_output_digest.py --output after.json --compare before.json
    python scripts/job_output_digest.py --output after.json --compare before.json --ignore_keys DataFlags

Each case runs a job (``mlm-suite pretrain``, ``prepare-data``, the four fine-tuning jobs, ``seeds``) for a few
steps of a tiny model on small data made here (the MiniLM tokenizer from the cache, nothing from the Hub), each in
its own folder, in this process. Every file of its output folder is digested: weights by their tensors' values
(safetensors metadata aside), JSON by its content less what measures the machine (runtimes, rates, MFU), the model
card less its lines that do, other text and files byte for byte (plots are left out: they hold the run's timings
and matplotlib's version). ``--compare`` prints the files whose digests differ and exits 1 if any does. Two runs on
the same commit give the same digest (about 4 minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

# What measures the machine rather than the run: left out of JSON keys and card lines.
VOLATILE_KEY = re.compile(r"runtime|per_second|_mfu$|^seconds$|tokens_per_second|preparation_time")
VOLATILE_LINE = re.compile(r"per second|runtime|tokens/s|samples/s|FLOPs utilisation|\bin \d+(\.\d+)? s\b", re.I)


IGNORED_KEYS: set[str] = set()  # --ignore_keys: JSON keys a change is meant to change, left out on both sides


def digest_json(value):
    if isinstance(value, dict):
        return {key: digest_json(item) for key, item in value.items()
                if not VOLATILE_KEY.search(str(key)) and key not in IGNORED_KEYS}
    if isinstance(value, list):
        return [digest_json(item) for item in value]
    return value


def digest_file(path: Path) -> str | None:
    """The digest of one output file (None: left out)."""
    if path.suffix == ".png":
        return None
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        hasher = hashlib.sha256()
        with safe_open(str(path), framework="pt") as handle:
            for name in sorted(handle.keys()):
                tensor = handle.get_tensor(name)
                hasher.update(name.encode())
                hasher.update(str(tuple(tensor.shape)).encode() + str(tensor.dtype).encode())
                hasher.update(tensor.contiguous().view(-1).view(torch_uint8()).numpy().tobytes())
        return hasher.hexdigest()
    data = path.read_bytes()
    if path.suffix == ".json":
        text = json.dumps(digest_json(json.loads(data)), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()
    if path.name == "README.md":
        lines = [line for line in data.decode("utf-8").splitlines() if not VOLATILE_LINE.search(line)]
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return hashlib.sha256(data).hexdigest()


def torch_uint8():
    import torch

    return torch.uint8


def digest_folder(folder: Path) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.startswith("_mlm_suite.lock"):
            value = digest_file(path)
            if value is not None:
                found[str(path.relative_to(folder))] = value
    return found


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------
WORDS = ("the film was good and the plot works well the actors play their parts the music is loud a dull story "
         "nothing happens in the end the camera moves slowly over the city at night").split()


def sentence(rng, length: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(length)) + " ."


def make_inputs(folder: Path) -> dict[str, Path]:
    """A tiny mlm_suite model with the MiniLM tokenizer, a corpus, CSV/CoNLL/retrieval files: seeded, the same on every run."""
    import csv
    import random

    import torch
    from transformers import AutoTokenizer

    from mlm_suite import MlmSuiteConfig, MlmSuiteModel
    from mlm_suite.data.inputs import downloads

    rng = random.Random(0)
    tokenizer = AutoTokenizer.from_pretrained(downloads.minilm_dir())
    model = folder / "tiny"
    config = MlmSuiteConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=48, max_position_embeddings=128, hidden_dropout_prob=0.0)
    torch.manual_seed(0)
    MlmSuiteModel(config).save_pretrained(model)
    tokenizer.save_pretrained(model)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(sentence(rng, rng.randint(5, 14)) for _ in range(rng.randint(2, 5)))
                                  for _ in range(160)) + "\n", encoding="utf-8")
    rows = [(sentence(rng, rng.randint(4, 10)), sentence(rng, rng.randint(4, 10)), rng.choice(["pos", "neg"]),
             f"{rng.random() * 5:.2f}") for _ in range(60)]
    files = {}
    for name, header, pick in (("train", ["text", "sentence2", "label"], (0, 1, 2)),
                               ("scores", ["sentence1", "sentence2", "label"], (0, 1, 3))):
        with open(folder / f"{name}.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows([[row[index] for index in pick] for row in rows])
        files[name] = folder / f"{name}.csv"
    def tagged(words: list[str]) -> str:  # BIO: I-PER only after B-PER or I-PER
        tags = []
        for _ in words:
            inside = tags and tags[-1] != "O" and tags[-1] != "B-LOC" and rng.random() < 0.5
            tags.append("I-PER" if inside else rng.choice(["O", "O", "B-PER", "B-LOC"]))
        return "\n".join(f"{word} {tag}" for word, tag in zip(words, tags))

    conll = "\n\n".join(tagged(sentence(rng, rng.randint(3, 9)).split()) for _ in range(60))
    (folder / "train.conll").write_text(conll + "\n", encoding="utf-8")
    pairs = [{"query": sentence(rng, 4), "document": sentence(rng, 10)} for _ in range(40)]
    (folder / "pairs.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs), encoding="utf-8")
    documents = [{"id": f"d{index}", "text": pair["document"]} for index, pair in enumerate(pairs)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in documents), encoding="utf-8")
    queries = [{"query": pair["query"], "document_id": f"d{index}"} for index, pair in enumerate(pairs[:12])]
    (folder / "queries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in queries), encoding="utf-8")
    return {"model": model, "corpus": corpus, "csv": files["train"], "scores": files["scores"],
            "conll": folder / "train.conll", "pairs": folder / "pairs.jsonl", "documents": folder / "corpus.jsonl",
            "queries": folder / "queries.jsonl"}


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------
COMMON = ["--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false", "--logging_steps", "1"]
PRETRAIN = ["--config_overrides", "num_hidden_layers=2,hidden_size=32,num_attention_heads=4,intermediate_size=48",
            "--max_seq_length", "32", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8",
            "--max_steps", "6", "--eval_strategy", "steps", "--eval_steps", "3", "--fill_mask_probes", "2",
            "--max_eval_samples", "16", *COMMON]
FINETUNE = ["--max_seq_length", "32", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8",
            "--max_steps", "6", "--eval_strategy", "steps", "--eval_steps", "3", *COMMON]


def cases(inputs: dict[str, Path]) -> dict[str, list[list]]:
    """Case name → the command lines it runs in turn, ``{out}`` standing for its output folder."""
    model, corpus, csv, scores, conll, pairs = (inputs[name] for name in ("model", "corpus", "csv", "scores", "conll", "pairs"))
    pretrain = ["pretrain", "--train_file", corpus, "--output_dir", "{out}", *PRETRAIN, "--vocab_size", "120"]
    cls = ["finetune-cls", "--model_name_or_path", model, "--train_file", csv, "--output_dir", "{out}", *FINETUNE]
    pair = ["finetune-pair", "--model_name_or_path", model, "--train_file", csv, "--sentence1_column", "text",
            "--output_dir", "{out}", *FINETUNE]
    ner = ["finetune-ner", "--model_name_or_path", model, "--train_file", conll, "--output_dir", "{out}", *FINETUNE]
    retrieval = ["finetune-retrieval", "--model_name_or_path", model, "--train_file", pairs, "--corpus_file",
                 inputs["documents"], "--queries_file", inputs["queries"], "--output_dir", "{out}", *FINETUNE]
    return {
        "pretrain": [[*pretrain, "--save_strategy", "steps", "--save_steps", "2", "--save_total_limit", "2"]],
        "pretrain-nsp": [[*pretrain, "--objective", "mlm_nsp"]],
        "pretrain-schedules": [[*pretrain, "--masking", "whole_word", "--mlm_probability_schedule", "linear",
                                "--mlm_probability_end", "0.15", "--batch_size_warmup_tokens", "300"]],
        "pretrain-token-budget": [[*pretrain, "--masking", "span", "--max_tokens_per_batch", "128"]],
        "pretrain-flattened-accumulated": [[*pretrain, "--flatten_batches", "true", "--gradient_accumulation_steps", "2"]],
        "pretrain-streaming": [["pretrain", "--train_file", corpus, "--output_dir", "{out}", *PRETRAIN, "--streaming",
                                "--tokenizer_name", model, "--held_out_documents", "20"]],
        "pretrain-prepared": [["prepare-data", "--train_file", corpus, "--tokenizer_name", model, "--output_dir",
                               "{out}/data", "--max_seq_length", "32", "--packing"],
                              ["pretrain", "--prepared_data", "{out}/data", "--output_dir", "{out}/run", *PRETRAIN]],
        "pretrain-continued": [["pretrain", "--model_name_or_path", model, "--train_file", corpus, "--output_dir",
                                "{out}", "--head_warmup_steps", "2", "--early_stopping_patience", "3",
                                *PRETRAIN[2:]]],
        "pretrain-resumed": [[*pretrain, "--save_strategy", "steps", "--save_steps", "2", "--max_steps", "4"],
                             [*pretrain, "--save_strategy", "steps", "--save_steps", "2", "--max_steps", "6",
                              "--resume_from_checkpoint", "true"]],
        "pretrain-wsd": [[*pretrain, "--lr_scheduler_type", "warmup_stable_decay", "--lr_decay_steps", "0.5"]],
        "cls": [[*cls]],
        "cls-mean-worker": [[*cls, "--classifier_pooling", "mean", "--dataloader_num_workers", "1"]],
        "cls-best": [[*cls, "--save_strategy", "steps", "--save_steps", "3", "--load_best_model_at_end", "true",
                      "--metric_for_best_model", "accuracy"]],
        "cls-resumed": [[*cls, "--save_strategy", "steps", "--save_steps", "2", "--max_steps", "4"],
                        [*cls, "--save_strategy", "steps", "--save_steps", "2", "--resume_from_checkpoint", "true"]],
        "cls-intermediate": [[*cls, "--intermediate_train_file", csv, "--intermediate_num_train_epochs", "1"]],
        "cls-flattened": [[*cls, "--flatten_batches", "true"]],
        "pair": [[*pair]],
        "pair-regression": [["finetune-pair", "--model_name_or_path", model, "--train_file", scores, "--output_dir",
                             "{out}", *FINETUNE]],
        "ner": [[*ner]],
        "ner-crf": [[*ner, "--use_crf", "true"]],
        "ner-all-pieces": [[*ner, "--label_strategy", "all", "--label_smoothing_factor", "0.1"]],
        "retrieval": [[*retrieval]],
        "retrieval-cached": [[*retrieval, "--mini_batch_size", "2"]],
        "seeds": [["seeds", "finetune-cls", "--seeds", "1", "2", "--output_dir", "{out}", "--",
                   *[flag for flag in cls[1:] if flag not in ("--output_dir", "{out}")]]],
        "ner-resumed": [[*ner, "--save_strategy", "steps", "--save_steps", "3", "--max_steps", "3"],
                        [*ner, "--save_strategy", "steps", "--save_steps", "3", "--resume_from_checkpoint", "true"]],
    }


def run_case(name: str, commands: list[list], folder: Path, main: Callable) -> dict[str, str]:
    out = folder / name
    for command in commands:
        argv = [str(arg).replace("{out}", str(out)) for arg in command]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                status = main(argv)
            except SystemExit as exit_:
                status = exit_.code
        if status not in (0, None):
            raise SystemExit(f"case {name} failed ({status}): {' '.join(argv)}\n{err.getvalue()[-3000:]}")
    return digest_folder(out)


def compare(before: dict, after: dict) -> list[str]:
    differences = []
    for case in sorted(set(before) | set(after)):
        old, new = before.get(case, {}), after.get(case, {})
        for file in sorted(set(old) | set(new)):
            if old.get(file) != new.get(file):
                state = "only before" if file not in new else "only after" if file not in old else "differs"
                differences.append(f"{case}/{file}: {state}")
    return differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="the digest to write (JSON)")
    parser.add_argument("--compare", help="an earlier digest: print the files that differ, exit 1 if any")
    parser.add_argument("--cases", nargs="*", help="run only these cases")
    parser.add_argument("--ignore_keys", nargs="*", default=[],
                        help="JSON keys left out of the digests (what the change is meant to change)")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "mlm_suite_job_output_digest"),
                        help="scratch folder, emptied first (the same path on both runs: outputs record paths)")
    args = parser.parse_args(argv)
    IGNORED_KEYS.update(args.ignore_keys)
    from mlm_suite.cli import main as mlm_suite_main

    digests = {}
    folder = Path(args.work)
    shutil.rmtree(folder, ignore_errors=True)
    inputs = make_inputs(folder / "inputs")
    for name, commands in cases(inputs).items():
        if args.cases and name not in args.cases:
            continue
        digests[name] = run_case(name, commands, folder / "runs", mlm_suite_main)
        print(f"{name}: {len(digests[name])} files", file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)
    Path(args.output).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if args.compare:
        differences = compare(json.loads(Path(args.compare).read_text()), digests)
        print("\n".join(differences) or "identical")
        return 1 if differences else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
