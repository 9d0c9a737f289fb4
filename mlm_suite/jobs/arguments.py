"""The flags of the jobs: transformers' example-script names (``run_mlm.py``, ``run_glue.py``, ``run_ner.py``),
how a job parses them and the checks of their values.

Users who know those scripts can type the same flags here:

* :class:`HubArguments` (every job that loads a model or tokenizer): ``--cache_dir --model_revision --token
  --trust_remote_code --use_fast_tokenizer``, handed to ``from_pretrained`` (:meth:`HubArguments.pretrained_kwargs`)
  and ``load_dataset`` (:meth:`HubArguments.dataset_kwargs`);
* the data flags, declared by each job's data dataclass with the fields made here
  (:func:`preprocessing_num_workers_field`, :func:`overwrite_cache_field`, :func:`validation_split_name_field`,
  :func:`test_split_name_field`); :func:`~mlm_suite.data.readers.hub_split_names` checks the split names against
  a dataset;
* :func:`renamed`: the metadata of a field whose flag took transformers' name (``--tokenizer`` became
  ``--tokenizer_name``). :class:`JobArgumentParser`, the ``HfArgumentParser`` every job parses with
  (:func:`argument_parser`), still accepts the old flags (also as keys of a ``.json``
  file of flags), hides them from ``--help`` and prints a one-line note naming the new flag when one is used;
* parsing (:func:`parse_arguments`, :func:`parse_flags`, with the device's data-loading defaults of
  :func:`feed_the_device`), which flags the command line gave (:func:`flag_given`, :func:`flags_given`) and the
  checks of their values before anything is read or written (:func:`validate_flags`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser, TrainingArguments

from mlm_suite.data.readers import hub_split_names, split_description  # the split flags' helpers, kept importable here
from mlm_suite.errors import UsageError

#: Field metadata key: the flags a field was called before it took transformers' name.
RENAMED_FROM = "renamed_from"


def renamed(*old_flags: str, help: str, **metadata: Any) -> dict[str, Any]:
    """Field metadata for a flag renamed to transformers' name; ``old_flags`` (``"--tokenizer"``) still parse into it.

    ``help`` gets ``(formerly --tokenizer)`` appended, so ``--help`` names the old flag beside the new one.
    """
    return {**metadata, "help": f"{help} (formerly {', '.join(old_flags)})", RENAMED_FROM: list(old_flags)}


def _dashed(flag: str) -> str:
    """``--text-column`` for ``--text_column``: HfArgumentParser accepts both spellings of every flag."""
    return "--" + flag[2:].replace("_", "-")


class JobArgumentParser(HfArgumentParser):
    """An ``HfArgumentParser`` that keeps the old names of renamed flags (:func:`renamed`) working.

    An old flag parses into the field of its new name, is hidden from ``--help`` and, when used, prints
    ``<prog>: warning: --tokenizer is deprecated; use --tokenizer_name`` on stderr (once per parser).
    """

    def __init__(self, dataclass_types: Any, **kwargs: Any) -> None:
        self.renamed_flags: dict[str, str] = {}  # old flag (both spellings) -> new flag
        self._required_renamed: dict[str, str] = {}  # dest -> new flag, of required fields that have old names
        self._noted: set[str] = set()
        super().__init__(dataclass_types, **kwargs)

    def _parse_dataclass_field(self, parser: Any, field: dataclasses.Field) -> None:  # type: ignore[override]
        old_flags = field.metadata.get(RENAMED_FROM)
        if not old_flags:
            return HfArgumentParser._parse_dataclass_field(parser, field)
        plain = copy.copy(field)
        plain.metadata = types.MappingProxyType({k: v for k, v in field.metadata.items() if k != RENAMED_FROM})
        HfArgumentParser._parse_dataclass_field(parser, plain)
        new_flag = f"--{field.name}"
        action = parser._option_string_actions[new_flag]
        if action.required:  # argparse would not count the old flag as the new one: checked in parse_known_args
            action.required = False
            self._required_renamed[action.dest] = new_flag
        spellings = list(dict.fromkeys(flag for old in old_flags for flag in (old, _dashed(old))))
        self.renamed_flags.update(dict.fromkeys(spellings, new_flag))
        note = self.note_renamed

        class RenamedFlag(type(action)):  # the new flag's action, with the note
            def __call__(self, argparser, namespace, values, option_string=None):
                note(option_string or spellings[0])
                super().__call__(argparser, namespace, values, option_string)

        parser.add_argument(
            *spellings, action=RenamedFlag, dest=action.dest, nargs=action.nargs, const=action.const,
            type=action.type, choices=action.choices, metavar=action.metavar,
            default=argparse.SUPPRESS, help=argparse.SUPPRESS,
        )  # fmt: skip

    def note_renamed(self, old_flag: str) -> None:
        """Print, once, the one-line note that ``old_flag`` is deprecated for its new name."""
        if old_flag in self._noted:
            return
        self._noted.add(old_flag)
        print(f"{self.prog}: warning: {old_flag} is deprecated; use {self.renamed_flags[old_flag]} "
              "(the name transformers' example scripts use)", file=sys.stderr)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, remaining = super().parse_known_args(args, namespace)
        for dest, new_flag in self._required_renamed.items():
            if getattr(parsed, dest, None) is None:
                self.error(f"the following arguments are required: {new_flag}")
        return parsed, remaining

    def parse_dict(self, args: dict[str, Any], allow_extra_keys: bool = False) -> tuple:
        """``HfArgumentParser.parse_dict`` (and so ``parse_json_file``), old flag names accepted as keys."""
        renamed_keys = {old[2:]: new[2:] for old, new in self.renamed_flags.items() if old[2:].isidentifier()}
        converted = {}
        for key, value in args.items():
            if key in renamed_keys:
                self.note_renamed(f"--{key}")
                key = renamed_keys[key]
            converted[key] = value
        return super().parse_dict(converted, allow_extra_keys=allow_extra_keys)


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


def pretrained_kwargs(args: Any) -> dict[str, Any]:
    """:meth:`HubArguments.pretrained_kwargs` of ``args``, or none for an object without those flags."""
    return args.pretrained_kwargs() if isinstance(args, HubArguments) else {}


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


# --------------------------------------------------------------------------------------------
# Parsing a job's flags (and applying the device's defaults); checking their values
# --------------------------------------------------------------------------------------------
def argument_parser(dataclass_types: Sequence[type], **kwargs: Any) -> Any:
    """An ``HfArgumentParser`` named after the command that runs the job.

    Its ``prog`` is :func:`~mlm_suite.jobs.distributed.command_prog` (``mlm-suite finetune-ner``,
    ``python -m mlm_suite.jobs.finetune_ner``, or the script's name). On a bad flag it prints a
    one-line usage and the error instead of the hundred-odd flags of ``TrainingArguments``
    (``--help`` still lists them all). Flags renamed to transformers' names keep their old names
    (:class:`JobArgumentParser`).
    """
    from mlm_suite.jobs.distributed import command_prog

    parser = JobArgumentParser(dataclass_types, prog=command_prog(), **kwargs)
    parser.format_usage = lambda: f"usage: {parser.prog} [options]  ({parser.prog} --help lists them)\n"
    return parser


def parse_flags(parser: Any, argv: Sequence[str] | None) -> tuple:
    """``parser.parse_args_into_dataclasses(argv)``; an unknown flag is an argparse error (exit status 2).

    ``TrainingArguments`` get the data-loading defaults of their device (:func:`feed_the_device`).
    """
    *parsed, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if remaining:
        parser.error(f"unrecognized arguments: {' '.join(remaining)}")
    for arguments in parsed:
        if isinstance(arguments, TrainingArguments):
            feed_the_device(arguments, sys.argv[1:] if argv is None else argv)
    return tuple(parsed)


def flag_given(name: str, argv: Sequence[str]) -> bool:
    """Whether ``--name`` (or ``--name=value``) is among the command-line flags ``argv``."""
    return any(item.split("=")[0] == f"--{name}" for item in argv)


def flags_given(parser: Any, argv: list[str], names: list[str]) -> set[str]:
    """Which of the options ``names`` the command line ``argv`` sets, however it spells them.

    Unlike :func:`flag_given` this asks the parser itself, so ``--name value``,
    ``--name=value`` and the prefixes argparse accepts (``--learning_r 1e-3``) all count: a value given always wins
    over a mode's default. Call it after a successful parse (``--help`` and bad values have exited by then).
    """
    unset = object()
    saved = {name: parser.get_default(name) for name in names}
    parser.set_defaults(**dict.fromkeys(names, unset))
    try:
        namespace, _ = parser.parse_known_args(argv)
    finally:
        parser.set_defaults(**saved)
    return {name for name in names if getattr(namespace, name, unset) is not unset}


def gpu_loader_workers() -> int:
    """Data-loader workers per process on a GPU: up to 4, half of this node's cores shared by its processes."""
    processes_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, min(4, (os.cpu_count() or 2) // (2 * processes_here)))


def feed_the_device(training_args: TrainingArguments, argv: Sequence[str]) -> None:
    """On a GPU, let the host run ahead of the device (flags given explicitly win).

    * Batches are collated in worker processes while the device computes. On CPU the main process collates
      (``dataloader_num_workers`` 0, the Trainer's default): workers would take cores from the step, which on CPU
      is the bottleneck. Seeded masks are a function of each example's index and the epoch, so they do not depend
      on the number of workers; the loader keeps pinned memory (the Trainer's default) for asynchronous copies.
    * Batches are copied to the device without blocking (``accelerator_config.non_blocking``, from the pinned
      memory the loader gives): a blocking copy waits for every step queued before it, so the host could not
      prepare step k + 1 while the device computes step k.
    * ``logging_nan_inf_filter`` is off: the Trainer's filter reads every step's loss on the host
      (``torch.isnan(loss) or ...``), a synchronisation with the same effect. A NaN loss then shows in the
      logged loss instead of being replaced by the running mean.
    """
    if training_args.device.type != "cuda":
        return
    if not flag_given("dataloader_num_workers", argv):
        training_args.dataloader_num_workers = gpu_loader_workers()
    if not flag_given("accelerator_config", argv):
        training_args.accelerator_config.non_blocking = True
    if not flag_given("logging_nan_inf_filter", argv):
        training_args.logging_nan_inf_filter = False


def parse_arguments(dataclass_types: Sequence[type], argv: Sequence[str] | None) -> tuple:
    """Parse ``argv`` (a list of flags, or a single ``.json`` file of them) into the dataclasses."""
    parser = argument_parser(dataclass_types)
    argv = list(argv) if argv is not None else None
    if argv is not None and len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=argv[0])
    return parse_flags(parser, argv)


# Flag checks by flag name, for any job's arguments (dataclasses or argparse namespaces); None is never checked.
_AT_LEAST = {
    **dict.fromkeys(
        ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps", "batch_size",
         "max_seq_length", "max_train_samples", "max_eval_samples", "max_predict_samples", "max_lemmas", "n_pairs",
         "early_stopping_patience", "mini_batch_size", "preprocessing_num_workers"),
        1,
    ),
    # pairs come in positive/negative twos; anisotropy compares pairs of sentences
    **dict.fromkeys(("coherence_train_pairs", "coherence_eval_pairs", "num_sentences"), 2),
    "train_last_k_layers": -1,
}
_POSITIVE = ("intermediate_num_train_epochs", "adam_epsilon", "temperature")
_NON_NEGATIVE = ("learning_rate", "weight_decay", "early_stopping_threshold")  # lr 0: a run that changes nothing
# name -> (low, high, whether high itself is allowed); low is always allowed except for test_fraction
_UNIT_INTERVAL = {
    "label_smoothing_factor": (0.0, 1.0, False),
    "adam_beta1": (0.0, 1.0, False),
    "adam_beta2": (0.0, 1.0, False),
    "nsp_probability": (0.0, 1.0, True),
    "test_fraction": (0.0, 1.0, False),
}
_INPUT_FILES = ("train_file", "validation_file", "test_file", "intermediate_train_file", "corpus_file", "queries_file",
                "test_corpus_file", "test_queries_file")
# A folder or a Hub id; a value written as a path ("/...", "./...", "~/...", "a/b/c") must exist.
_MODEL_SOURCES = ("model_name_or_path", "config_name", "tokenizer_name")


def validate_flags(*arguments: Any) -> None:
    """Check the flag values that need neither data nor model, before a job reads or writes anything.

    Works on every job's argument objects (``HfArgumentParser`` dataclasses, ``argparse``
    namespaces) by flag name: batch sizes, sample limits and ``--max_seq_length`` at least 1,
    a learning rate not below 0, a positive number of epochs (unless ``--max_steps`` decides),
    probabilities within [0, 1), input files and model folders that exist. Values that need the model (``--max_seq_length``
    against its positions) are :func:`~mlm_suite.jobs.finetuning.check_max_seq_length`'s.

    Raises:
        UsageError: naming the first offending flag and its value.
    """
    names = (*_AT_LEAST, *_POSITIVE, *_NON_NEGATIVE, *_UNIT_INTERVAL, *_INPUT_FILES, *_MODEL_SOURCES,
             "num_train_epochs", "max_steps")
    for args in arguments:
        values = {name: getattr(args, name, None) for name in names}

        def given(name: str) -> bool:
            return values[name] is not None

        for name, low in _AT_LEAST.items():
            if given(name) and values[name] < low:
                raise UsageError(f"--{name} must be at least {low}, got {values[name]}")
        for name in _POSITIVE:
            if given(name) and not values[name] > 0:
                raise UsageError(f"--{name} must be positive, got {values[name]}")
        if given("num_train_epochs") and (values["max_steps"] or -1) <= 0 and not values["num_train_epochs"] > 0:
            raise UsageError(f"--num_train_epochs must be positive (or give --max_steps), got {values['num_train_epochs']}")
        for name in _NON_NEGATIVE:
            if given(name) and values[name] < 0:
                raise UsageError(f"--{name} must not be negative, got {values[name]}")
        for name, (low, high, high_allowed) in _UNIT_INTERVAL.items():
            if not given(name):
                continue
            value = values[name]
            low_ok = value > low if name == "test_fraction" else value >= low
            if not (low_ok and (value <= high if high_allowed else value < high)):
                interval = ("(" if name == "test_fraction" else "[") + f"{low:g}, {high:g}" + ("]" if high_allowed else ")")
                raise UsageError(f"--{name} must lie in {interval}, got {value}")
        for name in _INPUT_FILES:
            if given(name):
                path = Path(values[name])
                if not path.exists():
                    raise UsageError(f"--{name} {path}: no such file")
                if not path.is_file():
                    raise UsageError(f"--{name} {path} is not a file")
        for name in _MODEL_SOURCES:
            value = values[name]
            if isinstance(value, str) and value and not Path(value).expanduser().exists():
                if value.startswith(("/", ".", "~")) or value.count("/") > 1 or "\\" in value:
                    raise UsageError(f"--{name} {value}: no such folder (nor a Hub id: those read 'name' or 'owner/name')")


__all__ = [
    "HubArguments",
    "JobArgumentParser",
    "RENAMED_FROM",
    "argument_parser",
    "feed_the_device",
    "flag_given",
    "flags_given",
    "gpu_loader_workers",
    "hub_split_names",
    "overwrite_cache_field",
    "parse_arguments",
    "parse_flags",
    "preprocessing_num_workers_field",
    "pretrained_kwargs",
    "renamed",
    "split_description",
    "test_split_name_field",
    "validate_flags",
    "validation_split_name_field",
]
