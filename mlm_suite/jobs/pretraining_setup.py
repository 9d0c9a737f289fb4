"""What the pretraining job (``mlm-suite pretrain``) sets up before it trains: its checks of the arguments, the
configuration it prints, and its tokenizer, configuration and model (a preset, ``--config_name`` or a continued
checkpoint).

* :func:`resolve_job_defaults`: the continued-pretraining defaults (unless given) and the values the job derives;
* :func:`validate_arguments`: the checks that need no data (each error names the option);
* :func:`describe_configuration`: the mode-dependent values and where each came from, as the job prints them;
* :func:`load_tokenizer`: ``--tokenizer_name``, the checkpoint's, a WordPiece vocabulary trained on the data, or MiniLM's;
* :func:`build_config` / :func:`build_model`: the model to pretrain; a head a checkpoint lacks is new;
* :func:`describe_new_weights`: which weights a continued checkpoint lacked.

``args`` is the job's ``PretrainingArguments`` (:mod:`mlm_suite.jobs.pretrain`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase, TrainingArguments

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM, MlmSuiteForPreTraining
from mlm_suite.data import resources
from mlm_suite.data.masking import check_mlm_tokenizer
from mlm_suite.data.tokenization import train_wordpiece_tokenizer
from mlm_suite.jobs.arguments import apply_defaults
from mlm_suite.cards import default_source
from mlm_suite.training.controls import rows_per_step
from mlm_suite.training.schedules import UNBOUNDED_STEPS, extend_context

__all__ = [
    "CONTINUED",
    "DEFAULT_TRAINED_VOCAB_SIZE",
    "FROM_SCRATCH",
    "GIVEN",
    "NEW_MODEL_OPTIONS",
    "build_config",
    "build_model",
    "describe_configuration",
    "describe_new_weights",
    "load_tokenizer",
    "resolve_job_defaults",
    "validate_arguments",
]

DEFAULT_TRAINED_VOCAB_SIZE = 2048
# Where a mode-dependent value came from (args.defaults_applied, set by the job's parse_arguments).
CONTINUED = "continued-pretraining default"
FROM_SCRATCH = "from-scratch default"
GIVEN = "given"
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
    process, ``--flatten_batches`` follows the device, ``--warmup_ratio``) and those the job forces.
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


def validate_arguments(args: Any) -> None:
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


# ------------------------------------------------------------------------------------------------
# Tokenizer and model
# ------------------------------------------------------------------------------------------------
def load_tokenizer(args: Any, train_texts: list[str]) -> PreTrainedTokenizerBase:
    """``--tokenizer_name``, the checkpoint's, a WordPiece vocabulary trained on ``train_texts``, or MiniLM's."""
    train = args.train_tokenizer
    if train is None:
        # A small vocabulary fitted to the data learns faster than a general 30k one (see the job's PretrainTrainingArguments).
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


def build_config(args: Any, tokenizer: PreTrainedTokenizerBase, checkpoint: str | None = None) -> MlmSuiteConfig:
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
