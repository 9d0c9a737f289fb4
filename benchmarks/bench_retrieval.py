"""Retrieval fine-tuning: mlm_suite against sentence-transformers' own training of the same MiniLM (issue 15).

    python benchmarks/bench_retrieval.py --output_dir outputs/bench_retrieval --markdown outputs/bench_retrieval/table.md
    make bench-retrieval

The task is ``mlm-suite finetune-retrieval``'s embedded default, WordNet gloss retrieval (a synset's usage
example → its gloss, synsets split 80/10/10 by the seed). Per seed, in one process:

1. **Zero-shot** all-MiniLM-L6-v2: the mlm_suite conversion (``MlmSuiteForSentenceEmbedding``, mean pooling,
   normalised) and sentence-transformers' own model built from the same weights (Transformer + mean Pooling +
   Normalize) are scored with the same metric code; they must agree.
2. **mlm_suite**: ``finetune-retrieval`` (in-batch negatives, cosine similarity / 0.05) from the converted MiniLM.
3. **sentence-transformers**: ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss`` (scale 20 =
   1 / 0.05, cosine similarity) from the original MiniLM, with the same pairs, batch size, epochs, learning
   rate, warm-up, schedule, weight decay and seed.

Finished seeds (``seed_<n>/rows.json``) are reused. With ``--rerank`` (the issue's stretch goal) a cross-encoder
(``finetune-pair`` from MiniLM on query/gloss pairs, hard negatives mined by the first seed's fine-tuned
bi-encoder) then reorders that bi-encoder's top ``--rerank_top_k`` test documents.

Both fine-tuned models are scored on the test split with :func:`mlm_suite.evaluation.retrieval.retrieval_metrics`; the
sentence-transformers model is also scored by its own ``InformationRetrievalEvaluator`` as a check on the
metric code. Training time is the Trainer's ``train_runtime`` of each (sentence-transformers tokenises inside
its collator; mlm_suite tokenises before training, about a second for the whole set, not counted).
Printed: one row per system with mean ± sample sd over the seeds of recall@1/10, MRR@10 and nDCG@10 on the
test split and of the training time, then the paired per-seed MRR@10 differences.

Needs the ``retrieval`` extra (``pip install -e ".[retrieval]"``: sentence-transformers). Run it on a quiet
machine; ``--threads`` fixes torch's CPU threads so both systems get the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from mlm_suite.data.inputs import downloads
from mlm_suite.data.inputs.builtin import wordnet_gloss_splits
from mlm_suite.jobs import finetune_retrieval
from mlm_suite.evaluation.retrieval import rank_documents, retrieval_metrics

METRICS = ("recall@1", "recall@10", "mrr@10", "ndcg@10")


def score_sentence_transformer(model, split) -> dict[str, float]:
    queries = model.encode(split.queries, batch_size=128, convert_to_tensor=True, show_progress_bar=False)
    corpus = model.encode(split.corpus, batch_size=128, convert_to_tensor=True, show_progress_bar=False)
    return retrieval_metrics(rank_documents(queries.cpu(), corpus.cpu(), 10), split.relevant)


def sentence_transformers_minilm(max_seq_length: int):
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(downloads.minilm_dir()), max_seq_length=max_seq_length)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu")


def own_evaluator_mrr(model, split) -> float:
    """MRR@10 by sentence-transformers' InformationRetrievalEvaluator (a check on :func:`retrieval_metrics`)."""
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    evaluator = InformationRetrievalEvaluator(
        queries={f"q{i}": text for i, text in enumerate(split.queries)},
        corpus={f"d{i}": text for i, text in enumerate(split.corpus)},
        relevant_docs={f"q{i}": {f"d{d}" for d in docs} for i, docs in enumerate(split.relevant)},
        mrr_at_k=[10], ndcg_at_k=[10], accuracy_at_k=[1], precision_recall_at_k=[1, 10], map_at_k=[10],
        show_progress_bar=False, batch_size=128, name="test",
    )
    results = evaluator(model)
    return next(value for key, value in results.items() if key.endswith("cosine_mrr@10"))


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    out = Path(args.output_dir) / f"seed_{seed}"
    if (out / "rows.json").is_file():  # a finished seed (an interrupted benchmark continues where it stopped)
        return json.loads((out / "rows.json").read_text())
    pairs, splits = wordnet_gloss_splits(seed)
    pairs = pairs[: args.max_train_samples] if args.max_train_samples else pairs
    test = splits["test"]
    rows: dict[str, dict[str, float]] = {}

    # sentence-transformers: zero-shot, then its own fine-tuning
    model = sentence_transformers_minilm(args.max_seq_length)
    rows["zero-shot MiniLM (sentence-transformers)"] = score_sentence_transformer(model, test)
    training = SentenceTransformerTrainingArguments(
        output_dir=str(out / "sentence_transformers"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate, warmup_steps=0.1,
        lr_scheduler_type="linear", weight_decay=0.0, seed=seed, save_strategy="no", logging_steps=50,
        report_to=[], use_cpu=True, dataloader_drop_last=False,
    )
    data = Dataset.from_dict({"anchor": [p["query"] for p in pairs], "positive": [p["document"] for p in pairs]})
    trainer = SentenceTransformerTrainer(
        model=model, args=training, train_dataset=data, loss=MultipleNegativesRankingLoss(model, scale=20.0)
    )
    started = time.perf_counter()
    result = trainer.train()
    st_wall = time.perf_counter() - started
    rows["sentence-transformers MNRL"] = score_sentence_transformer(model, test) | {
        "train_seconds": result.metrics["train_runtime"], "wall_seconds": st_wall,
        "own_evaluator_mrr@10": own_evaluator_mrr(model, test),
    }

    # mlm_suite: the job, from the converted MiniLM
    job_dir = out / "mlm_suite"
    flags = ["--output_dir", str(job_dir), "--overwrite_output_dir", "--seed", str(seed), "--num_train_epochs", str(args.epochs),
             "--per_device_train_batch_size", str(args.batch_size), "--learning_rate", str(args.learning_rate),
             "--max_seq_length", str(args.max_seq_length), "--do_eval", "False", "--report_to", "none",
             "--use_cpu", "True"]
    if args.max_train_samples:
        flags += ["--max_train_samples", str(args.max_train_samples)]
    started = time.perf_counter()
    finetune_retrieval.main(flags)
    results = json.loads((job_dir / "all_results.json").read_text())
    rows["zero-shot MiniLM (mlm_suite)"] = {name: results[f"zero_shot_test_{name}"] for name in METRICS}
    rows["mlm_suite finetune-retrieval"] = {name: results[f"test_{name}"] for name in METRICS} | {
        "train_seconds": results["train_runtime"], "wall_seconds": time.perf_counter() - started,
    }
    (out / "rows.json").write_text(json.dumps(rows, indent=2))
    return rows


def rerank_stage(seed: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """The stretch goal: a cross-encoder (``finetune-pair`` from MiniLM) reranking the fine-tuned bi-encoder's top k.

    Its training pairs come from ``--rerank_train_queries`` training queries: the query with its gloss
    (``relevant``), with the wrong gloss the bi-encoder ranks highest and with a random wrong gloss (both
    ``irrelevant``: with hard negatives alone the cross-encoder learns to push down whatever the bi-encoder
    likes, the right gloss included); validation pairs likewise from 500 validation queries. Returns the test metrics before and after reranking.
    """
    import random

    from transformers import AutoTokenizer

    from mlm_suite import MlmSuiteForPairClassification, MlmSuiteForSentenceEmbedding
    from mlm_suite.jobs import finetune_pair
    from mlm_suite.evaluation.retrieval import embed_texts, rerank

    pairs, splits = wordnet_gloss_splits(seed)
    out = Path(args.output_dir) / f"seed_{seed}"
    bi_encoder_dir = out / "mlm_suite"
    bi_encoder = MlmSuiteForSentenceEmbedding.from_pretrained(bi_encoder_dir)
    tokenizer = AutoTokenizer.from_pretrained(bi_encoder_dir)

    rng = random.Random(seed)

    def hard_pairs(queries: list[str], golds: list[str], corpus: list[str]) -> list[dict]:
        """Per query: its gloss, the wrong gloss the bi-encoder ranks highest and a random wrong gloss."""
        ranked = rank_documents(embed_texts(bi_encoder, tokenizer, queries, progress=False),
                                embed_texts(bi_encoder, tokenizer, corpus, progress=False), 2)
        rows = []
        for query, gold, top in zip(queries, golds, ranked.tolist()):
            hardest = next(corpus[d] for d in top if corpus[d] != gold)
            drawn = next(text for text in iter(lambda: rng.choice(corpus), None) if text != gold)
            rows += [{"sentence1": query, "sentence2": gold, "label": "relevant"},
                     {"sentence1": query, "sentence2": hardest, "label": "irrelevant"},
                     {"sentence1": query, "sentence2": drawn, "label": "irrelevant"}]
        return rows

    chosen = rng.sample(pairs, min(args.rerank_train_queries, len(pairs)))
    train_corpus = sorted({pair["document"] for pair in pairs})
    validation = splits["validation"]
    files = {
        "train": hard_pairs([p["query"] for p in chosen], [p["document"] for p in chosen], train_corpus),
        "validation": hard_pairs(validation.queries[:500],
                                 [validation.corpus[next(iter(r))] for r in validation.relevant[:500]], validation.corpus),
    }
    for name, rows in files.items():
        (out / f"rerank_{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    cross_dir = out / "cross_encoder"
    started = time.perf_counter()
    finetune_pair.main(["--train_file", str(out / "rerank_train.jsonl"), "--validation_file", str(out / "rerank_validation.jsonl"),
                        "--output_dir", str(cross_dir), "--overwrite_output_dir", "--seed", str(seed), "--num_train_epochs", "1",
                        "--learning_rate", str(args.learning_rate), "--max_seq_length", str(args.max_seq_length),
                        "--report_to", "none", "--use_cpu", "True", "--disable_tqdm", "True"])
    train_seconds = time.perf_counter() - started
    test = splits["test"]
    ranked = rank_documents(embed_texts(bi_encoder, tokenizer, test.queries, progress=False),
                            embed_texts(bi_encoder, tokenizer, test.corpus, progress=False), args.rerank_top_k)
    cross_encoder = MlmSuiteForPairClassification.from_pretrained(cross_dir)
    reranked = rerank(cross_encoder, AutoTokenizer.from_pretrained(cross_dir), test.queries, test.corpus, ranked,
                      top_k=args.rerank_top_k, progress=False)
    validation_accuracy = json.loads((cross_dir / "all_results.json").read_text())["eval_accuracy"]
    return {
        "bi-encoder (mlm_suite)": retrieval_metrics(ranked, test.relevant),
        f"+ cross-encoder reranking top {args.rerank_top_k}": retrieval_metrics(reranked, test.relevant) | {
            "train_seconds": train_seconds, "pair_validation_accuracy": validation_accuracy,
            "train_pairs": len(files["train"])},
    }


def mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}"


def table(per_seed: dict[int, dict[str, dict[str, float]]]) -> str:
    systems = list(next(iter(per_seed.values())))
    lines = ["| system | " + " | ".join(METRICS) + " | train s |", "|---" * (len(METRICS) + 2) + "|"]
    for system in systems:
        cells = [mean_sd([rows[system][name] for rows in per_seed.values()]) for name in METRICS]
        seconds = [rows[system]["train_seconds"] for rows in per_seed.values() if "train_seconds" in rows[system]]
        cells.append(f"{statistics.fmean(seconds):.0f}" if seconds else "")
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    differences = [rows["mlm_suite finetune-retrieval"]["mrr@10"] - rows["sentence-transformers MNRL"]["mrr@10"]
                   for rows in per_seed.values()]
    ratios = [rows["sentence-transformers MNRL"]["train_seconds"] / rows["mlm_suite finetune-retrieval"]["train_seconds"]
              for rows in per_seed.values()]
    checks = [rows["sentence-transformers MNRL"]["own_evaluator_mrr@10"] - rows["sentence-transformers MNRL"]["mrr@10"]
              for rows in per_seed.values()]
    lines += [
        "",
        f"seeds {sorted(per_seed)}; test split; MRR@10 mlm_suite − sentence-transformers per seed: "
        + ", ".join(f"{100 * d:+.2f}" for d in differences) + f" points (mean {100 * statistics.fmean(differences):+.2f});",
        "training-time ratio sentence-transformers / mlm_suite per seed: " + ", ".join(f"{r:.2f}" for r in ratios)
        + f"; sentence-transformers' own evaluator − ours, MRR@10: {max(abs(c) for c in checks):.1e} at most",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="outputs/bench_retrieval")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_train_samples", type=int, help="default: every training pair")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--rerank", action="store_true",
                        help="also train a cross-encoder and rerank the first seed's bi-encoder results (the stretch goal)")
    parser.add_argument("--rerank_train_queries", type=int, default=5000)
    parser.add_argument("--rerank_top_k", type=int, default=20)
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    per_seed = {seed: run_seed(seed, args) for seed in args.seeds}
    text = table(per_seed)
    if args.rerank:
        seed = args.seeds[0]
        rows = rerank_stage(seed, args)
        (Path(args.output_dir) / f"seed_{seed}" / "rerank_rows.json").write_text(json.dumps(rows, indent=2))
        text += f"\n\nReranking, seed {seed}, test split:\n\n| system | " + " | ".join(METRICS) + " |\n" + "|---" * (len(METRICS) + 1) + "|\n"
        text += "\n".join(f"| {name} | " + " | ".join(f"{row[m]:.4f}" for m in METRICS) + " |" for name, row in rows.items())
        extra = rows[f"+ cross-encoder reranking top {args.rerank_top_k}"]
        text += (f"\n\ncross-encoder: {extra['train_pairs']:,} training pairs, validation pair accuracy "
                 f"{extra['pair_validation_accuracy']:.4f}, fine-tuning {extra['train_seconds']:.0f} s")
    print(text)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(text + "\n")


if __name__ == "__main__":
    main()
