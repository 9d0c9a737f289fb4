"""MLM (+NSP) pretraining of an mlm_suite encoder with the Hugging Face ``Trainer``.

    mlm-suite pretrain --output_dir outputs/pretrain          # embedded default data, about 8 minutes on 2 CPU cores
    mlm-suite pretrain --max_train_minutes 30 --config_preset mini --output_dir outputs/mini   # a fixed time budget
    python examples/pretrain_mlm.py --train_file corpus.txt --output_dir runs/mine --masking whole_word
    mlm-suite pretrain --train_file docs.jsonl --objective mlm_nsp --max_steps -1 --num_train_epochs 3
    mlm-suite pretrain --prepared_data data/corpus-128 --max_steps 100000 --output_dir runs/big   # see prepare-data
    mlm-suite pretrain --streaming --train_file big.txt --tokenizer_name outputs/pretrain --max_steps 100000
    mlm-suite pretrain --model_name_or_path bert-folder --head_warmup_steps 50 --max_seq_length 128 --output_dir dapt
    accelerate launch --config_file examples/accelerate_configs/ddp_single_node.yaml examples/pretrain_mlm.py ...
    accelerate launch --multi_gpu --num_processes 2 examples/pretrain_mlm.py --use_cpu true ...   # 2 CPU processes (gloo)

(``accelerate launch --cpu --num_processes 2`` starts a single process unless MPI is set up; docs/data.md lists the
launch recipes of ``examples/accelerate_configs/``: DDP on one or several nodes, FSDP2, CPU processes.)

Data: ``--train_file`` (plain text with one document per blank-line-separated block, or JSON
lines with a ``text`` field when the name ends in ``.json``/``.jsonl``), ``--dataset_name`` (a
``datasets.load_dataset`` name, for machines that reach the Hub), or, with neither, the embedded
default: the 1,500 Pang & Lee movie reviews (``mlm_suite.data.resources.pang_lee_reviews``). The
held-out documents are ``--validation_file`` or a seeded ``--validation_split_percentage`` of the
training documents. Corpora larger than memory: ``--prepared_data`` (rows tokenised once by
``mlm-suite prepare-data``, memory-mapped) or ``--streaming`` (tokenised on the fly; see
``mlm_suite.jobs.corpus_sources``).

Continued (domain-adaptive) pretraining: ``--model_name_or_path`` starts from an mlm_suite checkpoint (any head)
or a Hugging Face BERT folder (converted on the fly, :func:`mlm_suite_checkpoint`) and uses its tokenizer; a head
the checkpoint lacks is created as BERT initialises it (the MLM decoder tied to the word embeddings, so only the
transform and the decoder bias are new) and named on stderr. ``--head_warmup_steps N`` trains only the new heads
for the first N optimizer steps. Continuing a checkpoint changes three defaults (``CONTINUED_DEFAULTS``, chosen by
``benchmarks/bench_continued_defaults.py``): a fine-tuning-scale learning rate, BERT's 15 % training masks and
fewer steps; the architecture and dropout are the checkpoint's. The job prints which defaults applied.

Every argument of ``transformers.TrainingArguments`` is accepted; ``PretrainTrainingArguments`` lists the ones
whose defaults differ here (sized so the embedded default fits the time budget); flags given on the
command line always win. Masks are
seeded: a training mask is a function of ``(--seed, epoch, example index)`` and changes every
epoch; evaluation masks and NSP pairs use a fixed seed and their own rate (``--eval_mlm_probability``,
BERT's 15 %), so eval numbers compare across runs and recipes.

Evaluation reports accuracy at ``[MASK]`` positions (the headline), at random-token and kept
positions, top-5 accuracy and the most-frequent-token baseline at ``[MASK]`` positions, and the MLM
loss (``mlm_suite.evaluation.masked_lm``); a fill-mask probe shows the top-5 answers on held-out sentences.
``--max_train_minutes`` trains for a wall-clock budget with a schedule that ends there
(``mlm_suite.training.controls.TimeBudgetCallback``); ``--early_stopping_patience`` stops when the ``[MASK]``
accuracy stops improving and keeps the best model.

Modern pretraining controls (``mlm_suite.training.schedules``; none is on by default):

    mlm-suite pretrain --mlm_probability 0.3 --mlm_probability_schedule linear --mlm_probability_end 0.15
    mlm-suite pretrain --mlm_probability_schedule 0.3,0.15@0.6,0.05@0.9      # mmBERT-style inverse phases
    mlm-suite pretrain --mask_replace_prob 1.0 --random_replace_prob 0       # EuroBERT: every selected token [MASK]
    mlm-suite pretrain --batch_size_warmup_tokens 2000000 --batch_size_warmup_min_rows 4
    mlm-suite pretrain --lr_scheduler_type warmup_stable_decay --lr_decay_steps 0.2 --lr_decay_type 1-sqrt
    mlm-suite pretrain --lr_scheduler_type warmup_stable_decay --save_strategy steps --save_steps 2000 --output_dir wsd
    mlm-suite pretrain --decay_from_checkpoint wsd/checkpoint-6000 --lr_decay_steps 1200 --output_dir wsd-decay-6000
    mlm-suite pretrain --model_name_or_path outputs/pretrain --max_seq_length 128 --rope_theta 40000 --output_dir ctx128

A masking-rate schedule changes the rate per optimizer step (the rate travels with the step's rows, so every
process and dataloader worker applies it, and a resumed run repeats it); evaluation masks stay fixed. Batch-size
warmup grows the rows per step over the first N tokens (each step's loss stays the mean over its labelled tokens).
Warmup-stable-decay keeps ``--max_train_minutes`` ending its decay at the budget; ``--decay_from_checkpoint`` decays a
stable-phase checkpoint. ``--rope_theta`` with a rotary ``--model_name_or_path`` at longer rows extends its context
(the last example: 64-token rows to 128, the continued-pretraining defaults apply). Which controls applied is
printed at the start, logged per step (``mlm_probability``, ``train_rows_per_step``) and shown in the card;
``benchmarks/bench_pretrain_controls.py`` measures them at a fixed budget.

The output folder is a complete checkpoint, the one ``trainer.push_to_hub()`` uploads: weights,
config with ``auto_map``, model code, tokenizer, model card (``README.md``), ``all_results.json``,
``train_results.json``, ``eval_results.json``, ``trainer_state.json``, ``training_args.json``,
``fill_mask_probe.json`` and ``training_curves.png`` (the losses, and the held-out ``[MASK]`` accuracy against
the baseline per evaluation, shown in the card); nothing in it (or in a ``checkpoint-*`` folder) is a pickle. With ``--push_to_hub`` it is uploaded once, after the card is written.
Every input is validated before that folder is created.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from transformers import TrainingArguments, set_seed

from mlm_suite.data.readers import load_pretraining_documents, read_documents
from mlm_suite.data.masking import MaskingEpochCallback
from mlm_suite.data.pretraining import EVAL_SEED, build_features, first_rows, most_frequent_row_token
from mlm_suite.evaluation.masked_lm import make_mlm_compute_metrics, preprocess_logits_for_mlm_metrics, probe_sentences
from mlm_suite.evaluation.plots import figures_section, plot_pretraining_curves
from mlm_suite.cards import pretraining_card
from mlm_suite.training.controls import early_stopping_callback, rows_per_step
from mlm_suite.training.pretraining import (
    PretrainingTrainer, describe_evaluation, evaluate_pretraining, evaluation_collator, training_collator,
)  # fmt: skip
# time_budget_callback is looked up here when the job runs: benchmarks replace it in this module.
from mlm_suite.training.schedules import (
    UNBOUNDED_STEPS, control_card_rows, describe_controls, lr_schedule_summary, resolve_controls, row_schedule,
    time_budget_callback,
)  # fmt: skip
from mlm_suite.jobs.pretraining_setup import (
    DEFAULT_TRAINED_VOCAB_SIZE, build_config, build_model, describe_configuration, describe_new_weights, load_tokenizer,
    resolve_job_defaults, validate_arguments,
)  # fmt: skip
from mlm_suite.jobs import arguments
from mlm_suite.jobs.checkpoints import resume_checkpoint
from mlm_suite.jobs.corpus_sources import open_corpus_source
from mlm_suite.jobs.arguments import (
    HubArguments,
    JobTrainingArguments,
    overwrite_cache_field,
    preprocessing_num_workers_field,
    validate_flags,
    validation_split_name_field,
)
from mlm_suite.jobs.model_loading import mlm_suite_checkpoint

CURVES_PNG = "training_curves.png"
CURVES_CAPTION = "Pretraining: train and held-out loss, and held-out [MASK] accuracy against the most-frequent-token baseline"

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
    # The collator consumes word_ids, special_tokens_mask and example_index itself (forced in resolve_job_defaults).
    remove_unused_columns: bool = field(default=False, metadata={"help": "Forced off: the collator needs its columns."})
    ddp_find_unused_parameters: bool | None = field(
        default=False, metadata={"help": "Every parameter takes part in every step."}
    )


# Defaults that replace the from-scratch ones above (and PretrainingArguments') when --model_name_or_path continues
# a checkpoint; flags given on the command line still win. The from-scratch recipe (lr 2e-3, 30 % masks) is tuned to
# lift a tiny random model off the unigram plateau; on a pretrained checkpoint it wrecks the embeddings: 150 steps on
# the reviews move MiniLM's word embeddings by 97 % of their norm and leave a model that answers "," at every
# [MASK] (held-out accuracy = the most-frequent-token baseline). Chosen on held-out [MASK] accuracy (15 % fixed eval
# masks) by benchmarks/bench_continued_defaults.py (benchmarks/README.md has the tables): at 150 steps of 16 x 64,
# lr 3e-5 / 1e-4 / 3e-4 / 1e-3 gave 0.045 / 0.088 / 0.162 / 0.044 (collapsed) with 15 % masks, and 3e-4 still beat
# 1e-4 at 450 steps (0.224 against 0.193, 30 % masks). 30 % masks led 15 % by 0.010 at 150 steps but only 0.003
# at 450 (within noise), so masks stay BERT's 15 %, the rate the checkpoints were pretrained with. Unchanged for a
# checkpoint: warmup (6 % of the steps, which also shields the encoder from a new head), weight decay 0.01,
# adam_beta2 0.98, batch 16 x 64 tokens; the architecture and dropout are the checkpoint's.
CONTINUED_DEFAULTS: dict[str, Any] = dict(
    learning_rate=3e-4,
    mlm_probability=0.15,  # BERT's
    # The from-scratch 12,000 steps are sized to the tiny preset's ~30 steps/s; MiniLM-L6 does ~1 step/s on 2 CPU
    # cores (16 x 64), so 12,000 would take hours. 1,000 steps: ~17 minutes, about 0.7 epoch of the reviews
    # (held-out accuracy still rose from 150 to 450 steps: 0.162 to 0.221 at lr 3e-4, 15 % masks).
    max_steps=1000,
)


@dataclass
class PretrainingArguments(HubArguments):
    """Data, tokenizer and model arguments (the training loop is configured by ``TrainingArguments``; where models,
    tokenizers and Hub datasets come from by :class:`~mlm_suite.jobs.arguments.HubArguments`)."""

    train_file: str | None = field(
        default=None,
        metadata={"help": "text file (documents separated by blank lines) or .json/.jsonl lines with a text field"},
    )
    validation_file: str | None = field(default=None, metadata={"help": "held-out documents, same formats"})
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
    flatten_batches: bool | None = field(
        default=None,
        metadata={
            # A bare --flatten_batches means true; the parser's optional bools would demand a value.
            "nargs": "?",
            "const": True,
            "help": "train on flattened batches (every sequence end to end with its offsets, as "
            "DataCollatorWithFlattening makes them): no padding, no host synchronisation, and with --torch_compile "
            "no graph break. Default: on when training on a GPU, off on CPU (where it buys nothing)"
        },
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={"help": "tokenizer folder (default: --model_name_or_path's, else a trained one)"},
    )
    train_tokenizer: bool | None = field(
        default=None,
        metadata={
            "help": "train a WordPiece vocabulary on the training documents; default: yes unless --tokenizer_name or "
            "--model_name_or_path gives one. false: use the MiniLM (bert-base-uncased) vocabulary instead"
        },
    )
    vocab_size: int | None = field(
        default=None, metadata={"help": f"size of the trained vocabulary (implies --train_tokenizer; default {DEFAULT_TRAINED_VOCAB_SIZE})"}
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
            "help": "continue pretraining this checkpoint: an mlm_suite folder (any head) or a Hugging Face BERT folder "
            "(converted on the fly); a missing MLM head is created, tied to the word embeddings. Its tokenizer is used"
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
        default=8, metadata={"help": "held-out sentences with one [MASK] each whose top-5 answers are shown (0: none)"}
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
    # Modern pretraining controls (issue 27, mlm_suite.training.schedules).
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
    # Not a flag: what the controls above apply (name -> one line), printed by the job and shown in the card.
    schedules_applied: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    # Not a flag: where the mode-dependent values came from (name -> GIVEN, CONTINUED or FROM_SCRATCH), set by
    # parse_arguments (resolve_job_defaults) and shown by describe_configuration and the model card.
    defaults_applied: dict[str, str] = field(default_factory=dict, init=False, repr=False)


# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------
def parse_arguments(argv: list[str] | None) -> tuple[PretrainingArguments, PretrainTrainingArguments]:
    args, training_args = arguments.parse_arguments(
        (PretrainingArguments, PretrainTrainingArguments), argv, description=__doc__.split("\n\n")[0]
    )
    # CONTINUED_DEFAULTS when continuing a checkpoint (flags given win), and the values the job derives or forces.
    resolve_job_defaults(args, training_args, CONTINUED_DEFAULTS)
    return args, training_args


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    started = time.time()
    args, training_args = parse_arguments(argv)
    given = training_args.flags_given

    # Everything that can fail on bad input happens before the Trainer creates the output folder.
    validate_arguments(args)
    validate_flags(args, training_args)  # batch sizes, learning rate ... (the checks every job shares)
    resolve_controls(args, training_args, given)  # schedules of masks, rows, LR
    training_args.resume_from_checkpoint = resume_checkpoint(training_args)  # or the last checkpoint of a stopped run
    training_args.resume_from_checkpoint = training_args.resume_from_checkpoint or args.decay_from_checkpoint

    # Data: the documents (in memory, or a prepared folder / stream) and the tokenizer.
    large = open_corpus_source(args, training_args, given)
    texts, source, held_out_split = (
        (large.texts, large.source, large.held_out_split) if large else load_pretraining_documents(args)
    )
    tokenizer = load_tokenizer(args, texts["train"]["text"] if "train" in texts else [])
    if large:
        large.check_tokenizer(tokenizer)  # a prepared folder's rows are ids of one tokenizer
    checkpoint = mlm_suite_checkpoint(args.model_name_or_path, **args.pretrained_kwargs()) if args.model_name_or_path else None
    config = build_config(args, tokenizer, checkpoint or args.decay_from_checkpoint)

    # Rows: tokenised (or packed) documents or NSP pairs, each with the example_index its masks are keyed by.
    if large:
        train_features = large.train_rows(tokenizer)
    else:
        train_features = build_features(texts["train"], tokenizer, args, training_args.seed, "training")
    train_features = first_rows(train_features, args.max_train_samples)
    eval_features = build_features(texts["validation"], tokenizer, args, EVAL_SEED, "validation")
    eval_features = first_rows(eval_features, args.max_eval_samples)
    baseline_token_id = large.baseline_token_id(tokenizer) if large else most_frequent_row_token(train_features, tokenizer)

    # Model: a new one (preset or --config_name) or the continued checkpoint, with any head it lacks.
    set_seed(training_args.seed)  # the initial weights follow --seed
    model, new_weights = build_model(args, config, checkpoint)
    if checkpoint and training_args.process_index == 0:
        print(describe_new_weights(args.model_name_or_path, model, new_weights), file=sys.stderr)

    # Collators and callbacks: seeded training masks, fixed evaluation masks; early stopping, a time budget.
    train_collator = training_collator(tokenizer, args, training_args.seed)
    callbacks = [MaskingEpochCallback(train_collator)]
    callbacks += early_stopping_callback(
        training_args, args.early_stopping_patience, args.early_stopping_threshold, "mask_accuracy", True
    )
    budget = time_budget_callback(args, training_args) if args.max_train_minutes is not None else None
    callbacks += [budget] if budget is not None else []
    probes = probe_sentences(texts["validation"]["text"], tokenizer, args.fill_mask_probes)
    if training_args.process_index == 0:  # after every check of the input, whose errors stay one line
        print(describe_configuration(args, training_args), file=sys.stderr)
        if args.schedules_applied:
            print(describe_controls(args), file=sys.stderr)
    trainer = PretrainingTrainer(
        model=model,
        args=training_args,
        data_collator=train_collator,
        eval_data_collator=evaluation_collator(tokenizer, args),
        train_dataset=train_features,
        eval_dataset=eval_features,
        processing_class=tokenizer,
        compute_metrics=make_mlm_compute_metrics(tokenizer.mask_token_id, baseline_token_id),
        preprocess_logits_for_metrics=preprocess_logits_for_mlm_metrics,
        callbacks=callbacks,
        head_warmup_steps=args.head_warmup_steps,
        row_schedule=row_schedule(args, training_args, budget),  # masking-rate schedule, batch-size warmup
    )

    # Train, then evaluate the model that is saved (the best one after early stopping).
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    rows_read = trainer.state.global_step * rows_per_step(training_args)  # a stream has no length; every batch is full
    train_metrics = {
        **train_result.metrics,
        "train_samples": rows_read if args.streaming else len(train_features),
        "train_steps": trainer.state.global_step,
    }
    eval_metrics, probe = evaluate_pretraining(trainer, tokenizer, probes, len(eval_features))

    # Save: the checkpoint, metrics, curves, fill-mask probe and model card.
    trainer.save_model()
    trainer.save_metrics("train", train_metrics)
    trainer.save_metrics("eval", eval_metrics)
    trainer.save_state()
    output_dir = Path(training_args.output_dir)
    if trainer.is_world_process_zero():
        plot_pretraining_curves(trainer.state.log_history, output_dir / CURVES_PNG, CURVES_CAPTION)
        (output_dir / "fill_mask_probe.json").write_text(json.dumps(probe, indent=2) + "\n", encoding="utf-8")
    training = large.card(rows_read) if large else {"documents": len(texts["train"]), "rows": len(train_features)}
    data = {
        "source": source,
        "training documents": training["documents"],
        "validation documents": len(texts["validation"]),
        "training rows": training["rows"],
        "validation rows": len(eval_features),
    }
    card = pretraining_card(
        model=trainer.model, tokenizer=tokenizer, base_model=args.model_name_or_path, config_name=args.config_name,
        config_preset=args.config_preset, dataset_name=args.dataset_name, dataset_config_name=args.dataset_config_name,
        prepared_data=args.prepared_data, train_file=args.train_file, validation_file=args.validation_file,
        held_out_split=held_out_split, data=data, objective=args.objective, masking=args.masking,
        mlm_probability=args.mlm_probability, eval_mlm_probability=args.eval_mlm_probability,
        defaults_applied=args.defaults_applied,
        max_steps=None if training_args.max_steps == UNBOUNDED_STEPS else training_args.max_steps,
        rows_per_step=rows_per_step(training_args), learning_rate=training_args.learning_rate,
        adam_beta2=training_args.adam_beta2, lr_schedule=lr_schedule_summary(training_args, args),
        weight_decay=training_args.weight_decay, max_seq_length=args.max_seq_length, packing=args.packing,
        seed=training_args.seed, max_train_minutes=args.max_train_minutes, head_warmup_steps=args.head_warmup_steps,
        controls=control_card_rows(args), train_metrics=train_metrics, eval_metrics=eval_metrics, probe=probe,
        figures=figures_section([(CURVES_CAPTION, CURVES_PNG)]),
    )
    trainer.publish(card)  # the card, then with --push_to_hub the upload of the complete folder

    if trainer.is_world_process_zero():
        print("\n" + describe_evaluation(eval_metrics, probe, tokenizer.convert_ids_to_tokens(baseline_token_id)))
        print(f"{trainer.state.global_step} steps; saved to {output_dir} in {time.time() - started:.0f} s")
    return 0


__all__ = ["CONTINUED_DEFAULTS", "PretrainTrainingArguments", "PretrainingArguments", "main"]


if __name__ == "__main__":
    from mlm_suite.jobs.distributed import run_job

    raise SystemExit(run_job(main))
