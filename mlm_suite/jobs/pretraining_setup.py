"""What the pretraining job (``mlm-suite pretrain``) sets up before it trains: the defaults that depend on the mode,
the checks that combine its two argument dataclasses, what the pretraining controls imply, the corpus source, and
its tokenizer, configuration and model (a preset, ``--config_name`` or a continued checkpoint). ``args`` is the
job's ``PretrainingArguments`` (:mod:`mlm_suite.jobs.pretrain`); see docs/pretraining.md.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import PreTrainedTokenizerBase, TrainingArguments

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM, MlmSuiteForPreTraining
from mlm_suite.data import resources
from mlm_suite.data.builtin import BUILTIN_DATASETS
from mlm_suite.data.corpus_sources import CorpusSource, InMemoryCorpus, PreparedCorpus, StreamedCorpus
from mlm_suite.data.masking import check_mlm_tokenizer
from mlm_suite.data.prepared import load_prepared
from mlm_suite.data.pretraining import RowFormat
from mlm_suite.data.readers import (
    DocumentSource, load_pretraining_documents, read_documents, stream_pretraining_documents,
)  # fmt: skip
from mlm_suite.data.schedules import BatchSizeWarmup, MaskRateSchedule
from mlm_suite.data.streaming import split_for_processes
from mlm_suite.data.tokenization import train_wordpiece_tokenizer
from mlm_suite.errors import UsageError
from mlm_suite.jobs.arguments import GIVEN, apply_defaults
from mlm_suite.jobs.model_loading import check_vocabulary, pretrained_config, pretrained_tokenizer
from mlm_suite.cards import default_source
from mlm_suite.training.controls import DEFAULT_LR_DECAY, UNBOUNDED_STEPS, WSD, lr_schedule_summary, rows_per_step
from mlm_suite.training.schedules import check_row_sampling

__all__ = [
    "CONTINUED",
    "DEFAULT_TRAINED_VOCAB_SIZE",
    "FROM_SCRATCH",
    "NEW_MODEL_OPTIONS",
    "apply_config_overrides",
    "batch_description",
    "build_config",
    "build_model",
    "describe_configuration",
    "describe_new_weights",
    "load_tokenizer",
    "check_arguments",
    "check_token_budget",
    "describe_controls",
    "extend_context",
    "open_corpus_source",
    "resolve_controls",
    "resolve_job_defaults",
]

DEFAULT_TRAINED_VOCAB_SIZE = 2048
# Where a mode-dependent value came from (args.defaults_applied, set by the job's parse_arguments).
CONTINUED = "continued-pretraining default"
FROM_SCRATCH = "from-scratch default"
# Options that build a new model: a checkpoint brings its own architecture, so they do not apply to it.
NEW_MODEL_OPTIONS = ("config_preset", "norm_position", "position_embedding_type")


# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------
def resolve_job_defaults(args: Any, training_args: Any, continued_defaults: Mapping[str, Any]) -> None:
    """What the job sets once its flags are parsed.

    ``continued_defaults`` replace the from-scratch defaults when ``--model_name_or_path`` continues a checkpoint, unless
    given; ``args.defaults_applied`` records where each came from (:data:`GIVEN`, :data:`CONTINUED`,
    :data:`FROM_SCRATCH`), and which options of a new model a checkpoint or ``--config_name`` makes moot. Then the
    values derived from others (``--max_train_minutes`` lifts the step limit, ``--streaming`` loads in the main
    process, ``--flatten_batches`` follows the device, ``--warmup_ratio``). What the job forces is
    :class:`~mlm_suite.jobs.pretrain.PretrainTrainingArguments`' concern.
    """
    named = training_args.flags_given
    if args.model_name_or_path:
        args.defaults_applied.update(apply_defaults(dict(continued_defaults), named, args, training_args, source=CONTINUED))
    else:
        args.defaults_applied.update((name, GIVEN if name in named else FROM_SCRATCH) for name in continued_defaults)
    if args.model_name_or_path or args.config_name:
        args.defaults_applied.update((name, GIVEN) for name in NEW_MODEL_OPTIONS if name in named)
    if args.max_train_minutes is not None and "max_steps" not in named:
        # The budget decides when to stop; the job's default step count must not cut it short.
        training_args.max_steps = UNBOUNDED_STEPS
        args.defaults_applied["max_steps"] = "--max_train_minutes decides"
    if args.streaming and "dataloader_num_workers" not in named:
        training_args.dataloader_num_workers = 0  # a stream's workers each need a shard of their own
    if args.flatten_batches is None:
        args.flatten_batches = training_args.device.type == "cuda" or args.max_tokens_per_batch is not None
    warmup_ratio = getattr(args, "warmup_ratio", None)  # TrainingArguments' own before transformers 5.15
    if warmup_ratio is not None:
        training_args.warmup_steps = warmup_ratio


def check_token_budget(max_tokens_per_batch: int, max_seq_length: int) -> None:
    """Raise UsageError unless a batch of ``max_tokens_per_batch`` tokens holds the longest row."""
    if max_tokens_per_batch < max_seq_length:
        raise UsageError(
            f"--max_tokens_per_batch {max_tokens_per_batch} is below --max_seq_length {max_seq_length}: a batch must "
            "hold the longest row"
        )


def check_arguments(args: Any, training_args: TrainingArguments) -> None:
    """The checks that combine ``PretrainingArguments`` with ``TrainingArguments`` (each checks its own fields in
    ``__post_init__``); a UsageError names the flags, before anything is read or written."""
    given = training_args.flags_given
    if args.streaming and not ("max_steps" in given and training_args.max_steps > 0) and args.max_train_minutes is None:
        raise UsageError("--streaming needs --max_steps N (or --max_train_minutes): a stream has no length to count epochs in")
    varies = MaskRateSchedule.parse(args.mlm_probability_schedule, args.mlm_probability, args.mlm_probability_end).varies
    if args.batch_size_warmup_tokens and training_args.max_steps <= 0:
        raise UsageError("--batch_size_warmup_tokens needs --max_steps (or --max_train_minutes): the run is one stream")
    if varies or args.batch_size_warmup_tokens or args.max_tokens_per_batch is not None:
        check_row_sampling(training_args)
    if args.decay_from_checkpoint:
        if training_args.resume_from_checkpoint:
            raise UsageError("--decay_from_checkpoint continues a checkpoint itself; drop --resume_from_checkpoint")
        if "lr_scheduler_type" in given and training_args.lr_scheduler_type != WSD:
            raise UsageError("--decay_from_checkpoint runs the decay of a warmup_stable_decay schedule; drop --lr_scheduler_type")
    elif training_args.lr_scheduler_type != WSD:
        if args.lr_decay_steps is not None or "lr_decay_type" in given:
            raise UsageError("--lr_decay_steps and --lr_decay_type shape a --lr_scheduler_type warmup_stable_decay run")
    elif "num_decay_steps" in (training_args.lr_scheduler_kwargs or {}):
        if args.lr_decay_steps is not None:
            raise UsageError("give the decay length once: --lr_decay_steps or num_decay_steps in --lr_scheduler_kwargs")
    elif args.max_train_minutes is None and training_args.max_steps <= 0:
        raise UsageError("--lr_scheduler_type warmup_stable_decay needs --max_steps (or --max_train_minutes)")


# ------------------------------------------------------------------------------------------------
# Pretraining controls
# ------------------------------------------------------------------------------------------------
def resolve_controls(args: Any, training_args: TrainingArguments) -> None:
    """Fill in what the pretraining controls imply (after :func:`check_arguments`).

    Sets the learning-rate schedule's arguments (``lr_scheduler_kwargs`` of a warmup-stable-decay run; for
    ``--decay_from_checkpoint`` also ``--max_steps``, ``--learning_rate``, ``--warmup_steps`` and the tokenizer), and
    records what applies in ``args.schedules_applied`` (name -> one line), which the job prints and the card shows.

    Raises:
        UsageError: a decay that does not fit the run, or flags that contradict the checkpoint decayed.
    """
    applied: dict[str, str] = args.schedules_applied
    schedule = MaskRateSchedule.parse(args.mlm_probability_schedule, args.mlm_probability, args.mlm_probability_end)
    if schedule.varies:
        if schedule.kind == "phases":
            args.mlm_probability = schedule.start  # what the card and the printed configuration call the training rate
            args.defaults_applied["mlm_probability"] = "first phase of --mlm_probability_schedule"
        applied["masking-rate schedule"] = schedule.describe() + " (per optimizer step, logged as mlm_probability)"
    if (args.mask_replace_prob, args.random_replace_prob) != (0.8, 0.1):
        kept = max(0.0, 1.0 - args.mask_replace_prob - args.random_replace_prob)
        applied["masked-token replacement (training)"] = (
            f"{args.mask_replace_prob:.0%} [MASK] / {args.random_replace_prob:.0%} random / {kept:.0%} kept"
        )
    if args.batch_size_warmup_tokens:
        applied["batch-size warmup"] = batch_size_warmup(args, training_args).describe()
    if args.max_tokens_per_batch is not None:
        applied["token-budget batches"] = (
            f"whole rows packed into flattened micro-batches of at most {args.max_tokens_per_batch:,} tokens, padded to "
            f"exactly {args.max_tokens_per_batch:,}"
        )
    if args.decay_from_checkpoint:
        _resolve_decay_run(args, training_args)
    elif training_args.lr_scheduler_type == WSD:
        _resolve_wsd_schedule(args, training_args)


def batch_size_warmup(args: Any, training_args: TrainingArguments) -> BatchSizeWarmup:
    rows = training_args.per_device_train_batch_size
    return BatchSizeWarmup(
        tokens=args.batch_size_warmup_tokens,
        min_rows=args.batch_size_warmup_min_rows or max(1, rows // 4),
        max_rows=rows,
        row_tokens=args.max_seq_length,
        rows_multiplier=training_args.world_size * training_args.gradient_accumulation_steps,
    )


def _lr_schedule_summary(args: Any, training_args: TrainingArguments) -> str:
    return lr_schedule_summary(
        training_args, time_budget=args.max_train_minutes is not None, decay=args.lr_decay_steps,
        decay_from_checkpoint=args.decay_from_checkpoint,
    )  # fmt: skip


def _resolve_wsd_schedule(args: Any, training_args: TrainingArguments) -> None:
    kwargs = dict(training_args.lr_scheduler_kwargs or {})
    decay = args.lr_decay_steps if args.lr_decay_steps is not None else DEFAULT_LR_DECAY
    if "num_decay_steps" not in kwargs:
        if decay >= 1 and not float(decay).is_integer():
            raise UsageError(f"--lr_decay_steps is a fraction below 1 or a whole number of steps, got {decay:g}")
        steps = training_args.max_steps
        if args.max_train_minutes is None:
            count = max(1, round(decay * steps)) if decay < 1 else int(decay)
            warmup = training_args.get_warmup_steps(steps)
            if count > steps - warmup:
                raise UsageError(
                    f"--lr_decay_steps {decay:g}: {count} decay steps do not fit in {steps} steps after {warmup} of warmup"
                )
            kwargs["num_decay_steps"] = count
        else:
            kwargs["num_decay_steps"] = 1  # WsdTimeBudgetCallback replaces the schedule: the decay follows the plan
        args.lr_decay_steps = decay
    kwargs.setdefault("decay_type", args.lr_decay_type)
    args.lr_decay_type = kwargs["decay_type"]
    training_args.lr_scheduler_kwargs = kwargs
    args.schedules_applied["learning-rate schedule"] = _lr_schedule_summary(args, training_args)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _resolve_decay_run(args: Any, training_args: TrainingArguments) -> None:
    given = training_args.flags_given
    folder = Path(args.decay_from_checkpoint)
    step = int(_read_json(folder / "trainer_state.json")["global_step"])
    decay = int(args.lr_decay_steps)
    if "max_steps" in given and training_args.max_steps != step + decay:
        raise UsageError(
            f"--decay_from_checkpoint at step {step} with --lr_decay_steps {decay} ends at step {step + decay}; "
            f"drop --max_steps {training_args.max_steps}"
        )
    scheduler_file = folder / "scheduler.json"
    peak = None
    if scheduler_file.is_file():  # never the stock scheduler.pt: that is a pickle
        scheduler = _read_json(scheduler_file)
        peak, last = max(scheduler.get("base_lrs") or [0.0]), max(scheduler.get("_last_lr") or [0.0])
        if last < 0.999 * peak:
            raise UsageError(
                f"--decay_from_checkpoint {folder}: its learning rate {last:.3g} is below its peak {peak:.3g} (a warmup "
                "or decay phase); decay from a checkpoint saved in the stable phase"
            )
    arguments_file = folder / "training_args.json"
    if arguments_file.is_file():
        peak = _read_json(arguments_file).get("learning_rate", peak)
    if peak is not None:
        if "learning_rate" in given and not math.isclose(training_args.learning_rate, peak, rel_tol=1e-6):
            raise UsageError(
                f"--decay_from_checkpoint decays from the checkpoint's learning rate {peak:g}; drop --learning_rate"
            )
        training_args.learning_rate = peak
    training_args.max_steps = step + decay
    training_args.warmup_steps = 0  # warm-up is over: steps 0..step are the checkpoint's
    training_args.lr_scheduler_type = WSD
    # With no warmup the stable phase is num_training_steps - num_decay_steps = the checkpoint's steps.
    training_args.lr_scheduler_kwargs = {"num_decay_steps": decay, "decay_type": args.lr_decay_type}
    if not (args.tokenizer_name or args.train_tokenizer or args.vocab_size):
        args.tokenizer_name = str(folder)  # the stable run's vocabulary, saved with the checkpoint
    args.schedules_applied["learning-rate schedule"] = _lr_schedule_summary(args, training_args)


def batch_description(args: Any, training_args: TrainingArguments) -> str:
    """A step's batch in words: rows of ``--max_seq_length`` tokens, or micro-batches of a token budget."""
    if args.max_tokens_per_batch is None:
        return f"{rows_per_step(training_args)} x {args.max_seq_length} tokens"
    micro_batches = training_args.world_size * training_args.gradient_accumulation_steps
    return f"{micro_batches} x {args.max_tokens_per_batch:,} tokens (token budget)"


def describe_controls(args: Any) -> str:
    """Lines the job prints after its configuration when a control is on (empty otherwise)."""
    if not args.schedules_applied:
        return ""
    return "\n".join(["pretraining controls:", *(f"  {name}: {value}" for name, value in args.schedules_applied.items())])


def describe_configuration(args: Any, training_args: TrainingArguments) -> str:
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
    lines += [f"  {name} {value}{default_source(args.defaults_applied, name)}" for name, value in values.items()]
    warmup = training_args.warmup_steps
    lines.append(
        f"  warmup {f'{warmup:g} of the steps' if 0 < warmup < 1 else f'{warmup:g} steps'}, weight_decay "
        f"{training_args.weight_decay:g}, adam_beta2 {training_args.adam_beta2:g}, batch {batch_description(args, training_args)}, "
        f"eval masks {args.eval_mlm_probability:g}"
    )
    if args.model_name_or_path or args.config_name:
        ignored = [f"--{name}" for name in NEW_MODEL_OPTIONS if args.defaults_applied.get(name) == GIVEN]
        whose = "--config_name's" if args.config_name else "the checkpoint's"
        lines.append(
            f"  architecture and dropout: {whose} (--config_overrides changes them)"
            + (f"; ignored: {', '.join(ignored)} (options of a new model)" if ignored else "")
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Corpus
# ------------------------------------------------------------------------------------------------
def _fixed_tokenizer_flag(args: Any) -> str:
    """The flag naming the tokenizer of a run whose rows need a fixed one ("" when none does)."""
    if args.tokenizer_name:
        return f"--tokenizer_name {args.tokenizer_name}"
    if args.model_name_or_path:
        return f"--model_name_or_path {args.model_name_or_path}"
    return ""


def open_corpus_source(args: Any, training_args: TrainingArguments) -> CorpusSource:
    """The run's corpus: documents in memory, a ``--prepared_data`` folder or a ``--streaming`` one, opened and
    checked against the flags (one-line errors, before anything is written).

    Adjusts ``args`` to a prepared folder (its tokenizer and row settings; no trained vocabulary) and, for a stream,
    ``training_args`` (each process reads and restores its own part, see
    :class:`~mlm_suite.training.stream_position.StreamPositionMixin`).
    """
    given = training_args.flags_given
    if args.prepared_data:
        prepared = load_prepared(args.prepared_data)
        tokenizer_source = _fixed_tokenizer_flag(args) or f"--prepared_data {args.prepared_data}"
        if not (args.tokenizer_name or args.model_name_or_path):
            args.tokenizer_name = str(prepared.tokenizer_path)
        args.train_tokenizer = False
        for flag in ("max_seq_length", "packing"):
            if flag in given and getattr(args, flag) != prepared.metadata[flag]:
                raise UsageError(
                    f"--{flag} {getattr(args, flag)} differs from --prepared_data {args.prepared_data}'s "
                    f"{prepared.metadata[flag]}: drop the flag or prepare the data again"
                )
            setattr(args, flag, prepared.metadata[flag])
        if args.max_tokens_per_batch is not None:
            check_token_budget(args.max_tokens_per_batch, args.max_seq_length)
        # Folders prepared before packed rows carried the tokenizer's word ids still train token masking.
        if args.masking != "token" and "word_ids" not in prepared.train.column_names:
            raise UsageError(
                f"--prepared_data {args.prepared_data} holds packed rows without word ids (prepared by an older mlm-suite), "
                f"which --masking {args.masking} needs: prepare the data again"
            )
        validation = None  # the held-out documents prepared with the rows, unless a file replaces them
        if args.validation_file:
            validation = Dataset.from_dict({"text": read_documents(args.validation_file, args.text_column_name)})
        return PreparedCorpus(prepared, _row_format(args), tokenizer_source, validation)
    source = DocumentSource(
        train_file=args.train_file, validation_file=args.validation_file, dataset_name=args.dataset_name,
        dataset_config_name=args.dataset_config_name, validation_split_name=args.validation_split_name,
        text_column=args.text_column_name, embedded=BUILTIN_DATASETS["pang_lee_reviews"],
    )  # fmt: skip
    if args.streaming:
        args.train_tokenizer = False
        documents, validation, description, held_out_split = stream_pretraining_documents(
            source, args.held_out_documents, **args.dataset_kwargs()
        )
        part = split_for_processes(documents, training_args.process_index, training_args.world_size)
        world, shards = training_args.world_size, documents.num_shards
        shards_per_process = shards // world if shards >= world else shards
        if training_args.dataloader_num_workers > shards_per_process:
            # datasets gives each worker whole shards and stops the others; a stopped worker would also make
            # the restored position of a resumed run depend on timing.
            raise UsageError(
                f"--dataloader_num_workers {training_args.dataloader_num_workers} exceeds the {shards_per_process} "
                f"shard(s) each process reads: use at most {shards_per_process} (0 reads in the main process)"
            )
        training_args.accelerator_config.dispatch_batches = False
        training_args.ignore_data_skip = True
        return StreamedCorpus(documents, part, validation, description, _row_format(args), held_out_split)
    documents, description, held_out_split = load_pretraining_documents(
        source, args.validation_split_percentage, args.preprocessing_num_workers, args.overwrite_cache,
        **args.dataset_kwargs(),
    )
    return InMemoryCorpus(documents, description, _row_format(args), held_out_split, source.training_flag())


def _row_format(args: Any) -> RowFormat:
    return RowFormat(
        max_seq_length=args.max_seq_length, packing=args.packing, objective=args.objective,
        nsp_probability=args.nsp_probability, num_proc=args.preprocessing_num_workers,
        overwrite_cache=args.overwrite_cache,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# Tokenizer and model
# ------------------------------------------------------------------------------------------------
def load_tokenizer(args: Any, corpus: CorpusSource, resumed: str | None = None) -> PreTrainedTokenizerBase:
    """``--tokenizer_name``, the checkpoint's, a WordPiece vocabulary trained on ``corpus``' documents, or MiniLM's;
    checked against ``corpus`` (:meth:`~mlm_suite.data.corpus_sources.CorpusSource.check_tokenizer`), then for
    what masking needs.

    A run that trains its vocabulary and resumes from the checkpoint ``resumed`` takes the vocabulary saved there,
    the one its weights were trained with.
    """
    train = args.train_tokenizer
    if train is None:
        # A small vocabulary fitted to the data learns faster than a general 30k one (see the job's PretrainTrainingArguments).
        train = bool(args.vocab_size) or not (args.tokenizer_name or args.model_name_or_path)
    if train and resumed:
        source = f"checkpoint {resumed}"
        tokenizer = _resumed_tokenizer(resumed, args.vocab_size or DEFAULT_TRAINED_VOCAB_SIZE)
    elif train:
        source = None  # a vocabulary trained on the corpus has words when the corpus has: the corpus check names it
        vocab_size = args.vocab_size or DEFAULT_TRAINED_VOCAB_SIZE
        tokenizer = train_wordpiece_tokenizer(corpus.tokenizer_texts(), vocab_size=vocab_size)
    else:
        source = _fixed_tokenizer_flag(args) or "MiniLM's vocabulary (--train_tokenizer false)"
        name = args.tokenizer_name or args.model_name_or_path or str(resources.minilm_dir())
        tokenizer = pretrained_tokenizer(name, **args.pretrained_kwargs())
    if not tokenizer.is_fast:
        raise ValueError(f"a fast tokenizer is needed (word ids, batched encoding); {type(tokenizer).__name__} is not")
    corpus.check_tokenizer(tokenizer)  # first: documents without a word train a vocabulary of special tokens only
    check_mlm_tokenizer(tokenizer, source)
    return tokenizer


_TRUE, _FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")


def _typed_value(text: str, current: Any) -> Any:
    """``text`` as a value of ``current``'s type (a bool, int, float or string; any of them for a field set to None)."""
    if isinstance(current, bool) or current is None and text.lower() in ("true", "false"):
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ValueError("a bool (true or false)")
    if isinstance(current, int) or current is None and text.lstrip("+-").isdigit():
        try:
            return int(text)
        except ValueError:
            raise ValueError("an int") from None
    if isinstance(current, float) or current is None:
        try:
            value = float(text)
        except ValueError:
            if current is None:
                return text
            raise ValueError("a float") from None
        if not math.isfinite(value):
            raise ValueError("a finite float")
        return value
    if isinstance(current, str):
        return text
    raise ValueError(f"a {type(current).__name__}, which --config_overrides cannot set (use --config_name)")


def apply_config_overrides(config: MlmSuiteConfig, overrides: str) -> MlmSuiteConfig:
    """``config`` with ``overrides`` (``name=value,...``, ``--config_overrides``), each value read as its field's type.

    Raises:
        UsageError: an item that is not ``name=value``, a name the config has not, a value not of the field's type,
            or values the config's own checks refuse (``num_attention_heads=0``).
    """
    fields = config.to_dict()
    for item in overrides.split(","):
        name, separator, text = (part.strip() for part in item.partition("="))
        if not separator or not name or not text:
            raise UsageError(f"--config_overrides {overrides}: {item.strip()!r} is not name=value")
        if name not in fields and not hasattr(config, name):
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"--config_overrides {name}={text}: {type(config).__name__} has no field {name}{hint}")
        try:
            value = _typed_value(text, getattr(config, name))
        except ValueError as error:
            raise UsageError(f"--config_overrides {name}={text}: {name} is {error}, not {text!r}") from None
        setattr(config, name, value)
    try:
        # Set one by one; rebuilding re-runs the config's own checks.
        config = MlmSuiteConfig.from_dict(config.to_dict())
        config.check_sizes()
    except ValueError as error:
        raise UsageError(f"--config_overrides {overrides}: {error}") from None
    return config


def _resumed_tokenizer(checkpoint: str, vocab_size: int) -> PreTrainedTokenizerBase:
    if not (Path(checkpoint) / "tokenizer.json").is_file():
        raise UsageError(
            f"checkpoint {checkpoint} has no tokenizer.json: this run trains its own vocabulary and resumes with the "
            "one saved in the checkpoint; resume from a complete checkpoint, or give its run's tokenizer with --tokenizer_name"
        )
    tokenizer = pretrained_tokenizer(checkpoint)
    if len(tokenizer) > vocab_size:
        raise UsageError(
            f"checkpoint {checkpoint} has a vocabulary of {len(tokenizer)} tokens, more than the {vocab_size} this run "
            "trains (--vocab_size): resume from a checkpoint of this run"
        )
    return tokenizer


def build_config(args: Any, tokenizer: PreTrainedTokenizerBase, checkpoint: str | None = None) -> MlmSuiteConfig:
    """The model's configuration: ``--config_name``'s, else ``checkpoint``'s (an mlm_suite folder), else a preset sized
    to ``tokenizer``."""
    if args.config_name:
        config = pretrained_config(args.config_name, **args.pretrained_kwargs())
        if not isinstance(config, MlmSuiteConfig):
            raise ValueError(
                f"--config_name {args.config_name} holds a {config.model_type!r} config; pretraining builds mlm_suite "
                "models (a BERT model: pass its folder as --model_name_or_path)"
            )
    elif checkpoint:
        config = pretrained_config(checkpoint, **args.pretrained_kwargs())
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
        config = apply_config_overrides(config, args.config_overrides)
    # --rope_theta; a rotary checkpoint's positions follow longer rows
    extension = extend_context(config, tokenizer, args.rope_theta, args.max_seq_length, continued=bool(checkpoint))
    if extension:
        args.schedules_applied["context extension" if checkpoint else "positions"] = extension
    config.check_sizes()
    # A preset is sized to the tokenizer: only --config_overrides can make it smaller.
    model_source = args.config_name or args.model_name_or_path or checkpoint or f"--config_overrides {args.config_overrides}"
    check_vocabulary(tokenizer, config, tokenizer.name_or_path or "trained on the corpus", model_source)
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


def extend_context(
    config: MlmSuiteConfig, tokenizer: PreTrainedTokenizerBase, rope_theta: float | None, max_seq_length: int,
    continued: bool,
) -> str | None:
    """A new RoPE base (``rope_theta``) and, for a ``continued`` rotary checkpoint at longer rows, a
    ``max_position_embeddings`` (and ``tokenizer.model_max_length``) that follows ``max_seq_length`` (rotary
    positions have no table to outgrow). Changes ``config`` and ``tokenizer`` in place; returns the change in words
    (None: nothing changed).

    Raises:
        UsageError: ``rope_theta`` for a model with absolute positions.
    """
    rotary = config.position_embedding_type == "rotary"
    changes = []
    if rope_theta is not None:
        if not rotary:
            raise UsageError(
                f"--rope_theta sets the base of rotary positions; this model's positions are {config.position_embedding_type}"
            )
        if rope_theta != config.rope_theta:
            changes.append(f"RoPE base {config.rope_theta:g} → {rope_theta:g}")
            config.rope_theta = float(rope_theta)
    if continued and rotary and max_seq_length > config.max_position_embeddings:
        changes.append(f"max_position_embeddings {config.max_position_embeddings} → {max_seq_length}")
        config.max_position_embeddings = max_seq_length
        if tokenizer.model_max_length < max_seq_length:
            tokenizer.model_max_length = max_seq_length
    return ", ".join(changes) + f" (rows of {max_seq_length} tokens)" if changes else None


def build_model(
    args: Any, config: MlmSuiteConfig, checkpoint: str | None = None
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
