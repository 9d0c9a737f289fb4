"""Fine-tune a bi-encoder for retrieval with in-batch negatives and the HF Trainer.

Query and document are embedded by one encoder (``MlmSuiteForSentenceEmbedding``) and trained with the InfoNCE
ranking loss over the batch (plus any hard negatives); ``--mini_batch_size`` reaches large batches through gradient
caching. Without data flags it trains WordNet gloss retrieval (a usage example finds its synset's gloss). Reported:
recall@k, MRR@10 and nDCG@10, zero-shot and fine-tuned; the folder loads with sentence-transformers. See
docs/finetuning.md::

    mlm-suite finetune-retrieval --output_dir outputs/retrieval
    python examples/finetune_retrieval.py --train_file pairs.jsonl --corpus_file corpus.jsonl --queries_file dev.jsonl
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mlm_suite.data.inputs.builtin import BUILTIN_DATASETS
from mlm_suite.data.inputs.readers import Pair, RetrievalSplit, first_n, read_retrieval_split, read_training_pairs
from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.arguments import (
    check_at_least, check_file, check_positive, derived_training_arguments, parse_arguments,
)  # fmt: skip
from mlm_suite.jobs.common.output_folder import claim_output_folder, paths_read
from mlm_suite.jobs.common.checkpoints import resume_checkpoint
from mlm_suite.jobs.common.finetune_training import FinetuneTrainingArguments, card_training_summary, early_stopping, run_trainer, save_everything
from mlm_suite.jobs.common.model_loading import (
    ModelArguments,
    apply_freezing,
    check_max_seq_length,
    load_config,
    load_model,
    load_tokenizer,
    mlm_suite_checkpoint,
    resolve_model_path,
)
from mlm_suite.cards import CardDataset, RetrievalCard, card_base_model, card_scores, markdown_table

METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10")
#: What the job trains on without data flags.
EMBEDDED = BUILTIN_DATASETS["wordnet_gloss_retrieval"]
EMBEDDED_DATA = CardDataset.embedded(EMBEDDED.name, EMBEDDED.card_name)


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------
@dataclass
class RetrievalModelArguments(ModelArguments):
    sentence_pooling: Literal["mean", "cls", "max"] = field(
        default="mean", metadata={"help": "How token states become a sentence embedding (over the real tokens)."}
    )
    normalize_embeddings: bool = field(default=True, metadata={"help": "L2-normalise the embeddings."})
    temperature: float = field(
        default=0.05, metadata={"help": "Softmax temperature of the loss over cosine similarities (scale 1/T = 20)."}
    )
    learn_temperature: bool = field(default=False, metadata={"help": "Learn the temperature, starting at --temperature."})
    symmetric_loss: bool = field(
        default=False, metadata={"help": "Also rank the queries for each document and average the two losses."}
    )
    mini_batch_size: int | None = field(
        default=None,
        metadata={"help": "Gradient caching: embed at most this many texts at a time with a graph (the gradient is "
                          "the whole batch's). Default: the whole batch at once."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.classifier_pooling is not None:
            raise UsageError("--classifier_pooling is for classification heads; retrieval pools with --sentence_pooling")
        check_positive("temperature", self.temperature)
        check_at_least("mini_batch_size", self.mini_batch_size, 1)


@dataclass
class RetrievalDataArguments:
    train_file: str | None = field(default=None, metadata={"help": "CSV/TSV or JSON lines of query/document pairs."})
    corpus_file: str | None = field(default=None, metadata={"help": "Validation corpus: CSV/TSV or JSON lines of id/text."})
    queries_file: str | None = field(default=None, metadata={"help": "Validation queries with their relevant document ids."})
    test_corpus_file: str | None = field(default=None, metadata={"help": "Test corpus (id/text)."})
    test_queries_file: str | None = field(default=None, metadata={"help": "Test queries with relevant document ids."})
    query_column: str = field(default="query", metadata={"help": "Column of the query (training and query files)."})
    document_column: str = field(default="document", metadata={"help": "Column of the relevant document's text."})
    negative_column: str = field(
        default="negative", metadata={"help": "Optional column of hard negatives: a text, or in JSON a list of texts."}
    )
    id_column: str = field(default="id", metadata={"help": "Column of a corpus document's id."})
    text_column_name: str = field(
        default="text", metadata={"help": "Column of a corpus document's text."}
    )
    document_id_column: str = field(
        default="document_id", metadata={"help": "Column of a query's relevant document id (JSON: or a list of ids)."}
    )
    max_seq_length: int = field(default=128, metadata={"help": "Longer queries and documents are truncated."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation queries."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only the first N test queries."})

    def __post_init__(self) -> None:
        for flag in ("max_seq_length", "max_train_samples", "max_eval_samples", "max_predict_samples"):
            check_at_least(flag, getattr(self, flag), 1)
        evaluation_files = {"": (self.corpus_file, self.queries_file),
                            "test_": (self.test_corpus_file, self.test_queries_file)}
        for flag in ("train_file", *(f"{prefix}{kind}_file" for prefix in evaluation_files
                                     for kind in ("corpus", "queries"))):
            check_file(flag, getattr(self, flag))
        for prefix, (corpus, queries) in evaluation_files.items():
            if bool(corpus) != bool(queries):
                raise UsageError(f"--{prefix}corpus_file and --{prefix}queries_file go together: give both or neither")
        if not self.train_file and any(path for files in evaluation_files.values() for path in files):
            raise UsageError("--corpus_file/--queries_file need a --train_file (without data flags the WordNet task is used)")


@dataclass
class RetrievalTrainingArguments(FinetuneTrainingArguments):
    output_dir: str | None = field(default="outputs/retrieval", metadata={"help": "Where the model and results go."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Training epochs."})
    # Chosen by MRR@10 on the WordNet validation split (the sweep is in benchmarks/README.md).
    learning_rate: float = field(default=2e-4, metadata={"help": "Peak learning rate of AdamW."})
    per_device_train_batch_size: int = field(
        default=64, metadata={"help": "Queries per batch and device (each brings its document: 2x texts)."}
    )
    per_device_eval_batch_size: int = field(default=128, metadata={"help": "Texts per batch when embedding."})

    def __post_init__(self) -> None:
        if self.flatten_batches is False:
            raise UsageError("--flatten_batches false: finetune-retrieval always trains on flattened batches "
                             "(its queries and documents end to end, whatever the device)")
        self.flatten_batches = True
        if self.metric_for_best_model is None and self.load_best_model_at_end:
            self.metric_for_best_model = "mrr@10"  # the best model by validation MRR@10, as early stopping's
        super().__post_init__()
        if self.per_device_train_batch_size < 2:
            raise UsageError(
                f"--per_device_train_batch_size {self.per_device_train_batch_size}: in-batch-negative training needs "
                "at least 2 query/document pairs per batch (a query's negatives are the other pairs' documents)"
            )
        self.label_names = ["labels"]
        self.remove_unused_columns = False  # the examples' query/document/negatives are the collator's input


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def load_data(args: RetrievalDataArguments, seed: int) -> tuple[list[Pair], dict[str, RetrievalSplit], str]:
    """Training pairs, the validation/test splits and a description, from files or the embedded task."""
    if not args.train_file:
        pairs, splits = EMBEDDED.read(seed)
        return pairs, splits, EMBEDDED.description
    pairs = read_training_pairs(args.train_file, args.query_column, args.document_column, args.negative_column)
    files = {"validation": (args.corpus_file, args.queries_file), "test": (args.test_corpus_file, args.test_queries_file)}
    splits = {split: read_retrieval_split(corpus, queries, id_column=args.id_column, text_column=args.text_column_name,
                                          query_column=args.query_column, document_id_column=args.document_id_column)
              for split, (corpus, queries) in files.items() if corpus}
    described = [f"train: `{args.train_file}`"] + [f"{split}: `{queries}` over `{corpus}`"
                                                   for split, (corpus, queries) in files.items() if corpus]
    return pairs, splits, ", ".join(described)


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    from transformers import set_seed

    from mlm_suite import MlmSuiteForSentenceEmbedding
    from mlm_suite.training.retrieval import (
        EmbeddingPrediction, GradientCaching, RetrievalCollator, write_sentence_transformers_files,
    )  # fmt: skip
    from mlm_suite.training.trainer import JobTrainer, standard_features
    from mlm_suite.evaluation.retrieval import RetrievalMetrics, retrieval_eval_dataset, tokenize_texts

    model_args, data_args, training_args = parse_arguments(
        (RetrievalModelArguments, RetrievalDataArguments, RetrievalTrainingArguments), argv
    )
    # Detecting last checkpoint: --resume_from_checkpoint, or the last one of a stopped run in --output_dir (checked
    # against this run before the folder rule removes the earlier results)
    checkpoint = claim_output_folder(training_args.output_dir, {**model_args.sources(), **paths_read(data_args)},
                                     overwrite=training_args.overwrite_output_dir,
                                     resume=lambda: resume_checkpoint(training_args, trains=training_args.do_train))

    # Data
    pairs, splits, description = load_data(data_args, training_args.seed)
    pairs = first_n(pairs, data_args.max_train_samples)
    limits = {"validation": data_args.max_eval_samples, "test": data_args.max_predict_samples}
    splits = {name: split.limited(limits[name]) for name, split in splits.items()}
    # An epoch's last batch would hold one pair, without negatives: nothing to learn from.
    lone_pair = training_args.world_size == 1 and len(pairs) % training_args.per_device_train_batch_size == 1
    if lone_pair:
        print(f"each epoch leaves out one of the {len(pairs)} pairs (a batch of one has no negatives)", file=sys.stderr)

    # Model
    source = resolve_model_path(model_args.model_name_or_path, training_args)
    model_path = mlm_suite_checkpoint(source, **model_args.pretrained_kwargs())
    config = load_config(model_path, model_args)
    config.update(dict(
        sentence_pooling=model_args.sentence_pooling, normalize_embeddings=model_args.normalize_embeddings,
        contrastive_temperature=model_args.temperature, learn_temperature=model_args.learn_temperature,
        contrastive_symmetric=model_args.symmetric_loss,
    ))
    tokenizer = load_tokenizer(source, model_args, config)
    check_max_seq_length(data_args.max_seq_length, config, source, tokenizer)

    def tokenized_pairs() -> list[dict[str, Any]]:
        length = data_args.max_seq_length
        queries = tokenize_texts(tokenizer, [pair["query"] for pair in pairs], length)
        documents = tokenize_texts(tokenizer, [pair["document"] for pair in pairs], length)
        return [{"query": q, "document": d, "negatives": tokenize_texts(tokenizer, pair["negatives"], length)
                 if pair["negatives"] else []} for q, d, pair in zip(queries, documents, pairs)]

    datasets: dict[str, Any] = {"train": tokenized_pairs()}
    for name, split in splits.items():
        datasets[name] = retrieval_eval_dataset(tokenizer, split.queries, split.corpus, data_args.max_seq_length)
    metrics_of = {name: RetrievalMetrics(split.relevant) for name, split in splits.items()}

    set_seed(training_args.seed)
    model = load_model(MlmSuiteForSentenceEmbedding, model_path, config, model_args)
    trainable = apply_freezing(model, model_args.train_last_k_layers)
    trainer_args, callbacks = early_stopping(
        derived_training_arguments(training_args, dataloader_drop_last=True) if lone_pair else training_args, "mrr@10"
    )
    features = [*standard_features(), EmbeddingPrediction()]
    if model_args.mini_batch_size is not None:
        features.append(GradientCaching(model_args.mini_batch_size))
    trainer = JobTrainer(
        model=model,
        args=trainer_args,
        train_dataset=datasets["train"],
        eval_dataset=datasets.get("validation"),
        processing_class=tokenizer,
        data_collator=RetrievalCollator(),
        compute_metrics=metrics_of.get("validation"),
        callbacks=callbacks,
        features=features,
    )

    def score(split: str, prefix: str) -> dict[str, float]:
        trainer.compute_metrics = metrics_of[split]
        return trainer.evaluate(datasets[split], metric_key_prefix=prefix)

    # Training, after scoring the starting model; evaluation on the validation split
    metrics: dict[str, dict[str, float]] = {}
    if training_args.do_train:  # the starting model, for comparison, on the splits scored at the end
        scored = {"validation": training_args.do_eval, "test": training_args.do_predict}
        metrics |= {prefix: score(split, prefix) for split, prefix in
                    (("validation", "zero_shot_eval"), ("test", "zero_shot_test")) if split in datasets and scored[split]}
    trainer.compute_metrics = metrics_of.get("validation")  # early stopping and the best model go by validation
    metrics |= run_trainer(trainer, {name: datasets[name] for name in ("train", "validation") if name in datasets},
                           training_args, checkpoint=checkpoint)

    # Predict: the test split, scored by its own relevance judgements
    if training_args.do_predict and "test" in datasets:
        metrics["test"] = score("test", "test")
    save_everything(trainer, metrics)
    if trainer.is_world_process_zero():
        write_sentence_transformers_files(training_args.output_dir, model.config, data_args.max_seq_length)

    # Model card and summary
    flat = {key: value for values in metrics.values() for key, value in values.items()}
    # (split, model, metric key prefix) of every scored evaluation, for the card and the summary lines
    scored_runs = [(split, stage, key) for split, prefix in (("validation", "eval"), ("test", "test"))
                   for stage, key in (("zero-shot", f"zero_shot_{prefix}"), ("fine-tuned", prefix)) if f"{key}_mrr@10" in flat]
    table = [f"| split | model | {' | '.join(METRICS)} |", "|---" * (len(METRICS) + 2) + "|"]
    table += [f"| {split} | {stage} | " + " | ".join(f"{flat[f'{key}_{name}']:.4f}" for name in METRICS) + " |"
              for split, stage, key in scored_runs]
    sizes = {name: f"{len(split.queries):,} queries, {len(split.corpus):,} documents" for name, split in splits.items()}
    trainer.publish(RetrievalCard(
        pipeline_tag="sentence-similarity",
        task_description="A sentence-embedding (bi-encoder retrieval) model",
        base_model=card_base_model(source, model_args.init),
        **_embedding_fields(model.config),
        data=description + "\n\n" + markdown_table({"train": f"{len(pairs):,} query/document pairs", **sizes},
                                                    ("split", "size")),
        training=card_training_summary(
            training_args, source, model_args,
            {"loss": _loss_text(model.config), "max_seq_length": data_args.max_seq_length,
             "mini_batch_size (gradient caching)": model_args.mini_batch_size or "none", "trained layers": trainable},
        ),
        metrics=("Recall@k, MRR@10 and nDCG@10 (cosine similarity, the whole corpus of the split ranked for each "
                 "query), before (zero-shot) and after fine-tuning.\n\n" + "\n".join(table)) if scored_runs else
                "Not evaluated: the run had no evaluation split (--corpus_file with --queries_file).",
        dataset=CardDataset.read_by_job(None, None, (data_args.train_file, data_args.corpus_file, data_args.queries_file,
                                                     data_args.test_corpus_file, data_args.test_queries_file),
                                        EMBEDDED_DATA),
        scores=card_scores(flat, {name: (name, f"{name} (cosine similarity)") for name in METRICS}),  # fine-tuned only
    ))
    if trainer.is_world_process_zero():
        for split in dict.fromkeys(split for split, _, _ in scored_runs):
            print(f"{split}: " + ", ".join(f"{stage} mrr@10 = {flat[f'{key}_mrr@10']:.4f}"
                                          for run_split, stage, key in scored_runs if run_split == split))
        print(f"saved the model (sentence-transformers and transformers), tokenizer, model card and all_results.json "
              f"to {training_args.output_dir}")
    return 0


def _embedding_fields(config: Any) -> dict[str, str]:
    """The card's account of the embeddings and the pooling lines of its transformers-only snippet."""
    pooling = {
        "mean": 'mask = batch["attention_mask"][..., None].to(states.dtype)\n'
                "embeddings = (states * mask).sum(1) / mask.sum(1)",
        "cls": 'first = batch["attention_mask"].argmax(1)  # the [CLS] token, whichever side the pads are\n'
               "embeddings = states[torch.arange(len(states)), first]",
        "max": 'embeddings = states.masked_fill(batch["attention_mask"][..., None] == 0, -1e9).amax(1)',
    }[config.sentence_pooling]
    if config.normalize_embeddings:
        pooling += "\nembeddings = torch.nn.functional.normalize(embeddings, dim=-1)"
    what = {"mean": "the mean of the token states", "cls": "the `[CLS]` token state",
            "max": "the element-wise maximum of the token states"}[config.sentence_pooling]
    text = (f"{config.hidden_size} dimensions: {what} over the real tokens"
            + (", L2-normalised" if config.normalize_embeddings else "") + "; compare them by cosine similarity.")
    return {"embeddings": text, "pooling_code": pooling}


def _loss_text(config: Any) -> str:
    temperature = (f"learned, from {config.contrastive_temperature:g}" if config.learn_temperature
                   else f"{config.contrastive_temperature:g}")
    direction = "query → document and document → query, averaged" if config.contrastive_symmetric else "query → document"
    return f"in-batch negatives (InfoNCE) over cosine similarities, temperature {temperature}, {direction}"


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    raise SystemExit(run_job(main))
