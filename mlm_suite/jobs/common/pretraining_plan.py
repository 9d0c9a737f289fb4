"""One plan per pretraining run: the flags of ``mlm-suite pretrain`` resolved once, after parsing, into one value.

:meth:`PretrainingPlan.resolve` takes the parsed ``PretrainingArguments`` and ``PretrainTrainingArguments``
(:mod:`mlm_suite.jobs.pretrain`) and, without changing them, resolves in order:

1. the mode defaults: a continued checkpoint's (``CONTINUED_DEFAULTS``) replace the from-scratch ones unless given,
   each value with where it came from (:data:`GIVEN`, :data:`CONTINUED`, :data:`FROM_SCRATCH`);
2. what follows from other flags: ``--max_train_minutes`` lifts the step limit, ``--streaming`` loads in the main
   process, ``--flatten_batches`` follows the device, ``--warmup_ratio``;
3. the checks that combine the two dataclasses (each checks its own fields in ``__post_init__``);
4. the pretraining controls: the masking-rate schedule (parsed here, once), the replacement split, the batch-size
   warmup, token-budget batches and the learning-rate schedule (a warmup-stable-decay run, or the decay of one
   from a checkpoint);
5. the corpus: a prepared folder is opened and checked against the flags (its tokenizer, row length and packing);
   the languages of a run of several, and how they are drawn (``--language_sampling_alpha`` and its schedule);
6. the tokenizer: given, the checkpoint's, the prepared folder's, or one trained on the corpus;
7. the checkpoint the training continues from (``--resume_from_checkpoint``, a stopped run's, or the decayed one);
8. the model: the checkpoint it continues (converted when of another family) and the change of its positions
   (``--rope_theta``, a context extension).

The plan holds the flags as this run uses them (:attr:`~PretrainingPlan.args`, :attr:`~PretrainingPlan.training_args`:
copies, the Trainer's among them) and what they imply; the corpus opener, the tokenizer, config and model
builders, the trainer, the printed configuration and the card read it. Nothing is read from or written to the
output folder. See docs/pretraining.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from mlm_suite.cards import PretrainingRecipe, default_source
from mlm_suite.data.inputs.downloads import DEBIAN_REFERENCE_LANGUAGES
from mlm_suite.data.pretraining.languages import LanguageMix, language_names
from mlm_suite.data.pretraining.prepared import PreparedData, load_prepared
from mlm_suite.data.pretraining.schedules import BatchSizeWarmup, MaskRateSchedule
from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.arguments import GIVEN, derived_training_arguments
from mlm_suite.jobs.common.checkpoints import resume_checkpoint
from mlm_suite.jobs.common.model_loading import (
    apply_config_overrides, mlm_suite_checkpoint, position_changes, pretrained_config,
)  # fmt: skip
from mlm_suite.model import MlmSuiteConfig
from mlm_suite.jobs.common.pretraining_arguments import PretrainingArguments, PretrainTrainingArguments, check_token_budget
from mlm_suite.training.controls import (
    DEFAULT_LR_DECAY, UNBOUNDED_STEPS, WSD, early_stopping_arguments, lr_schedule_summary, rows_per_step,
)  # fmt: skip
from mlm_suite.training.schedules import check_row_sampling


__all__ = ["CONTINUED", "FROM_SCRATCH", "NEW_MODEL_OPTIONS", "PretrainingPlan", "model_config"]

# Where a mode-dependent value came from (PretrainingPlan.value_sources).
CONTINUED = "continued-pretraining default"
FROM_SCRATCH = "from-scratch default"
# Options that build a new model: a checkpoint brings its own architecture, so they do not apply to it.
NEW_MODEL_OPTIONS = ("config_preset", "norm_position", "position_embedding_type")


@dataclasses.dataclass(frozen=True)
class PretrainingPlan:
    """A pretraining run, resolved (see the module). Build it with :meth:`resolve`.

    Attributes:
        args: the data, tokenizer and model flags as the run uses them (a prepared folder's row settings, the
            tokenizer chosen, the first phase's masking rate, a warmup-stable-decay run's decay).
        training_args: the ``TrainingArguments`` the Trainer gets (mode defaults, the learning-rate schedule, the
            step limit, early stopping's checkpoints and metric, the loader settings of a stream, the checkpoint
            continued).
        value_sources: where each mode-dependent value came from (name -> GIVEN, CONTINUED, FROM_SCRATCH or why).
        mask_schedule: the training masking rate per optimizer step.
        batch_size_warmup: rows per step growing over the first tokens (None: none).
        controls: the pretraining controls that are on (name -> one line), printed and shown in the card.
        lr_schedule: the learning-rate schedule in words.
        prepared: the ``--prepared_data`` folder, opened (None: documents are read).
        trains_tokenizer: a WordPiece vocabulary is trained on the corpus.
        tokenizer_flag: the flag naming a fixed tokenizer ("" when none names it: MiniLM's, or a trained one).
        resume_from_checkpoint: the checkpoint the training continues from (None: from the start).
        model_source: the mlm_suite folder whose weights the model starts from: ``--model_name_or_path``, converted
            when it is of another family (None: new weights).
        config_source: the folder the configuration comes from when no ``--config_name`` gives it: the model source,
            or the checkpoint a decay run continues (None: a preset).
        position_changes: the configuration fields ``--rope_theta`` and a context extension change (also a row of
            ``controls``).
        language_mix: the languages of a run of several and how they are drawn (None: one corpus; also a row of
            ``controls``).
    """

    args: PretrainingArguments
    training_args: PretrainTrainingArguments
    value_sources: Mapping[str, str]
    mask_schedule: MaskRateSchedule
    batch_size_warmup: BatchSizeWarmup | None
    controls: Mapping[str, str]
    lr_schedule: str
    prepared: PreparedData | None
    trains_tokenizer: bool
    tokenizer_flag: str
    resume_from_checkpoint: str | None
    model_source: str | None
    config_source: str | None
    position_changes: Mapping[str, Any]
    language_mix: LanguageMix | None = None

    @classmethod
    def resolve(
        cls, args: PretrainingArguments, training_args: PretrainTrainingArguments, continued_defaults: Mapping[str, Any]
    ) -> PretrainingPlan:
        """The plan of the run the parsed flags ask for; ``args`` and ``training_args`` are not changed.

        Raises:
            UsageError: flags that contradict each other, a controls' value that does not fit the run, a prepared
                folder that differs from the flags, a checkpoint to resume that is missing or cut short.
        """
        given = training_args.flags_given
        changes: dict[str, Any] = {}  # PretrainingArguments fields the run uses differently from the flags
        training: dict[str, Any] = {}  # the same for the TrainingArguments
        sources: dict[str, str] = {}

        # 1. Mode defaults: a continued checkpoint's, unless given.
        for name, value in continued_defaults.items():
            if name in given:
                sources[name] = GIVEN
            elif args.model_name_or_path:
                (training if name in type(training_args).__dataclass_fields__ else changes)[name] = value
                sources[name] = CONTINUED
            else:
                sources[name] = FROM_SCRATCH
        if args.model_name_or_path or args.config_name:
            sources.update((name, GIVEN) for name in NEW_MODEL_OPTIONS if name in given)

        # 2. Values that follow from other flags.
        if args.max_train_minutes is not None and "max_steps" not in given:
            # The budget decides when to stop; the job's default step count must not cut it short.
            training["max_steps"] = UNBOUNDED_STEPS
            sources["max_steps"] = "--max_train_minutes decides"
        if args.streaming and "dataloader_num_workers" not in given:
            training["dataloader_num_workers"] = 0  # a stream's workers each need a shard of their own
        if args.flatten_batches is None:
            changes["flatten_batches"] = training_args.device.type == "cuda" or args.max_tokens_per_batch is not None
        warmup_ratio = getattr(args, "warmup_ratio", None)  # TrainingArguments' own before transformers 5.15
        if warmup_ratio is not None:
            training["warmup_steps"] = warmup_ratio
        run = derived_training_arguments(training_args, **training)  # what the checks below see

        # 3. Checks that combine the two dataclasses.
        mask_schedule = MaskRateSchedule.parse(args.mlm_probability_schedule, args.mlm_probability, args.mlm_probability_end)
        _check_combinations(args, run, given, mask_schedule)

        # 4. Pretraining controls.
        controls: dict[str, str] = {}
        if mask_schedule.varies:
            if mask_schedule.kind == "phases":
                changes["mlm_probability"] = mask_schedule.start  # what the card and the printout call the training rate
                sources["mlm_probability"] = "first phase of --mlm_probability_schedule"
            controls["masking-rate schedule"] = mask_schedule.describe() + " (per optimizer step, logged as mlm_probability)"
        if (args.mask_replace_prob, args.random_replace_prob) != (0.8, 0.1):
            kept = max(0.0, 1.0 - args.mask_replace_prob - args.random_replace_prob)
            controls["masked-token replacement (training)"] = (
                f"{args.mask_replace_prob:.0%} [MASK] / {args.random_replace_prob:.0%} random / {kept:.0%} kept"
            )
        batch_size_warmup = None
        if args.batch_size_warmup_tokens:
            rows = run.per_device_train_batch_size
            batch_size_warmup = BatchSizeWarmup(
                tokens=args.batch_size_warmup_tokens,
                min_rows=args.batch_size_warmup_min_rows or max(1, rows // 4),
                max_rows=rows,
                row_tokens=args.max_seq_length,
                rows_multiplier=run.world_size * run.gradient_accumulation_steps,
            )
            controls["batch-size warmup"] = batch_size_warmup.describe()
        if args.max_tokens_per_batch is not None:
            controls["token-budget batches"] = (
                f"whole rows packed into flattened micro-batches of at most {args.max_tokens_per_batch:,} tokens, padded "
                f"to exactly {args.max_tokens_per_batch:,}"
            )
        if args.early_stopping_patience is not None:  # the saved model is the best one by held-out [MASK] accuracy
            training.update(
                metric_for_best_model="mask_accuracy", greater_is_better=True,
                **early_stopping_arguments(run.eval_strategy, run.eval_steps),
            )  # fmt: skip
        if args.decay_from_checkpoint:
            training.update(_decay_run(args, run, given))
            if not (args.tokenizer_name or args.train_tokenizer or args.vocab_size):
                changes["tokenizer_name"] = args.decay_from_checkpoint  # the stable run's vocabulary, saved with it
        elif run.lr_scheduler_type == WSD:
            lr_decay_steps, scheduler_kwargs = _wsd_schedule(args, run)
            changes.update(lr_decay_steps=lr_decay_steps, lr_decay_type=scheduler_kwargs["decay_type"])
            training["lr_scheduler_kwargs"] = scheduler_kwargs

        # 5. The corpus: a prepared folder brings its tokenizer and row settings.
        tokenizer_flag = _named_tokenizer(args.tokenizer_name or changes.get("tokenizer_name"), args.model_name_or_path)
        prepared = None
        if args.prepared_data:
            prepared = load_prepared(args.prepared_data)
            tokenizer_flag = tokenizer_flag or f"--prepared_data {args.prepared_data}"
            if not (args.tokenizer_name or changes.get("tokenizer_name") or args.model_name_or_path):
                changes["tokenizer_name"] = str(prepared.tokenizer_path)
            for flag in ("max_seq_length", "packing"):
                if flag in given and getattr(args, flag) != prepared.metadata[flag]:
                    raise UsageError(
                        f"--{flag} {getattr(args, flag)} differs from --prepared_data {args.prepared_data}'s "
                        f"{prepared.metadata[flag]}: drop the flag or prepare the data again"
                    )
                changes[flag] = prepared.metadata[flag]
            if args.max_tokens_per_batch is not None:
                check_token_budget(args.max_tokens_per_batch, changes["max_seq_length"])
            # Folders prepared before packed rows carried the tokenizer's word ids still train token masking.
            if args.masking != "token" and "word_ids" not in prepared.train.column_names:
                raise UsageError(
                    f"--prepared_data {args.prepared_data} holds packed rows without word ids (prepared by an older "
                    f"mlm-suite), which --masking {args.masking} needs: prepare the data again"
                )
        language_mix = _language_mix(args, run) if args.names_languages else None
        if language_mix is not None:
            controls["languages"] = language_mix.describe()
        if args.streaming:
            # Each process reads and restores its own part of the stream (see the trainer's stream position).
            training["accelerator_config"] = dataclasses.replace(run.accelerator_config, dispatch_batches=False)
            training["ignore_data_skip"] = True

        # 6. The tokenizer: a small vocabulary fitted to the data learns faster than a general 30k one.
        trains_tokenizer = args.train_tokenizer
        if trains_tokenizer is None:
            trains_tokenizer = bool(args.vocab_size) or not (args.tokenizer_name or args.model_name_or_path)
        trains_tokenizer = trains_tokenizer and not (prepared or args.streaming or changes.get("tokenizer_name"))

        # 7. Where the training starts: --resume_from_checkpoint, a stopped run's last checkpoint, or the decayed one.
        resumed = resume_checkpoint(training_args) or args.decay_from_checkpoint
        training["resume_from_checkpoint"] = resumed

        # 8. The model: the checkpoint continued (converted from its family), and how its positions change.
        model_source = mlm_suite_checkpoint(args.model_name_or_path, **args.pretrained_kwargs()) if args.model_name_or_path else None
        config_source = model_source or args.decay_from_checkpoint
        resolved = dataclasses.replace(args, **changes)
        config = model_config(resolved, config_source)
        if model_source and args.config_overrides:
            _check_weight_shapes(config, pretrained_config(model_source, **args.pretrained_kwargs()), args)
        position_fields, position_text = position_changes(
            config, args.rope_theta, resolved.max_seq_length, continued=bool(config_source)
        )
        if position_text:  # --rope_theta; a rotary checkpoint's positions follow longer rows
            controls["context extension" if config_source else "positions"] = position_text

        run = derived_training_arguments(training_args, **training)
        lr_schedule = lr_schedule_summary(
            run, time_budget=args.max_train_minutes is not None,
            decay=changes.get("lr_decay_steps", args.lr_decay_steps), decay_from_checkpoint=args.decay_from_checkpoint,
        )  # fmt: skip
        if run.lr_scheduler_type == WSD:
            controls["learning-rate schedule"] = lr_schedule
        return cls(
            args=resolved,
            training_args=run,
            value_sources=MappingProxyType(sources),
            mask_schedule=mask_schedule,
            batch_size_warmup=batch_size_warmup,
            controls=MappingProxyType(controls),
            lr_schedule=lr_schedule,
            prepared=prepared,
            trains_tokenizer=trains_tokenizer,
            tokenizer_flag=tokenizer_flag,
            resume_from_checkpoint=resumed,
            model_source=model_source,
            config_source=config_source,
            position_changes=MappingProxyType(position_fields),
            language_mix=language_mix,
        )

    # --------------------------------------------------------------------------------------------------------------
    # What the job prints and the card says
    # --------------------------------------------------------------------------------------------------------------
    def batch_description(self) -> str:
        """A step's batch in words: rows of ``--max_seq_length`` tokens, or micro-batches of a token budget."""
        args, training_args = self.args, self.training_args
        if args.max_tokens_per_batch is None:
            return f"{rows_per_step(training_args)} x {args.max_seq_length} tokens"
        micro_batches = training_args.world_size * training_args.gradient_accumulation_steps
        return f"{micro_batches} x {args.max_tokens_per_batch:,} tokens (token budget)"

    def describe(self) -> str:
        """The configuration as the job prints it at the start: the values that depend on whether a checkpoint is
        continued, each with where it came from, then the shared ones, then the controls that are on."""
        args, training_args, controls = self.args, self.training_args, self.controls
        new_model = f"config {args.config_name}" if args.config_name else f"preset {args.config_preset}"
        mode = f"continuing {args.model_name_or_path}" if args.model_name_or_path else f"from scratch, {new_model}"
        lines = [f"pretraining configuration ({mode}; flags given on the command line win):"]
        values = {
            "learning_rate": f"{training_args.learning_rate:g}",
            "mlm_probability": f"{args.mlm_probability:g}",
            "max_steps": "unbounded" if training_args.max_steps == UNBOUNDED_STEPS else f"{training_args.max_steps}",
        }
        lines += [f"  {name} {value}{default_source(self.value_sources, name)}" for name, value in values.items()]
        warmup = training_args.warmup_steps
        lines.append(
            f"  warmup {f'{warmup:g} of the steps' if 0 < warmup < 1 else f'{warmup:g} steps'}, weight_decay "
            f"{training_args.weight_decay:g}, adam_beta2 {training_args.adam_beta2:g}, batch {self.batch_description()}, "
            f"eval masks {args.eval_mlm_probability:g}"
        )
        if args.model_name_or_path or args.config_name:
            ignored = [f"--{name}" for name in NEW_MODEL_OPTIONS if self.value_sources.get(name) == GIVEN]
            whose = "--config_name's" if args.config_name else "the checkpoint's"
            lines.append(
                f"  architecture and dropout: {whose} (--config_overrides changes them)"
                + (f"; ignored: {', '.join(ignored)} (options of a new model)" if ignored else "")
            )
        if controls:
            lines += ["pretraining controls:", *(f"  {name}: {value}" for name, value in controls.items())]
        return "\n".join(lines)

    def recipe(self) -> PretrainingRecipe:
        """How the model was trained, as the card says it."""
        args, training_args, controls = self.args, self.training_args, self.controls
        return PretrainingRecipe(
            base_model=args.model_name_or_path, config_name=args.config_name, config_preset=args.config_preset,
            dataset_name=args.dataset_name, dataset_config_name=args.dataset_config_name,
            prepared_data=args.prepared_data, train_file=tuple(args.train_file or ()),
            validation_file=tuple(args.validation_file or ()), builtin_dataset=args.builtin_dataset,
            objective=args.objective, masking=args.masking, mlm_probability=args.mlm_probability,
            eval_mlm_probability=args.eval_mlm_probability, value_sources=self.value_sources,
            max_steps=None if training_args.max_steps == UNBOUNDED_STEPS else training_args.max_steps,
            rows_per_step=rows_per_step(training_args) if args.max_tokens_per_batch is None else self.batch_description(),
            learning_rate=training_args.learning_rate, adam_beta2=training_args.adam_beta2, lr_schedule=self.lr_schedule,
            weight_decay=training_args.weight_decay, max_seq_length=args.max_seq_length, packing=args.packing,
            seed=training_args.seed, max_train_minutes=args.max_train_minutes, head_warmup_steps=args.head_warmup_steps,
            controls=controls, languages=self.language_mix.languages if self.language_mix else (),
        )  # fmt: skip


def model_config(args: PretrainingArguments, source: str | None, tokenizer: Any = None) -> MlmSuiteConfig:
    """The model's configuration before its positions change: ``--config_name``'s, else ``source``'s (an mlm_suite
    folder), else a preset sized to ``tokenizer`` (without one, of BERT's vocabulary: what the plan decides from it does
    not depend on the vocabulary); with ``--config_overrides`` applied (a copy)."""
    if args.config_name:
        config = pretrained_config(args.config_name, **args.pretrained_kwargs())
        if not isinstance(config, MlmSuiteConfig):
            raise ValueError(
                f"--config_name {args.config_name} holds a {config.model_type!r} config; pretraining builds mlm_suite "
                "models (a BERT model: pass its folder as --model_name_or_path)"
            )
    elif source:
        config = pretrained_config(source, **args.pretrained_kwargs())
    else:
        sized = {} if tokenizer is None else {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
        config = MlmSuiteConfig.preset(
            args.config_preset,
            **sized,
            norm_position=args.norm_position,
            position_embedding_type=args.position_embedding_type,
            # MLM alone never trains [CLS] (no loss reads it; NSP's does): a classifier fine-tuned from this model
            # reads the mean of the states MLM trained (docs/results.md: why the main job's encoder does not help sentiment).
            classifier_pooling="mean" if args.objective == "mlm" else "cls",
        )
    return apply_config_overrides(config, args.config_overrides) if args.config_overrides else config


def _named_tokenizer(tokenizer_name: str | None, model_name_or_path: str | None) -> str:
    """The flag naming the tokenizer of a run whose rows need a fixed one ("" when none does)."""
    if tokenizer_name:
        return f"--tokenizer_name {tokenizer_name}"
    if model_name_or_path:
        return f"--model_name_or_path {model_name_or_path}"
    return ""


def _check_combinations(args: Any, training_args: Any, given: frozenset[str], mask_schedule: MaskRateSchedule) -> None:
    """The checks that combine ``PretrainingArguments`` with ``TrainingArguments``; a UsageError names the flags."""
    if args.streaming and not ("max_steps" in given and training_args.max_steps > 0) and args.max_train_minutes is None:
        raise UsageError("--streaming needs --max_steps N (or --max_train_minutes): a stream has no length to count epochs in")
    if mask_schedule.varies and args.streaming:
        raise UsageError("--mlm_probability_schedule needs rows the job can index: it does not work with --streaming")
    if args.batch_size_warmup_tokens and training_args.max_steps <= 0:
        raise UsageError("--batch_size_warmup_tokens needs --max_steps (or --max_train_minutes): the run is one stream")
    if mask_schedule.varies or args.batch_size_warmup_tokens or args.max_tokens_per_batch is not None:
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


def _language_mix(args: Any, training_args: Any) -> LanguageMix:
    """The languages of the run (``--languages``, else the files' stems; of the built-in multilingual corpus, those
    named or all) and how it draws them; a mix that changes during the run checked against the flags it cannot follow.

    Raises:
        UsageError: a language the built-in corpus lacks, a malformed schedule, or a phased mix with a flag whose steps
            or rows it cannot know ahead.
    """
    if args.train_file:
        languages = language_names(args.train_file, args.languages)
    else:
        languages = list(args.languages or DEBIAN_REFERENCE_LANGUAGES)
        unknown = [language for language in languages if language not in DEBIAN_REFERENCE_LANGUAGES]
        if unknown:
            raise UsageError(f"--languages {' '.join(languages)}: the Debian Reference has no {unknown[0]!r} (it has "
                             f"{' '.join(DEBIAN_REFERENCE_LANGUAGES)})")
        if len(set(languages)) != len(languages):
            raise UsageError(f"--languages {' '.join(languages)}: a language named twice")
    mix = LanguageMix.parse(languages, args.language_sampling_alpha, args.language_sampling_alpha_schedule,
                            args.late_languages)
    if mix.phased:
        flags = "--language_sampling_alpha_schedule / --late_languages"
        conflicts = (
            ("--streaming", args.streaming),
            ("--max_train_minutes", args.max_train_minutes is not None),
            ("--max_tokens_per_batch", args.max_tokens_per_batch is not None),
            ("--max_train_samples", args.max_train_samples is not None),
        )  # fmt: skip
        for flag, given in conflicts:
            if given:
                raise UsageError(f"{flag} cannot be combined with {flags}: each phase draws the rows of its own steps, "
                                 "counted ahead from --max_steps")
        if training_args.max_steps <= 0:
            raise UsageError(f"{flags} needs --max_steps N: the phases are parts of the run's steps")
        never = [language for language in mix.languages if language not in mix.phases(training_args.max_steps)[-1].languages]
        if never:
            raise UsageError(f"--late_languages {args.late_languages}: {never[0]} would join after the run's last step "
                             f"(--max_steps {training_args.max_steps}): let it join earlier")
        check_row_sampling(training_args)
    return mix


# The configuration fields that set the shape of a checkpoint's weights (the positions' only with a learned table).
_WEIGHT_SHAPES = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "type_vocab_size",
                  "embedding_size", "max_position_embeddings")


def _check_weight_shapes(config: MlmSuiteConfig, checkpoint: MlmSuiteConfig, args: Any) -> None:
    """Raise UsageError when ``--config_overrides`` changes the shape of weights the continued checkpoint holds."""
    fields = [name for name in _WEIGHT_SHAPES if getattr(config, name, None) != getattr(checkpoint, name, None)
              and not (name == "max_position_embeddings" and checkpoint.position_embedding_type != "absolute")]
    if fields:
        changed = ", ".join(f"{name} {getattr(checkpoint, name)} → {getattr(config, name)}" for name in fields)
        raise UsageError(f"--config_overrides {args.config_overrides} changes the shape of weights --model_name_or_path "
                         f"{args.model_name_or_path} holds ({changed}): drop those overrides (a longer context of rotary "
                         "positions: a longer --max_seq_length)")


def _wsd_schedule(args: Any, training_args: Any) -> tuple[float | None, dict[str, Any]]:
    """A warmup-stable-decay run's decay length (``--lr_decay_steps`` or the default share; None when
    ``--lr_scheduler_kwargs`` gives ``num_decay_steps``) and its scheduler's arguments."""
    kwargs = dict(training_args.lr_scheduler_kwargs or {})
    decay = None
    if "num_decay_steps" not in kwargs:
        decay = args.lr_decay_steps if args.lr_decay_steps is not None else DEFAULT_LR_DECAY
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
    kwargs.setdefault("decay_type", args.lr_decay_type)
    return decay, kwargs


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _decay_run(args: Any, training_args: Any, given: frozenset[str]) -> dict[str, Any]:
    """The TrainingArguments of a run that only decays the learning rate of a stable-phase checkpoint."""
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
    changes: dict[str, Any] = {}
    if peak is not None:
        if "learning_rate" in given and not math.isclose(training_args.learning_rate, peak, rel_tol=1e-6):
            raise UsageError(
                f"--decay_from_checkpoint decays from the checkpoint's learning rate {peak:g}; drop --learning_rate"
            )
        changes["learning_rate"] = peak
    # With no warmup the stable phase is num_training_steps - num_decay_steps = the checkpoint's steps.
    return {
        **changes, "max_steps": step + decay, "warmup_steps": 0, "lr_scheduler_type": WSD,
        "lr_scheduler_kwargs": {"num_decay_steps": decay, "decay_type": args.lr_decay_type},
    }  # fmt: skip
