"""Token-budget batches against row batches: the same held-out MLM loss after the same steps and tokens?

    python benchmarks/bench_token_budget.py --markdown outputs/token_budget/table.md   # 2 seeds, ~5 min on 2 CPU cores (OMP_NUM_THREADS=1)
    python benchmarks/bench_token_budget.py --steps 50 --seeds 0                       # a quick look

Every run is ``mlm-suite pretrain`` in this process on a small repetitive corpus (documents of 1 to 5 template
sentences, so rows of many lengths; no packing), a 2-layer hidden-64 model and one WordPiece vocabulary trained once.
``rows`` trains on ``--rows`` rows per step; ``token budget`` on ``--max_tokens_per_batch N`` with N the mean tokens of
such a step, so both see about the same tokens per step and in total. Each seed (initial weights and masks) runs
both. The table gives the final held-out MLM loss (fixed 15 % evaluation masks) per seed, the mean of each and their
difference against the spread between seeds: token-budget batches train like row batches when the difference is
within that spread. benchmarks/README.md has the results.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from mlm_suite.data.pretraining.vocabulary import train_wordpiece_tokenizer
from mlm_suite.jobs import pretrain

MODEL = (
    "num_hidden_layers=2,hidden_size=64,num_attention_heads=2,intermediate_size=128,max_position_embeddings=64,"
    "hidden_dropout_prob=0,attention_probs_dropout_prob=0"
)
SUBJECTS = "cats dogs birds kids cooks poets farmers sailors".split()
PLACES = "paris rome oslo lima cairo delhi quito perth".split()
FOODS = "bread rice fish soup cake corn beans pears".split()


def documents(count: int, seed: int) -> list[str]:
    """Documents of 1 to 5 sentences, each predictable from its words (subject, place and food go together)."""
    sentences = [f"the {s} from {p} like {f} ." for s, p, f in zip(SUBJECTS, PLACES, FOODS)]
    sentences += [f"every morning the {s} eat {f} in {p} ." for s, p, f in zip(SUBJECTS, PLACES, FOODS)]
    rng = random.Random(seed)
    return [" ".join(rng.choices(sentences, k=rng.randint(1, 5))) for _ in range(count)]


def run(output_dir: Path, data: dict[str, Path], seed: int, steps: int, *flags: str) -> float:
    results = output_dir / "all_results.json"
    if not results.is_file():  # finished runs are reused
        argv = [
            "--output_dir", str(output_dir), "--train_file", str(data["train"]), "--validation_file",
            str(data["validation"]), "--tokenizer_name", str(data["tokenizer"]), "--config_overrides", MODEL,
            "--max_seq_length", "64", "--max_steps", str(steps), "--learning_rate", "2e-3", "--eval_strategy", "no",
            "--logging_steps", "25", "--fill_mask_probes", "0", "--seed", str(seed), "--report_to", "none",
            "--disable_tqdm", "true", *flags,
        ]  # fmt: skip
        assert pretrain.main(argv) == 0
    return json.loads(results.read_text(encoding="utf-8"))["eval_mlm_loss"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/token_budget"))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rows", type=int, default=16, help="rows per step of the row-batch runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args(argv)

    folder = args.output_dir
    folder.mkdir(parents=True, exist_ok=True)
    train = documents(2000, seed=1)
    data = {"train": folder / "train.txt", "validation": folder / "validation.txt", "tokenizer": folder / "tokenizer"}
    data["train"].write_text("\n\n".join(train) + "\n", encoding="utf-8")
    data["validation"].write_text("\n\n".join(documents(200, seed=2)) + "\n", encoding="utf-8")
    tokenizer = train_wordpiece_tokenizer(train, vocab_size=200)
    tokenizer.save_pretrained(data["tokenizer"])
    row_tokens = statistics.mean(min(64, len(ids)) for ids in tokenizer(train)["input_ids"])
    budget = round(args.rows * row_tokens)
    contenders = {
        "rows": ["--per_device_train_batch_size", str(args.rows)],
        "token budget": ["--max_tokens_per_batch", str(budget)],
    }
    losses = {
        name: [run(folder / f"{name.replace(' ', '_')}_seed{seed}", data, seed, args.steps, *flags) for seed in args.seeds]
        for name, flags in contenders.items()
    }
    lines = [
        f"{args.steps} steps; rows: {args.rows} rows per step (mean {args.rows * row_tokens:.0f} tokens); token budget: "
        f"{budget} tokens per step; seeds {', '.join(map(str, args.seeds))}",
        "",
        "| batches | held-out MLM loss per seed | mean |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {', '.join(f'{v:.4f}' for v in values)} | {statistics.mean(values):.4f} |" for name, values in losses.items()]
    spread = max(max(values) - min(values) for values in losses.values())
    difference = statistics.mean(losses["token budget"]) - statistics.mean(losses["rows"])
    lines += ["", f"difference of the means {difference:+.4f}; largest spread between seeds {spread:.4f}"]
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
