"""The flags of the jobs: transformers' example-script names (``run_mlm.py``, ``run_glue.py``, ``run_ner.py``),
how a job parses them, which ones the command line gave, and the checks of single values that the argument
dataclasses call from their ``__post_init__``. See docs/command_line.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from transformers import HfArgumentParser, TrainingArguments

from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.output_folder import OVERWRITE_HELP

#: ``--resume_from_checkpoint`` values (any case) meaning the last checkpoint of ``--output_dir``.
LAST_CHECKPOINT = ("true",)


# --------------------------------------------------------------------------------------------
# Where models, tokenizers and datasets come from
# --------------------------------------------------------------------------------------------
@dataclass
class HubArguments:
    """``from_pretrained`` and ``load_dataset`` settings, named as in transformers' example scripts."""

    cache_dir: str | None = field(
        default=None, metadata={"help": "Where models, tokenizers and datasets downloaded from the Hub are stored."}
    )
    model_revision: str = field(
        default="main", metadata={"help": "The model version to load: a branch name, a tag name or a commit id."}
    )
    token: str | None = field(
        default=None,
        metadata={"help": "Hub token for private or gated repositories (default: the one `hf auth login` stored)."},
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "help": "Run the model and tokenizer code that a Hub repository or folder ships (its auto_map) instead of "
            "the installed classes. Only for repositories you trust: their code runs on this machine."
        },
    )
    use_fast_tokenizer: bool = field(
        default=True,
        metadata={
            "help": "Accepted for run_*.py command lines; transformers 5 always loads the fast (tokenizers-backed) "
            "tokenizer, which these jobs need, so it changes nothing."
        },
    )

    def pretrained_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of every ``from_pretrained`` call (config, tokenizer, model)."""
        return {"cache_dir": self.cache_dir, "revision": self.model_revision, "token": self.token,
                "trust_remote_code": self.trust_remote_code}

    def dataset_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``datasets.load_dataset`` (as run_mlm.py passes them: the revision is the model's)."""
        return {"cache_dir": self.cache_dir, "token": self.token}


# --------------------------------------------------------------------------------------------
# Data flags (fields each job's data dataclass declares)
# --------------------------------------------------------------------------------------------
def preprocessing_num_workers_field() -> Any:
    return field(
        default=None,
        metadata={"help": "Processes that tokenise the data (datasets.map num_proc); the rows are the same for any "
                          "number. Default: the main process alone."},
    )


def overwrite_cache_field() -> Any:
    return field(
        default=False,
        metadata={"help": "Tokenise a Hub or saved dataset again instead of reusing the datasets cache files of an "
                          "earlier run."},
    )


def validation_split_name_field() -> Any:
    return field(
        default="validation",
        metadata={"help": "With --dataset_name: the split evaluated on (e.g. validation_matched for MNLI)."},
    )


def test_split_name_field() -> Any:
    return field(
        default="test", metadata={"help": "With --dataset_name: the split predicted (e.g. test_matched for MNLI)."}
    )


def flatten_batches_field() -> Any:
    """``--flatten_batches`` of the jobs that train on flattened batches; None until the job sees the device."""
    return field(
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


# --------------------------------------------------------------------------------------------
# Checks of one value, called by the argument dataclasses' __post_init__ (None: not given, never checked)
# --------------------------------------------------------------------------------------------
def check_at_least(flag: str, value: float | None, low: float) -> None:
    if value is not None and not value >= low:  # NaN too
        raise UsageError(f"--{flag} must be at least {low}, got {value}")


def check_positive(flag: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise UsageError(f"--{flag} must be positive, got {value}")


def check_non_negative(flag: str, value: float | None) -> None:
    if value is not None and not value >= 0:  # NaN too
        raise UsageError(f"--{flag} must not be negative, got {value}")


def check_within(
    flag: str, value: float | None, low: float, high: float, *, low_open: bool = False, high_open: bool = True
) -> None:
    """``value`` in the interval from ``low`` to ``high``, each end open or closed as asked (default ``[low, high)``)."""
    if value is None:
        return
    low_ok = value > low if low_open else value >= low
    high_ok = value < high if high_open else value <= high
    if not (low_ok and high_ok):
        interval = ("(" if low_open else "[") + f"{low:g}, {high:g}" + (")" if high_open else "]")
        raise UsageError(f"--{flag} must lie in {interval}, got {value}")


def check_finite(flag: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise UsageError(f"--{flag} must be a finite number, got {value}")


def check_seed(flag: str, value: int | None) -> None:
    """A seed ``transformers.set_seed`` takes (numpy's range)."""
    if value is not None and not 0 <= value < 2**32:
        raise UsageError(f"--{flag} must lie in [0, 2**32), got {value}")


def check_file(flag: str, path: str | os.PathLike | None) -> None:
    """An input file that exists and is a file."""
    if path is None:
        return
    path = Path(path)
    if not path.exists():
        raise UsageError(f"--{flag} {path}: no such file")
    if not path.is_file():
        raise UsageError(f"--{flag} {path} is not a file")


def check_model_source(flag: str, value: str | None) -> None:
    """A folder or a Hub id: a value written as a path ("/...", "./...", "~/...", "a/b/c") must exist."""
    if not value or Path(value).expanduser().exists():
        return
    if value.startswith(("/", ".", "~")) or value.count("/") > 1 or "\\" in value:
        raise UsageError(f"--{flag} {value}: no such folder (nor a Hub id: those read 'name' or 'owner/name')")


# --------------------------------------------------------------------------------------------
# The Trainer's flags, checked; which flags the command line gave
# --------------------------------------------------------------------------------------------
@dataclass
class JobTrainingArguments(TrainingArguments):
    """``TrainingArguments`` with ``--overwrite_output_dir`` (which transformers 5 no longer has) and the checks of
    the values the Trainer would otherwise take silently or fail on deep in a run. Each job subclasses it with its
    own defaults as field defaults."""

    overwrite_output_dir: bool = field(default=False, metadata={"help": OVERWRITE_HELP})

    #: The flags the command line (or the ``.json`` file of flags) gave, by field name, however abbreviated: set by
    #: :func:`parse_arguments`. A class attribute rather than a field, so it is neither a flag nor saved.
    flags_given = frozenset()
    #: The values of the job's :data:`DATA_FLAGS`, as parsed (:func:`data_flag_values`): set by :func:`parse_arguments`.
    #: Every checkpoint records them, and a run resumed from it names those that differ
    #: (:func:`mlm_suite.training.trainer.check_resumed_run`). Not a field either.
    data_flags = MappingProxyType({})

    def __post_init__(self) -> None:
        for name, value in vars(self).items():  # no float flag means anything as NaN or infinity
            if isinstance(value, float):
                check_finite(name, value)
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                     "eval_accumulation_steps"):
            check_at_least(name, getattr(self, name), 1)
        check_non_negative("dataloader_num_workers", self.dataloader_num_workers)
        check_non_negative("warmup_steps", self.warmup_steps)
        check_seed("seed", self.seed)
        check_seed("data_seed", self.data_seed)
        check_positive("adam_epsilon", self.adam_epsilon)
        if self.max_steps == 0 or self.max_steps < -1:
            raise UsageError(f"--max_steps must be positive (or -1: --num_train_epochs decides), got {self.max_steps}")
        for name in ("logging_steps", "save_steps", "eval_steps"):  # below 1: a fraction of the steps
            check_positive(name, getattr(self, name))
        if self.max_steps <= 0 and not self.num_train_epochs > 0:
            raise UsageError(f"--num_train_epochs must be positive (or give --max_steps), got {self.num_train_epochs}")
        check_non_negative("learning_rate", self.learning_rate)  # 0: a run that changes nothing, but a valid one
        check_non_negative("weight_decay", self.weight_decay)
        for name in ("label_smoothing_factor", "adam_beta1", "adam_beta2"):
            check_within(name, getattr(self, name), 0.0, 1.0)
        self._check_overwrite_keeps_the_checkpoint()
        super().__post_init__()

    def _check_overwrite_keeps_the_checkpoint(self) -> None:
        # --overwrite_output_dir empties --output_dir first: a checkpoint to continue cannot come from there.
        resume = (self.resume_from_checkpoint or "").strip()
        if not (self.overwrite_output_dir and resume):
            return
        inside = resume.lower() in LAST_CHECKPOINT or Path(resume).expanduser().resolve().is_relative_to(
            Path(self.output_dir).expanduser().resolve())
        if inside:
            raise UsageError(f"--resume_from_checkpoint {resume} continues a run of --output_dir {self.output_dir}, "
                             "which --overwrite_output_dir deletes: give one of the two")


#: The flags that decide what a run trains on: where its training data come from, how they become rows and labels,
#: its tokenizer and its seeds (each job has some of them).
DATA_FLAGS = (
    "train_file", "dataset_name", "dataset_config_name", "prepared_data", "text_column_name", "label_column_name",
    "sentence1_column", "sentence2_column", "query_column", "document_column", "tokenizer_name", "max_seq_length",
    "packing", "objective", "masking", "max_train_samples", "seed", "data_seed", "task_type", "label_list",
    "tagging_scheme", "convert_to", "label_strategy", "builtin_dataset", "languages",
    "language_sampling_alpha", "language_sampling_alpha_schedule", "late_languages", "tokenizer_type", "extend_vocabulary",
)  # fmt: skip
# The data flags that name local files or folders (or Hub ids): recorded resolved, another spelling is the same data.
_PATH_FLAGS = ("train_file", "dataset_name", "prepared_data", "tokenizer_name")


def data_flag_values(parsed: Sequence[Any]) -> dict[str, Any]:
    """The values of the :data:`DATA_FLAGS` of the ``parsed`` argument dataclasses, a local file or folder as its
    resolved path."""

    def resolved(value: Any) -> Any:
        if isinstance(value, list):
            return [resolved(item) for item in value]
        return str(Path(value).expanduser().resolve()) if isinstance(value, str) and os.path.exists(value) else value

    values = {}
    for arguments in parsed:
        for name in DATA_FLAGS:
            if name in getattr(type(arguments), "__dataclass_fields__", {}):
                value = getattr(arguments, name)
                if name in _PATH_FLAGS and isinstance(value, list) and len(value) == 1:
                    value = value[0]  # one file, recorded as the runs of one file always were: their checkpoints resume
                values[name] = resolved(value) if name in _PATH_FLAGS else value
    return values


def given_flags(parser: HfArgumentParser, argv: Sequence[str]) -> frozenset[str]:
    """The options (field names) that ``argv`` sets, however it spells them: ``--name value``, ``--name=value``
    and the prefixes argparse accepts (``--learning_r 1e-3``) all count. Call it after a successful parse."""
    unset = object()
    names = [action.dest for action in parser._actions if action.dest != "help"]
    saved = {name: parser.get_default(name) for name in names}
    parser.set_defaults(**dict.fromkeys(names, unset))
    try:
        namespace, _ = parser.parse_known_args(list(argv))
    finally:
        parser.set_defaults(**saved)
    return frozenset(name for name in names if getattr(namespace, name, unset) is not unset)


def argument_parser(dataclass_types: Sequence[type], **kwargs: Any) -> HfArgumentParser:
    """An ``HfArgumentParser`` named after the command that runs the job.

    Its ``prog`` is :func:`~mlm_suite.jobs.common.running.command_prog` (``mlm-suite finetune-ner``,
    ``python -m mlm_suite.jobs.finetune_ner``, or the script's name). On a bad flag it prints a
    one-line usage and the error instead of the hundred-odd flags of ``TrainingArguments``
    (``--help`` still lists them all).
    """
    from mlm_suite.jobs.common.running import command_prog

    parser = HfArgumentParser(dataclass_types, prog=command_prog(), **kwargs)
    parser.format_usage = lambda: f"usage: {parser.prog} [options]  ({parser.prog} --help lists them)\n"
    return parser


def parse_arguments(dataclass_types: Sequence[type], argv: Sequence[str] | None, **parser_kwargs: Any) -> tuple:
    """Parse ``argv`` (a list of flags, or a single ``.json`` file of them) into the dataclasses.

    An unknown flag is an argparse error (exit status 2); a value a dataclass's ``__post_init__`` refuses is a
    :class:`~mlm_suite.errors.UsageError`. ``TrainingArguments`` learn which flags were given
    (:attr:`JobTrainingArguments.flags_given`) and the values of the data flags
    (:attr:`JobTrainingArguments.data_flags`), and get the data-loading defaults of their device
    (:func:`feed_the_device`).
    """
    parser = argument_parser(dataclass_types, **parser_kwargs)
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        parsed = parser.parse_json_file(json_file=argv[0])
        given = frozenset(json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    else:
        *parsed, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
        if remaining:
            parser.error(f"unrecognized arguments: {' '.join(remaining)}")
        given = given_flags(parser, argv)
    data_flags = MappingProxyType(data_flag_values(parsed))
    for arguments in parsed:
        if isinstance(arguments, JobTrainingArguments):
            arguments.flags_given = given
            arguments.data_flags = data_flags
            feed_the_device(arguments)
    return tuple(parsed)


def gpu_loader_workers() -> int:
    """Data-loader workers per process on a GPU: up to 4, half of this node's cores shared by its processes."""
    processes_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, min(4, (os.cpu_count() or 2) // (2 * processes_here)))


def feed_the_device(training_args: JobTrainingArguments) -> None:
    """Data-loading settings for the device the run trains on (flags given explicitly win).

    On CPU, no pinned memory (it serves copies to an accelerator; torch warns when there is none). On a GPU, let the
    host run ahead of the device:

    * Batches are collated in worker processes while the device computes (on CPU the main process collates:
      workers would take cores from the step). Seeded masks depend on each example's index and the epoch, not on
      the number of workers.
    * Batches are copied to the device without blocking (``accelerator_config.non_blocking``, from pinned memory):
      a blocking copy waits for every step queued before it.

    On every device, ``logging_nan_inf_filter`` is off: a job stops at the first non-finite loss
    (:class:`~mlm_suite.training.loss_accounting.LossAccountingMixin`), so the filter, which would log such a loss as
    the average of the others, never has one to filter, and it reads every step's loss on the host (on a GPU, a
    synchronisation per step).
    """
    given = training_args.flags_given
    if "logging_nan_inf_filter" not in given:
        training_args.logging_nan_inf_filter = False
    if training_args.device.type == "cpu" and "dataloader_pin_memory" not in given:
        training_args.dataloader_pin_memory = False
    if training_args.device.type != "cuda":
        return
    if "dataloader_num_workers" not in given:
        training_args.dataloader_num_workers = gpu_loader_workers()
    if "accelerator_config" not in given:
        training_args.accelerator_config.non_blocking = True


#: Where a job says a value whose default depends on its mode came from when the command line gave it.
GIVEN = "given"


def derived_training_arguments(training_args: JobTrainingArguments, **changes: Any) -> JobTrainingArguments:
    """A copy of ``training_args`` with ``changes``: the values a job derives for its Trainer from its flags, checked
    as the flags are (``training_args`` itself stays as parsed). It keeps :attr:`~JobTrainingArguments.flags_given`
    and :attr:`~JobTrainingArguments.data_flags`."""
    derived = dataclasses.replace(training_args, **changes)
    derived.flags_given, derived.data_flags = training_args.flags_given, training_args.data_flags
    return derived


__all__ = [
    "DATA_FLAGS",
    "GIVEN",
    "HubArguments",
    "JobTrainingArguments",
    "LAST_CHECKPOINT",
    "argument_parser",
    "check_at_least",
    "check_file",
    "check_finite",
    "check_model_source",
    "check_non_negative",
    "check_positive",
    "check_seed",
    "check_within",
    "data_flag_values",
    "derived_training_arguments",
    "feed_the_device",
    "flatten_batches_field",
    "given_flags",
    "gpu_loader_workers",
    "overwrite_cache_field",
    "parse_arguments",
    "preprocessing_num_workers_field",
    "test_split_name_field",
    "validation_split_name_field",
]
