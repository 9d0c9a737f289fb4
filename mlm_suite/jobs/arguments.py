"""The flags of transformers' example scripts (``run_mlm.py``, ``run_glue.py``, ``run_ner.py``) that every job takes.

Users who know those scripts can type the same flags here:

* :class:`HubArguments` (every job that loads a model or tokenizer): ``--cache_dir --model_revision --token
  --trust_remote_code --use_fast_tokenizer``, handed to ``from_pretrained`` (:meth:`HubArguments.pretrained_kwargs`)
  and ``load_dataset`` (:meth:`HubArguments.dataset_kwargs`);
* the data flags, declared by each job's data dataclass with the fields made here
  (:func:`preprocessing_num_workers_field`, :func:`overwrite_cache_field`, :func:`validation_split_name_field`,
  :func:`test_split_name_field`), and :func:`hub_split_names`, which checks the split names against a dataset;
* :func:`renamed`: the metadata of a field whose flag took transformers' name (``--tokenizer`` became
  ``--tokenizer_name``). :class:`JobArgumentParser`, the ``HfArgumentParser`` every job parses with
  (:func:`mlm_suite.jobs.finetuning.argument_parser`), still accepts the old flags (also as keys of a ``.json``
  file of flags), hides them from ``--help`` and prints a one-line note naming the new flag when one is used.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from transformers import HfArgumentParser

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


def hub_split_names(
    available: Iterable[str], dataset_name: str, validation_split_name: str = "validation",
    test_split_name: str | None = "test",
) -> dict[str, str]:
    """``{role: split}`` for the roles ``train``, ``validation`` and ``test`` that ``available`` has.

    A role whose split is missing is left out when the split has its default name (a dataset without a test
    split); a name given with ``--validation_split_name``/``--test_split_name`` must exist.

    Raises:
        UsageError: a split name other than the default that the dataset lacks, naming the splits it has.
    """
    available = list(available)
    wanted = {"train": ("train", None), "validation": (validation_split_name, "validation")}
    if test_split_name is not None:
        wanted["test"] = (test_split_name, "test")
    found = {}
    for role, (name, default) in wanted.items():
        if name in available:
            found[role] = name
        elif default is not None and name != default:
            raise UsageError(f"--{role}_split_name {name}: {dataset_name} has no such split; its splits are {available}")
    return found


def split_description(splits: Mapping[str, str]) -> str:
    """`` (validation split `validation_matched`)`` for the roles read from splits of other names, else ``""``."""
    other = [f"{role} split `{name}`" for role, name in splits.items() if name != role]
    return f" ({', '.join(other)})" if other else ""


__all__ = [
    "RENAMED_FROM",
    "HubArguments",
    "JobArgumentParser",
    "hub_split_names",
    "overwrite_cache_field",
    "preprocessing_num_workers_field",
    "pretrained_kwargs",
    "renamed",
    "split_description",
    "test_split_name_field",
    "validation_split_name_field",
]
