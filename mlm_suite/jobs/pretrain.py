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

Every argument of ``transformers.TrainingArguments`` is accepted; ``JOB_DEFAULTS`` lists the ones
whose defaults differ here (sized so the embedded default fits the time budget); flags given on the
command line always win. Masks are
seeded: a training mask is a function of ``(--seed, epoch, example index)`` and changes every
epoch; evaluation masks and NSP pairs use a fixed seed and their own rate (``--eval_mlm_probability``,
BERT's 15 %), so eval numbers compare across runs and recipes.

Evaluation reports accuracy at ``[MASK]`` positions (the headline), at random-token and kept
positions, top-5 accuracy and the most-frequent-token baseline at ``[MASK]`` positions, and the MLM
loss (``mlm_suite.evaluation.masked_lm``); a fill-mask probe shows the top-5 answers on held-out sentences.
``--max_train_minutes`` trains for a wall-clock budget with a schedule that ends there
(``mlm_suite.training.TimeBudgetCallback``); ``--early_stopping_patience`` stops when the ``[MASK]``
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
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from datasets import Dataset, DatasetDict
from transformers import (
    AutoConfig,
    AutoTokenizer,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
    set_seed,
)

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM, MlmSuiteForPreTraining
from mlm_suite.data import resources
from mlm_suite.data.corpus import HELD_OUT_SEED, hold_out, iter_documents
from mlm_suite.data.masking import (
    DataCollatorForMaskedLM,
    MaskingEpochCallback,
    check_mlm_tokenizer,
    count_tokens,
    tokenize_for_mlm,
)
from mlm_suite.data.nsp import build_nsp_examples, split_sentences
from mlm_suite.data.packing import packing_map_function
from mlm_suite.data.prepared import build_rows
from mlm_suite.evaluation.masked_lm import fill_mask_probe, make_mlm_compute_metrics, preprocess_logits_for_mlm_metrics, probe_sentences
from mlm_suite.training.cards import CardDataset, architecture_rows, base_model_fields, card_scores, markdown_table
from mlm_suite.evaluation.plots import figures_section, plot_pretraining_curves
from mlm_suite.data.tokenization import train_wordpiece_tokenizer
from mlm_suite.training.trainer import JobTrainer
from mlm_suite.training.controls import early_stopping_callback, rows_per_step
from mlm_suite.training.schedules import (
    ScheduledRowsMixin,
    control_card_rows,
    describe_controls,
    extend_context,
    lr_schedule_summary,
    resolve_controls,
    row_schedule,
    time_budget_callback,
)
from mlm_suite.jobs.checkpoints import JobTrainingArguments, resume_checkpoint
from mlm_suite.jobs.corpus_sources import open_corpus_source
from mlm_suite.jobs.arguments import (
    HubArguments,
    overwrite_cache_field,
    preprocessing_num_workers_field,
    renamed,
    split_description,
    validation_split_name_field,
)
from mlm_suite.jobs.finetuning import (
    argument_parser,
    flag_given,
    flags_given,
    load_hub_splits,
    mlm_suite_checkpoint,
    parse_flags,
    validate_flags,
)

# Seeds that do not follow --seed, so that the held-out split, its NSP pairs and its masks are the
# same in every run and eval numbers can be compared across runs.
SPLIT_SEED = HELD_OUT_SEED
EVAL_SEED = 1234
DEFAULT_TRAINED_VOCAB_SIZE = 2048
UNBOUNDED_STEPS = 10**9  # --max_steps under --max_train_minutes when none is given
CURVES_PNG = "training_curves.png"
CURVES_CAPTION = "Pretraining: train and held-out loss, and held-out [MASK] accuracy against the most-frequent-token baseline"

# TrainingArguments defaults replaced by this job (explicit command-line values still win).
# The embedded default's recipe, chosen on the held-out split (benchmarks/README.md lists the recipes tried):
# many cheap steps of the tiny preset (16 rows of 64 tokens: ~30 steps/s on 2 CPU cores) with pre-norm
# layers, rotary positions (see PretrainingArguments) and 30 % training masks. With BERT's post-norm,
# learned absolute positions and 15 % masks the model stays on the unigram plateau (it predicts the most
# frequent tokens everywhere) for thousands of steps.
JOB_DEFAULTS: dict[str, Any] = dict(
    output_dir="outputs/pretrain",
    max_steps=12000,  # about 7 minutes of training on 2 CPU cores
    per_device_train_batch_size=16,
    per_device_eval_batch_size=64,
    learning_rate=2e-3,
    adam_beta2=0.98,
    weight_decay=0.01,
    warmup_steps=0.06,  # a value below 1 is a fraction of the total steps
    logging_steps=50,
    eval_strategy="steps",
    eval_steps=0.5,  # likewise a fraction: evaluate half-way and at the end
    save_strategy="no",
    report_to="none",
    # The collator needs word_ids, special_tokens_mask and example_index, which the model does not
    # take; it consumes them itself, so nothing unused ever reaches the model.
    remove_unused_columns=False,
    ddp_find_unused_parameters=False,
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
CONTINUED = "continued-pretraining default"
FROM_SCRATCH = "from-scratch default"
GIVEN = "given"
# Options that build a new model: a checkpoint brings its own architecture, so they do not apply to it.
NEW_MODEL_OPTIONS = ("config_preset", "norm_position", "position_embedding_type")


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
        default="text", metadata=renamed("--text_column", help="field holding the text (JSON lines, datasets)")
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
        metadata=renamed("--tokenizer", help="tokenizer folder (default: --model_name_or_path's, else a trained one)"),
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
    # parse_arguments and shown by describe_configuration and the model card.
    defaults_applied: dict[str, str] = field(default_factory=dict, init=False, repr=False)


# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------
def parse_arguments(argv: list[str] | None) -> tuple[PretrainingArguments, TrainingArguments]:
    parser = argument_parser((PretrainingArguments, JobTrainingArguments), description=__doc__.split("\n\n")[0])
    parser.set_defaults(**JOB_DEFAULTS)
    args, training_args = parse_flags(parser, argv)
    given = sys.argv[1:] if argv is None else argv
    named = flags_given(parser, given, [*CONTINUED_DEFAULTS, *NEW_MODEL_OPTIONS])
    for name, value in CONTINUED_DEFAULTS.items():
        if name in named:
            args.defaults_applied[name] = GIVEN
        elif args.model_name_or_path:
            setattr(args if name in PretrainingArguments.__dataclass_fields__ else training_args, name, value)
            args.defaults_applied[name] = CONTINUED
        else:
            args.defaults_applied[name] = FROM_SCRATCH
    if args.model_name_or_path or args.config_name:
        args.defaults_applied.update((name, GIVEN) for name in NEW_MODEL_OPTIONS if name in named)
    if args.max_train_minutes is not None and "max_steps" not in named:
        # The budget decides when to stop; the job's default step count must not cut it short.
        training_args.max_steps = UNBOUNDED_STEPS
        args.defaults_applied["max_steps"] = "--max_train_minutes decides"
    if args.streaming and not flag_given("dataloader_num_workers", given):
        training_args.dataloader_num_workers = 0  # a stream's workers each need a shard of their own
    if args.flatten_batches is None:
        args.flatten_batches = training_args.device.type == "cuda"
    warmup_ratio = getattr(args, "warmup_ratio", None)  # TrainingArguments' own before transformers 5.15
    if warmup_ratio is not None:
        if not 0.0 <= warmup_ratio < 1.0:
            raise ValueError(f"--warmup_ratio must lie in [0, 1), got {warmup_ratio}")
        training_args.warmup_steps = warmup_ratio
    # Forced even when given on the command line: dropping the collator's inputs breaks masking.
    training_args.remove_unused_columns = False
    # The metrics tell [MASK], random and kept positions apart by what the model saw.
    training_args.include_for_metrics = sorted({*training_args.include_for_metrics, "inputs"})
    return args, training_args


def default_source(args: PretrainingArguments, name: str) -> str:
    """`` (continued-pretraining default)``, `` (from-scratch default)`` or `` (given)``; empty when unknown."""
    source = args.defaults_applied.get(name)
    return f" ({source})" if source else ""


def describe_configuration(args: PretrainingArguments, training_args: TrainingArguments) -> str:
    """The job's configuration as it prints it at the start: the values that depend on whether a checkpoint is
    continued, each with where it came from, then the shared ones (plain text)."""
    new_model = f"config {args.config_name}" if args.config_name else f"preset {args.config_preset}"
    mode = f"continuing {args.model_name_or_path}" if args.model_name_or_path else f"from scratch, {new_model}"
    lines = [f"pretraining configuration ({mode}; flags given on the command line win):"]
    values = {
        "learning_rate": f"{training_args.learning_rate:g}",
        "mlm_probability": f"{args.mlm_probability:g}",
        "max_steps": "unbounded" if training_args.max_steps == UNBOUNDED_STEPS else f"{training_args.max_steps}",
    }
    lines += [f"  {name} {value}{default_source(args, name)}" for name, value in values.items()]
    warmup = training_args.warmup_steps
    lines.append(
        f"  warmup {f'{warmup:g} of the steps' if 0 < warmup < 1 else f'{warmup:g} steps'}, weight_decay "
        f"{training_args.weight_decay:g}, adam_beta2 {training_args.adam_beta2:g}, batch {rows_per_step(training_args)} "
        f"x {args.max_seq_length} tokens, eval masks {args.eval_mlm_probability:g}"
    )
    if args.model_name_or_path or args.config_name:
        ignored = [f"--{name}" for name in NEW_MODEL_OPTIONS if args.defaults_applied.get(name) == GIVEN]
        whose = "--config_name's" if args.config_name else "the checkpoint's"
        lines.append(
            f"  architecture and dropout: {whose} (--config_overrides changes them)"
            + (f"; ignored: {', '.join(ignored)} (options of a new model)" if ignored else "")
        )
    return "\n".join(lines)


def validate_arguments(args: PretrainingArguments) -> None:
    """Checks that need no data; raise ValueError naming the offending option."""
    if args.train_file and args.dataset_name:
        raise ValueError("give --train_file or --dataset_name, not both")
    for name in ("train_file", "validation_file"):
        path = getattr(args, name)
        if path is not None and not Path(path).is_file():
            raise ValueError(f"--{name} {path} does not exist or is not a file")
    if not 0.0 < args.validation_split_percentage < 100.0:
        raise ValueError(f"--validation_split_percentage must lie in (0, 100), got {args.validation_split_percentage}")
    for name in ("mlm_probability", "eval_mlm_probability"):
        if not 0.0 < getattr(args, name) < 1.0:
            raise ValueError(f"--{name} must lie in (0, 1), got {getattr(args, name)}")
    if args.max_train_minutes is not None and not args.max_train_minutes > 0:
        raise ValueError(f"--max_train_minutes must be positive, got {args.max_train_minutes}")
    if args.fill_mask_probes < 0:
        raise ValueError(f"--fill_mask_probes must not be negative, got {args.fill_mask_probes}")
    if args.max_eval_samples is not None and args.max_eval_samples < 1:
        raise ValueError(f"--max_eval_samples must be positive, got {args.max_eval_samples}")
    if args.objective == "mlm_nsp" and args.packing:
        raise ValueError("--packing cannot be combined with --objective mlm_nsp: NSP pairs are rows of their own")
    if args.tokenizer_name and (args.train_tokenizer or args.vocab_size):
        raise ValueError("give either --tokenizer_name or --train_tokenizer/--vocab_size, not both")
    if args.streaming and args.max_train_samples is not None:
        raise ValueError("--max_train_samples counts rows, which a stream does not have: bound a --streaming run "
                         "with --max_steps")
    if args.train_tokenizer is False and args.vocab_size:
        raise ValueError("--vocab_size sets the size of a trained vocabulary; it contradicts --train_tokenizer false")
    if args.vocab_size is not None and args.vocab_size < 16:
        raise ValueError(f"--vocab_size must be at least 16, got {args.vocab_size}")
    if args.model_name_or_path and (args.train_tokenizer or args.vocab_size):
        raise ValueError(
            "--model_name_or_path continues a checkpoint with its own vocabulary; --train_tokenizer/--vocab_size "
            "would renumber the tokens its embeddings were trained on: drop them"
        )
    if args.head_warmup_steps < 0:
        raise ValueError(f"--head_warmup_steps must not be negative, got {args.head_warmup_steps}")
    if args.head_warmup_steps and not args.model_name_or_path:
        raise ValueError("--head_warmup_steps freezes a pretrained encoder; it needs --model_name_or_path")


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------
def read_documents(path: str | Path, text_column: str = "text") -> list[str]:
    """Documents of a local file: JSON lines (``.json``/``.jsonl``) or blank-line-separated text blocks."""
    documents = list(iter_documents(path, text_column))
    if not documents:
        raise ValueError(f"{path} holds no text: nothing to train or evaluate on")
    return documents


def hub_documents(dataset: Dataset, args: PretrainingArguments, name: str) -> Dataset:
    """The non-blank texts of a Hub (or saved) split as a ``datasets.Dataset`` with one ``text`` column, in order.

    The split stays in Arrow: the text column is selected and filtered there (``--preprocessing_num_workers``
    processes), never copied into a Python list.
    """
    column = args.text_column_name
    if column not in dataset.column_names:
        raise ValueError(f"{name} has no column {column!r} (columns: {dataset.column_names}); pass --text_column_name")
    texts = dataset.select_columns([column])
    if column != "text":
        texts = texts.rename_column(column, "text")
    workers = args.preprocessing_num_workers
    return texts.filter(
        lambda batch: [bool(text and text.strip()) for text in batch["text"]], batched=True,
        num_proc=workers if workers and workers > 1 else None,
        load_from_cache_file=False if args.overwrite_cache else None, desc=f"dropping blank documents of {name}",
    )  # fmt: skip


def load_text_splits(args: PretrainingArguments) -> tuple[DatasetDict, str]:
    """``train`` and ``validation`` splits with one ``text`` column, and a description of the data.

    A Hub (or saved) dataset's splits stay in Arrow (:func:`hub_documents`); its held-out documents are the split
    ``--validation_split_name`` when it has one.
    """
    validation = read_documents(args.validation_file, args.text_column_name) if args.validation_file else None
    if args.dataset_name:
        raw = load_hub_splits(args.dataset_name, args.dataset_config_name, validation_split_name=args.validation_split_name,
                              test_split_name=None, require_train=True, **args.dataset_kwargs())
        documents = hub_documents(raw["train"], args, f"{args.dataset_name}[train]")
        split_names = {"train": "train"}
        if validation is None and "validation" in raw:
            validation = hub_documents(raw["validation"], args, f"{args.dataset_name}[{args.validation_split_name}]")
            split_names["validation"] = args.validation_split_name
        source = (f"`{args.dataset_name}`" + (f" ({args.dataset_config_name})" if args.dataset_config_name else "")
                  + split_description(split_names))
    elif args.train_file:
        documents = read_documents(args.train_file, args.text_column_name)
        source = f"`{Path(args.train_file).name}`"
    else:
        documents = [text for _, text in resources.pang_lee_reviews()]
        source = "the Pang & Lee (2004) polarity corpus: 1,500 English movie reviews (text only)"
    if not len(documents):
        raise ValueError(f"{source} holds no training text")

    train = documents if isinstance(documents, Dataset) else Dataset.from_dict({"text": documents})
    if validation is not None:
        held_out = validation if isinstance(validation, Dataset) else Dataset.from_dict({"text": validation})
        return DatasetDict(train=train, validation=held_out), source
    return hold_out(train, args.validation_split_percentage, SPLIT_SEED), source


def load_tokenizer(args: PretrainingArguments, train_texts: list[str]) -> PreTrainedTokenizerBase:
    """``--tokenizer_name``, the checkpoint's, a WordPiece vocabulary trained on ``train_texts``, or MiniLM's."""
    train = args.train_tokenizer
    if train is None:
        # A small vocabulary fitted to the data learns faster than a general 30k one (see JOB_DEFAULTS).
        train = bool(args.vocab_size) or not (args.tokenizer_name or args.model_name_or_path)
    if train:
        tokenizer = train_wordpiece_tokenizer(train_texts, vocab_size=args.vocab_size or DEFAULT_TRAINED_VOCAB_SIZE)
    else:
        source = args.tokenizer_name or args.model_name_or_path or str(resources.minilm_dir())
        tokenizer = AutoTokenizer.from_pretrained(source, **args.pretrained_kwargs())
    check_mlm_tokenizer(tokenizer)
    if not tokenizer.is_fast:
        raise ValueError(f"a fast tokenizer is needed (word ids, batched encoding); {type(tokenizer).__name__} is not")
    return tokenizer


def build_features(
    texts: Dataset, tokenizer: PreTrainedTokenizerBase, args: PretrainingArguments, seed: int, split: str
) -> Dataset:
    """Model rows of one split: tokenised (or packed) documents, or NSP pairs; plus ``example_index``.

    Documents are tokenised on ``--preprocessing_num_workers`` processes (NSP pairs, which draw their random B from
    the whole split, in this one); the rows do not depend on their number.
    """
    workers = args.preprocessing_num_workers if args.preprocessing_num_workers and args.preprocessing_num_workers > 1 else None
    cache = {"load_from_cache_file": False} if args.overwrite_cache else {}
    if args.objective == "mlm_nsp":
        documents = [split_sentences(text) for text in texts["text"]]
        try:
            # A one-sentence document gives no true pair; it is left out (with a warning) rather than refusing a
            # whole corpus for it (one of the 1,500 embedded reviews is one sentence long).
            pairs = build_nsp_examples(
                documents, tokenizer, args.max_seq_length, nsp_probability=args.nsp_probability, seed=seed,
                on_short_document="skip",
            )
        except ValueError as error:
            raise ValueError(f"{split} documents: {error}") from None
        features = Dataset.from_dict(pairs)
    elif args.packing and workers:
        # Tokenised on the workers, packed in one process in batches of the same size: the same rows as below.
        features = build_rows(texts, tokenizer, args.max_seq_length, True, workers).remove_columns("example_index")
    elif args.packing:
        pack = packing_map_function(tokenizer, args.max_seq_length)
        features = texts.map(pack, batched=True, remove_columns=texts.column_names, desc=f"packing {split}", **cache)
    else:
        features = texts.map(
            tokenize_for_mlm,
            batched=True,
            remove_columns=texts.column_names,
            fn_kwargs={"tokenizer": tokenizer, "max_length": args.max_seq_length},
            desc=f"tokenizing {split}",
            num_proc=workers,  # one document at a time: the same rows for any number of processes
            **cache,
        )
    if len(features) == 0:
        raise ValueError(f"the {split} documents produced no rows")
    # Seeded masks are keyed by this index, so a row's mask does not depend on batching or on its process.
    return features.add_column("example_index", list(range(len(features))))


def most_frequent_token(features: Dataset, tokenizer: PreTrainedTokenizerBase) -> int:
    """The most frequent non-special token id of the training rows: the baseline's single prediction."""
    counts = count_tokens(features, len(tokenizer))
    counts[torch.tensor(tokenizer.all_special_ids)] = 0
    return int(counts.argmax())


# ------------------------------------------------------------------------------------------------
# Model
# ------------------------------------------------------------------------------------------------
def build_config(
    args: PretrainingArguments, tokenizer: PreTrainedTokenizerBase, checkpoint: str | None = None
) -> MlmSuiteConfig:
    """The model's configuration: ``--config_name``'s, else ``checkpoint``'s (an mlm_suite folder), else a preset sized
    to ``tokenizer``."""
    if args.config_name:
        config = AutoConfig.from_pretrained(args.config_name, **args.pretrained_kwargs())
        if not isinstance(config, MlmSuiteConfig):
            raise ValueError(
                f"--config_name {args.config_name} holds a {config.model_type!r} config; pretraining builds mlm_suite "
                "models (a BERT model: pass its folder as --model_name_or_path)"
            )
    elif checkpoint:
        config = AutoConfig.from_pretrained(checkpoint, **args.pretrained_kwargs())
    else:
        config = MlmSuiteConfig.preset(
            args.config_preset,
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            norm_position=args.norm_position,
            position_embedding_type=args.position_embedding_type,
            # MLM alone never trains [CLS] (no loss reads it; NSP's does): a classifier fine-tuned from this model
            # reads the mean of the states MLM trained (docs/results.md: why the main job's encoder does not help sentiment).
            classifier_pooling="mean" if args.objective == "mlm" else "cls",
        )
    if args.config_overrides:
        config.update_from_string(args.config_overrides)
        # update_from_string sets attributes one by one; rebuilding re-runs the config's own checks.
        config = MlmSuiteConfig.from_dict(config.to_dict())
    extend_context(config, tokenizer, args, checkpoint)  # --rope_theta; a rotary checkpoint's positions follow longer rows
    config.check_sizes()
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {config.vocab_size}")
    if config.position_embedding_type == "absolute" and args.max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"--max_seq_length {args.max_seq_length} exceeds the model's max_position_embeddings "
            f"({config.max_position_embeddings})"
        )
    if args.max_seq_length > tokenizer.model_max_length:
        raise ValueError(
            f"--max_seq_length {args.max_seq_length} exceeds the tokenizer's model_max_length "
            f"({tokenizer.model_max_length})"
        )
    if args.objective == "mlm_nsp" and config.type_vocab_size < 2:
        raise ValueError(f"mlm_nsp needs type_vocab_size >= 2 for the two segments, got {config.type_vocab_size}")
    return config


def build_model(
    args: PretrainingArguments, config: MlmSuiteConfig, checkpoint: str | None = None
) -> tuple[MlmSuiteForMaskedLM | MlmSuiteForPreTraining, list[str]]:
    """The model to pretrain and the names of its weights that ``checkpoint`` lacked (newly initialised).

    A head the checkpoint lacks (the MLM head of an encoder-only or fine-tuned checkpoint, the NSP head for
    ``mlm_nsp``) is initialised as BERT initialises it; the MLM decoder is tied to the word embeddings, so
    only its transform and bias are new.
    """
    model_class = MlmSuiteForPreTraining if args.objective == "mlm_nsp" else MlmSuiteForMaskedLM
    if not checkpoint:
        return model_class(config), []
    model, loading = model_class.from_pretrained(
        checkpoint, config=config, output_loading_info=True, **args.pretrained_kwargs()
    )
    return model, sorted(loading["missing_keys"])


def describe_new_weights(checkpoint_name: str, model: torch.nn.Module, new_weights: list[str]) -> str:
    """One line saying which weights are new when pretraining continues a checkpoint."""
    if not new_weights:
        return f"continuing {checkpoint_name}: every weight of {type(model).__name__} comes from the checkpoint"
    return (
        f"continuing {checkpoint_name}: new {type(model).__name__} weights, initialised as BERT's: "
        f"{', '.join(new_weights)} (the MLM decoder is tied to the word embeddings)"
    )


# ------------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------------
def evaluation_collator(tokenizer: PreTrainedTokenizerBase, args: PretrainingArguments) -> DataCollatorForMaskedLM:
    """The held-out masks: ``--eval_mlm_probability`` with a fixed seed, whatever the training rate or process."""
    return DataCollatorForMaskedLM(
        tokenizer, mlm_probability=args.eval_mlm_probability, masking=args.masking, seed=EVAL_SEED, process_rank=0
    )


def describe_evaluation(metrics: dict[str, float], probe: list[dict], baseline_token: str) -> str:
    """The held-out scores and the fill-mask probe as the job prints them (plain text)."""
    rows = [("MLM loss / perplexity", f"{metrics['eval_mlm_loss']:.4f} / {metrics['perplexity']:.1f}")]
    for name, key in (("[MASK] positions", "mask"), ("random-token positions", "random"), ("kept positions", "kept")):
        rows.append((f"accuracy at {name}", f"{metrics[f'eval_{key}_accuracy']:.4f}  ({metrics[f'eval_{key}_tokens']} tokens)"))
    rows.append(("top-5 accuracy at [MASK]", f"{metrics['eval_mask_top5_accuracy']:.4f}"))
    rows.append(
        (
            "baseline at [MASK]",
            f"{metrics['eval_mask_baseline_accuracy']:.4f}  (always {baseline_token!r}, the most frequent training token)",
        )
    )
    if "eval_nsp_accuracy" in metrics:
        rows.append(("next-sentence accuracy", f"{metrics['eval_nsp_accuracy']:.4f}"))
    lines = [f"held-out evaluation ({metrics['eval_selected_tokens']} selected tokens, {metrics['eval_samples']} rows):"]
    lines += [f"  {label:<36}{value}" for label, value in rows]
    if probe:
        lines.append("fill-mask probe (held-out sentences; answer -> top-5):")
        lines += [f"  {item['sentence']}\n      {item['answer']} -> {', '.join(item['predictions'])}" for item in probe]
    return "\n".join(lines)


def probe_table(probe: list[dict]) -> str:
    """The fill-mask probe as a markdown table for the model card."""
    rows = ["| sentence | masked word | top-5 predictions |", "|---|---|---|"]
    for item in probe:
        sentence = item["sentence"].replace("|", "\\|")
        rows.append(f"| {sentence} | {item['answer']} | {', '.join(item['predictions'])} |")
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------------
# Trainer
# ------------------------------------------------------------------------------------------------
class PretrainingTrainer(ScheduledRowsMixin, JobTrainer):
    """A ``Trainer`` that evaluates with its own fixed-mask collator and writes mlm_suite's model card.

    ``create_model_card`` (:class:`~mlm_suite.training.trainer.JobTrainer`) is what ``push_to_hub`` calls, so the
    card uploaded is the one written here (set ``model_card_fields`` first). It writes no pickle:
    ``training_args.json``, and checkpoints in safetensors and JSON.
    """

    card_template = "pretraining"

    def __init__(self, *args, eval_data_collator: DataCollatorForMaskedLM, head_warmup_steps: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.eval_data_collator = eval_data_collator
        self.head_warmup_steps = head_warmup_steps

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.state.global_step < self.head_warmup_steps:
            # Head warm-up: drop the encoder's gradients before clipping and the optimizer step. The optimizer
            # skips a parameter without a gradient entirely (no update, no weight decay, no moment estimates),
            # so the encoder is frozen without rebuilding the optimizer or changing what DDP reduces.
            for parameter in self.model.encoder.parameters():
                parameter.grad = None
        return loss

    def get_eval_dataloader(self, eval_dataset=None):
        training_collator = self.data_collator
        self.data_collator = self.eval_data_collator
        try:
            return super().get_eval_dataloader(eval_dataset)
        finally:
            self.data_collator = training_collator


def final_evaluation(trainer: Trainer) -> dict[str, float]:
    """Metrics of the saved model: those of the scheduled evaluation if it just ran at the last step, else a
    new evaluation (always after early stopping, which restores the best model rather than the last one)."""
    history = trainer.state.log_history
    last = next((entry for entry in reversed(history) if "eval_loss" in entry), None)
    if last is not None and last["step"] == trainer.state.global_step and not trainer.args.load_best_model_at_end:
        return {key: value for key, value in last.items() if key.startswith("eval_") or key == "epoch"}
    return trainer.evaluate()


def _model_card_fields(
    args: PretrainingArguments,
    training_args: TrainingArguments,
    model,
    tokenizer: PreTrainedTokenizerBase,
    data: dict[str, object],
    train_metrics: dict[str, float],
    eval_metrics: dict[str, float],
    probe: list[dict],
) -> dict[str, object]:
    config = model.config
    parameters = sum(parameter.numel() for parameter in model.parameters())
    objective = (
        "masked language modelling + next-sentence prediction" if args.objective == "mlm_nsp" else "masked language modelling"
    )
    objective += (
        f", {args.masking.replace('_', '-')} masking of {args.mlm_probability:.0%} of the tokens in training"
        + default_source(args, "mlm_probability")
    )
    start = f"continued from `{args.model_name_or_path}`" if args.model_name_or_path else f"preset `{args.config_preset}`"
    step_limit = ""
    if args.defaults_applied and training_args.max_steps != UNBOUNDED_STEPS:
        step_limit = f" (--max_steps {training_args.max_steps}{default_source(args, 'max_steps')})"
    training = {
        "initialisation": start,
        "optimizer steps": f"{train_metrics.get('train_steps', training_args.max_steps)}" + step_limit,
        "batch size (global)": rows_per_step(training_args),
        "learning rate": f"{training_args.learning_rate:g}{default_source(args, 'learning_rate')} (AdamW β₂ "
        f"{training_args.adam_beta2:g}, {lr_schedule_summary(training_args, args)})",
        "weight decay": training_args.weight_decay,
        "max sequence length": args.max_seq_length,
        "packing": args.packing,
        "seed": training_args.seed,
        "time budget": f"{args.max_train_minutes:g} min" if args.max_train_minutes else "none (fixed step count)",
        **({"head warm-up": f"{args.head_warmup_steps} steps with the encoder frozen"} if args.head_warmup_steps else {}),
        **control_card_rows(args),  # masking-rate schedule, replacement split, batch-size warmup, context extension
        "final train loss": train_metrics["train_loss"],
        "train runtime (s)": train_metrics["train_runtime"],
    }
    shown = {
        "**accuracy at `[MASK]` positions**": eval_metrics["eval_mask_accuracy"],
        "most-frequent-token baseline at `[MASK]` positions": eval_metrics["eval_mask_baseline_accuracy"],
        "top-5 accuracy at `[MASK]` positions": eval_metrics["eval_mask_top5_accuracy"],
        "accuracy at random-token positions": eval_metrics["eval_random_accuracy"],
        "accuracy at kept positions (the answer is visible)": eval_metrics["eval_kept_accuracy"],
        "MLM loss (all selected positions)": eval_metrics["eval_mlm_loss"],
        "perplexity": eval_metrics["perplexity"],
        "selected tokens: `[MASK]` / random / kept": "{eval_mask_tokens} / {eval_random_tokens} / {eval_kept_tokens}".format(
            **eval_metrics
        ),
    }
    if "eval_nsp_accuracy" in eval_metrics:
        shown["next-sentence accuracy"] = eval_metrics["eval_nsp_accuracy"]
    metrics = markdown_table(shown, ("metric", "value")) + (
        f"\n\nEvaluation selects {args.eval_mlm_probability:.0%} of the tokens with fixed (seeded) masks, 80 % "
        "`[MASK]` / 10 % random / 10 % kept, so these numbers compare across runs whatever the training masking "
        "rate. The headline is the accuracy at `[MASK]` positions: kept positions show the answer and are not a "
        "test of the model. The baseline predicts the most frequent training token at every `[MASK]`."
    )
    if probe:
        metrics += "\n\n### Fill-mask probe\n\nHeld-out sentences, one word masked:\n\n" + probe_table(probe)
    return {
        "architecture": f"{parameters / 1e6:.1f}M-parameter BERT-style",
        "origin": "pretrained from scratch"
        if not args.model_name_or_path
        else f"pretrained further from {base_model_fields(args.model_name_or_path)['base_model_text']}",
        **base_model_fields(args.model_name_or_path),
        "objective": objective,
        "architecture_table": markdown_table(architecture_rows(config), ("hyper-parameter", "value")),
        "data": markdown_table({**data, "tokenizer": f"{type(tokenizer).__name__}, {len(tokenizer)} tokens"}),
        "training": markdown_table(training),
        "metrics": metrics,
    }


#: The held-out scores in the card's metadata: metric key (after ``eval_``) → (metric type, name as the card says it).
_CARD_SCORES = {
    "mask_accuracy": ("accuracy", "accuracy at [MASK] positions"),
    "mask_top5_accuracy": ("top5_accuracy", "top-5 accuracy at [MASK] positions"),
    "perplexity": ("perplexity", "perplexity"),
    "nsp_accuracy": ("accuracy", "next-sentence accuracy"),
}


def _model_card_metadata(args: PretrainingArguments, eval_metrics: dict[str, float]) -> dict[str, object]:
    """What the card's metadata is built from (:func:`~mlm_suite.training.cards.model_card_data`): the checkpoint
    continued from, the data (a Hub dataset, files, a prepared folder or the embedded reviews) and the held-out scores."""
    embedded = CardDataset.embedded(
        "pang_lee_movie_reviews", "Pang & Lee movie reviews (built in, held-out split)"
    )
    dataset = CardDataset.read_by_job(args.dataset_name, args.dataset_config_name,
                                      (args.prepared_data, args.train_file, args.validation_file), embedded,
                                      {"validation": args.validation_split_name})
    metrics = {**eval_metrics, "eval_perplexity": eval_metrics["perplexity"]}
    scores = card_scores(metrics, _CARD_SCORES, splits=(("eval", "validation"),))
    return {"base_model": args.model_name_or_path, "dataset": dataset, "scores": scores}


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    started = time.time()
    args, training_args = parse_arguments(argv)

    # Everything that can fail on bad input happens before the Trainer creates the output folder.
    validate_arguments(args)
    validate_flags(args, training_args)  # batch sizes, learning rate ... (the checks every job shares)
    resolve_controls(args, training_args, sys.argv[1:] if argv is None else argv)  # schedules of masks, rows, LR
    training_args.resume_from_checkpoint = resume_checkpoint(training_args)  # or the last checkpoint of a stopped run
    training_args.resume_from_checkpoint = training_args.resume_from_checkpoint or args.decay_from_checkpoint
    large = open_corpus_source(args, training_args, sys.argv[1:] if argv is None else argv)
    texts, source = (large.texts, large.source) if large else load_text_splits(args)
    tokenizer = load_tokenizer(args, texts["train"]["text"] if "train" in texts else [])
    if large:
        large.check_tokenizer(tokenizer)  # a prepared folder's rows are ids of one tokenizer
    checkpoint = mlm_suite_checkpoint(args.model_name_or_path, **args.pretrained_kwargs()) if args.model_name_or_path else None
    config = build_config(args, tokenizer, checkpoint or args.decay_from_checkpoint)
    if large:
        train_features = large.train_rows(tokenizer)
    else:
        train_features = build_features(texts["train"], tokenizer, args, training_args.seed, "training")
    if args.max_train_samples is not None and len(train_features) > args.max_train_samples:
        train_features = train_features.select(range(args.max_train_samples))  # the first rows, as run_mlm.py
    eval_features = build_features(texts["validation"], tokenizer, args, EVAL_SEED, "validation")
    if args.max_eval_samples is not None and len(eval_features) > args.max_eval_samples:
        eval_features = eval_features.select(range(args.max_eval_samples))
    baseline_token_id = large.baseline_token_id(tokenizer) if large else most_frequent_token(train_features, tokenizer)

    set_seed(training_args.seed)  # the initial weights follow --seed
    model, new_weights = build_model(args, config, checkpoint)
    if checkpoint and training_args.process_index == 0:
        print(describe_new_weights(args.model_name_or_path, model, new_weights), file=sys.stderr)
    train_collator = DataCollatorForMaskedLM(
        tokenizer,
        mlm_probability=args.mlm_probability,
        mask_replace_prob=args.mask_replace_prob,
        random_replace_prob=args.random_replace_prob,
        masking=args.masking,
        seed=training_args.seed,
        process_rank=None if args.masking_seed_per_rank else 0,
        flatten=args.flatten_batches,
        pad_to_multiple_of=8 if args.flatten_batches else None,  # rounds max_length_q: fewer torch.compile shapes
    )
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

    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    rows_read = trainer.state.global_step * rows_per_step(training_args)  # a stream has no length; every batch is full
    train_metrics = {
        **train_result.metrics,
        "train_samples": rows_read if args.streaming else len(train_features),
        "train_steps": trainer.state.global_step,
    }
    eval_metrics = final_evaluation(trainer)
    eval_metrics["perplexity"] = math.exp(min(eval_metrics["eval_mlm_loss"], 700.0))  # exp overflows past ~709
    eval_metrics["eval_samples"] = len(eval_features)
    probe = fill_mask_probe(trainer.model, tokenizer, probes)
    eval_metrics["fill_mask_probe_top1_correct"] = sum(item["predictions"][0] == item["answer"] for item in probe)
    eval_metrics["fill_mask_probe_distinct_top1"] = len({item["predictions"][0] for item in probe})

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
    trainer.model_card_fields = _model_card_fields(
        args, training_args, trainer.model, tokenizer, data, train_metrics, eval_metrics, probe
    )
    trainer.model_card_fields["metrics"] += figures_section([(CURVES_CAPTION, CURVES_PNG)])
    trainer.model_card_metadata = _model_card_metadata(args, eval_metrics)
    trainer.publish()  # the card, then with --push_to_hub the upload of the complete folder

    if trainer.is_world_process_zero():
        print("\n" + describe_evaluation(eval_metrics, probe, tokenizer.convert_ids_to_tokens(baseline_token_id)))
        print(f"{trainer.state.global_step} steps; saved to {output_dir} in {time.time() - started:.0f} s")
    return 0


__all__ = ["CONTINUED_DEFAULTS", "JOB_DEFAULTS", "PretrainingArguments", "main", "read_documents"]


if __name__ == "__main__":
    from mlm_suite.jobs.distributed import run_job

    raise SystemExit(run_job(main))
