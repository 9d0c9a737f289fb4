"""The model a job starts from: its flags (:class:`ModelArguments`), the default start (all-MiniLM-L6-v2 converted
once), a folder's config, tokenizer and weights loaded with the Hub flags, a BERT-like checkpoint converted on the fly,
``--max_seq_length`` checked against the model and the layers frozen; a copy of a config changed by
``--config_overrides``, and the fields a context extension changes. See docs/finetuning.md.

Every job loads a model, config or tokenizer from a folder through :func:`pretrained_config`,
:func:`pretrained_tokenizer` and :func:`pretrained_model`, which check the folder's files first
(:mod:`mlm_suite.model_files`): a damaged or foreign file is one line naming it, before anything is written."""

from __future__ import annotations

import atexit
import copy
import difflib
import math
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import AutoConfig, PretrainedConfig, TrainingArguments

from mlm_suite.conversion import FAMILIES, FAMILY_NAMES, convert_checkpoint, converted_minilm_dir
from mlm_suite.conversion.checkpoint import TOKENIZER_FILES
from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.arguments import HubArguments, check_at_least, check_model_source
from mlm_suite.model import MlmSuiteConfig
from mlm_suite.model_files import check_config_file, check_tokenizer_files, check_vocabulary, check_weights_files
from mlm_suite.training.freezing import freeze_encoder


@dataclass
class ModelArguments(HubArguments):
    """Which checkpoint to fine-tune and how much of it to train (and the Hub flags of :class:`HubArguments`)."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": f"Model folder or Hub id: mlm_suite, or {FAMILY_NAMES} (converted to mlm_suite first, with its "
            "head). Default: all-MiniLM-L6-v2 converted to mlm_suite."
        },
    )
    config_name: str | None = field(
        default=None, metadata={"help": "mlm_suite config folder or Hub id, if not the model's."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer folder, if not the model's."})
    train_last_k_layers: int | None = field(
        default=None,
        metadata={
            "help": "Freeze the encoder except its last k layers (0 = train the head only). "
            "Default (or -1): train everything."
        },
    )
    ignore_mismatched_sizes: bool = field(
        default=False,
        metadata={"help": "Allow a fine-tuned checkpoint whose labels differ from the data's: train a new head."},
    )
    classifier_pooling: str | None = field(
        default=None,
        metadata={"help": "Sequence and pair heads of mlm_suite models: cls or mean. Default: the checkpoint's."},
    )
    init: Literal["pretrained", "random"] = field(
        default="pretrained",
        metadata={
            "help": "pretrained: start from the checkpoint's weights. random: the checkpoint's architecture and "
            "tokenizer with newly initialised weights (seeded by --seed), the baseline that shows what pretraining brought."
        },
    )

    def __post_init__(self) -> None:
        for flag in ("model_name_or_path", "config_name", "tokenizer_name"):
            check_model_source(flag, getattr(self, flag))
        check_at_least("train_last_k_layers", self.train_last_k_layers, -1)
        if self.classifier_pooling not in (None, "cls", "mean"):
            raise UsageError(f"--classifier_pooling must be cls or mean, got {self.classifier_pooling!r}")

    def sources(self) -> dict[str, str | None]:
        """The flags naming what the job reads (its output folder must not overlap them), flag → value."""
        return {"--model_name_or_path": self.model_name_or_path, "--config_name": self.config_name,
                "--tokenizer_name": self.tokenizer_name}




def resolve_model_path(model_name_or_path: str | None, training_args: TrainingArguments) -> str:
    """``model_name_or_path``, or the converted MiniLM folder when it is not given."""
    if model_name_or_path:
        return model_name_or_path
    with training_args.main_process_first(desc="converting all-MiniLM-L6-v2 to mlm_suite"):
        return str(converted_minilm_dir())


@contextmanager
def from_the_hub(source: str, revision: str | None = "main", cache_dir: str | None = None, **ignored: Any) -> Iterator[None]:
    """Within the block, a Hub id that cannot be resolved (no such repository or revision, or not in the cache while
    offline) is a one-line :class:`~mlm_suite.errors.UsageError` naming the id and the revision; a local folder's
    errors pass unchanged. ``ignored``: the other ``from_pretrained`` keywords."""
    try:
        yield
    except OSError as error:
        if Path(source).exists():
            raise
        import huggingface_hub

        where = f"revision {revision or 'main'!r} of {source!r}"
        if huggingface_hub.constants.HF_HUB_OFFLINE:
            cache = cache_dir or huggingface_hub.constants.HF_HUB_CACHE
            raise UsageError(f"{where} is not in the Hub cache ({cache}) and the Hub is offline (HF_HUB_OFFLINE): "
                             "fetch it once online, or give a local folder") from None
        reason = " ".join(str(error).split())
        raise UsageError(f"{where} could not be loaded from the Hub: {reason}") from None


def pretrained_config(source: str, **pretrained: Any) -> PretrainedConfig:
    """``AutoConfig.from_pretrained(source, **pretrained)``; a local folder's ``config.json`` is checked first."""
    if Path(source).is_dir():
        check_config_file(Path(source))
    with from_the_hub(source, **pretrained):
        return AutoConfig.from_pretrained(source, **pretrained)


def pretrained_tokenizer(source: str, **pretrained: Any) -> Any:
    """``AutoTokenizer.from_pretrained(source, **pretrained)``; a local folder's tokenizer files are checked first."""
    from transformers import AutoTokenizer

    folder = Path(source)
    if folder.is_dir():
        check_tokenizer_files(folder)
        if (folder / "config.json").is_file():  # AutoTokenizer reads it too, for the tokenizer's class
            check_config_file(folder)
    with from_the_hub(source, **pretrained):
        return AutoTokenizer.from_pretrained(source, **pretrained)


def pretrained_model(model_class: Any, path: str, **kwargs: Any) -> Any:
    """``model_class.from_pretrained(path, **kwargs)``; a local folder's weights are checked first."""
    if Path(path).is_dir():
        check_weights_files(Path(path))
    with from_the_hub(path, **kwargs):
        return model_class.from_pretrained(path, **kwargs)


def load_model(model_class: Any, path: str, config: Any, model_args: ModelArguments) -> Any:
    """``model_class`` (a model or ``AutoModelFor*`` class) with ``path``'s weights and ``config``'s labels, or,
    with ``--init random``, the same architecture newly initialised (call ``set_seed`` first). The Hub flags
    (``--cache_dir --model_revision --token --trust_remote_code``) go to ``from_pretrained``."""
    if model_args.init == "random":
        if not hasattr(model_class, "from_config"):
            return model_class(config)
        remote = {"trust_remote_code": True} if getattr(model_args, "trust_remote_code", False) else {}
        return model_class.from_config(config, **remote)
    return pretrained_model(
        model_class, path, config=config, ignore_mismatched_sizes=model_args.ignore_mismatched_sizes,
        **model_args.pretrained_kwargs(),
    )


def load_config(model_path: str, model_args: ModelArguments) -> MlmSuiteConfig:
    """The config of ``--config_name`` (else of the model, an mlm_suite folder: :func:`mlm_suite_checkpoint`), loaded
    with the Hub flags.

    Raises:
        UsageError: a ``--config_name`` that is not an mlm_suite config: the jobs train mlm_suite models.
    """
    config = pretrained_config(model_args.config_name or model_path, **model_args.pretrained_kwargs())
    if not isinstance(config, MlmSuiteConfig):
        raise UsageError(
            f"--config_name {model_args.config_name} holds a {config.model_type!r} config; the job trains an mlm_suite "
            "model (a BERT-family model: pass its folder as --model_name_or_path, which converts it)"
        )
    return config


def load_tokenizer(model_path: str, model_args: ModelArguments, config: PretrainedConfig) -> Any:
    """The tokenizer of ``--tokenizer_name`` (else of the model), loaded with the Hub flags and checked against the
    model's ``config`` (:func:`check_vocabulary`)."""
    source = model_args.tokenizer_name or model_path
    tokenizer = pretrained_tokenizer(source, **model_args.pretrained_kwargs())
    check_vocabulary(tokenizer, config, source, model_args.config_name or model_path)
    return tokenizer


def mlm_suite_checkpoint(model_name_or_path: str, **pretrained: Any) -> str:
    """An mlm_suite folder holding ``model_name_or_path``: the folder itself (its weights checked), or a folder of a
    family mlm_suite converts (:data:`~mlm_suite.conversion.FAMILIES`) converted. Every job that
    trains a model starts from it, so that each trains mlm_suite's padding-free encoder.

    Such a checkpoint (a folder, or a Hub id: :func:`hub_snapshot`) is converted with
    :func:`~mlm_suite.conversion.convert_checkpoint` into a temporary folder,
    removed when the process exits; its head comes along (a sequence or token classifier with its labels), and a
    folder without one converts to the bare encoder or masked LM, which the job gives a new head.
    ``pretrained`` (the Hub flags, :meth:`~mlm_suite.jobs.common.arguments.HubArguments.pretrained_kwargs`) go to
    ``AutoConfig.from_pretrained``.
    """
    config = pretrained_config(model_name_or_path, **pretrained)
    if isinstance(config, MlmSuiteConfig):
        if Path(model_name_or_path).is_dir():
            check_weights_files(Path(model_name_or_path))
        return model_name_or_path
    family = FAMILIES.get(config.model_type)
    if family is None:
        raise ValueError(
            f"--model_name_or_path {model_name_or_path} holds a {config.model_type!r} model; this job takes "
            f"mlm_suite checkpoints or those of {', '.join(sorted(FAMILIES))}"
        )
    source = Path(model_name_or_path)
    if not source.is_dir():  # a Hub id, which AutoConfig resolved above
        source = hub_snapshot(model_name_or_path, **pretrained)
    # Converted once per process and source state: `mlm-suite seeds` runs its jobs in one process.
    files = sorted((file.name, stat.st_size, stat.st_mtime_ns)
                   for file in source.iterdir() if file.is_file() for stat in [file.stat()])
    key = (str(source.resolve()), *files)
    if key not in _CONVERTED:
        folder = tempfile.mkdtemp(prefix="mlm_suite-converted-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        print(f"converting the {family.name} checkpoint {model_name_or_path} to mlm_suite (in {folder}, removed at "
              f"exit)", file=sys.stderr)
        _CONVERTED[key] = str(convert_checkpoint(source, folder))
    return _CONVERTED[key]


# The folders mlm_suite_checkpoint converted in this process: (source folder, its files' names, sizes and times) →
# the converted folder.
_CONVERTED: dict[tuple, str] = {}


def hub_snapshot(repo_id: str, cache_dir: str | None = None, revision: str = "main", token: Any = None,
                 **ignored: Any) -> Path:
    """The local copy of the Hub model ``repo_id`` that a conversion reads: its JSON files, safetensors weights (a
    ``pytorch_model.bin``, read without unpickling code, only where it has none) and tokenizer files, fetched into
    the Hub cache as ``from_pretrained`` fetches them; with ``HF_HUB_OFFLINE=1``, read from that cache alone.
    ``ignored``: the other ``from_pretrained`` keywords (``trust_remote_code``)."""
    from huggingface_hub import snapshot_download

    fetch = {"repo_id": repo_id, "revision": revision, "cache_dir": cache_dir, "token": token}
    with from_the_hub(repo_id, revision, cache_dir):
        folder = Path(snapshot_download(**fetch, allow_patterns=["*.json", "*.safetensors", *TOKENIZER_FILES]))
        if not any(folder.glob("*.safetensors")):
            folder = Path(snapshot_download(**fetch, allow_patterns=["pytorch_model.bin"]))
    return folder


def check_max_seq_length(
    max_seq_length: int, config: PretrainedConfig, model_path: str, tokenizer: Any = None, pair: bool = False
) -> None:
    """``--max_seq_length`` against the model (and its tokenizer), before anything is trained or written.

    A model with a table of learned positions (``max_position_embeddings``; every BERT, and
    mlm_suite models with ``position_embedding_type="absolute"``) cannot take longer inputs; rotary
    positions have no such limit. With a tokenizer, a row must hold its special tokens and one more.

    Raises:
        UsageError: naming the flag, the limit and the model.
    """
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and getattr(config, "position_embedding_type", "absolute") != "rotary" and max_seq_length > limit:
        raise UsageError(
            f"--max_seq_length {max_seq_length} exceeds the {limit} positions the model {model_path} has "
            f"(max_position_embeddings); pass --max_seq_length {limit} or less"
        )
    if tokenizer is not None:
        needed = tokenizer.num_special_tokens_to_add(pair=pair) + 1
        if max_seq_length < needed:
            raise UsageError(
                f"--max_seq_length {max_seq_length} leaves no room for text: a row holds {needed - 1} special "
                f"tokens; pass --max_seq_length {needed} or more"
            )


def apply_freezing(model: Any, train_last_k_layers: int | None) -> str:
    """Freeze per ``--train_last_k_layers``; return a line describing what trains."""
    counts = freeze_encoder(model, train_last_k_layers)
    total = counts["trainable"] + counts["frozen"]
    if train_last_k_layers is None or train_last_k_layers == -1:
        what = "all layers"
    else:
        what = f"the head and the last {train_last_k_layers} encoder layer(s)"
    return f"{what} ({counts['trainable'] / 1e6:.2f} M of {total / 1e6:.2f} M parameters trainable)"


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
    config = copy.deepcopy(config)  # the caller's config stays as it was
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


def position_changes(
    config: MlmSuiteConfig, rope_theta: float | None, max_seq_length: int, continued: bool
) -> tuple[dict[str, Any], str | None]:
    """The config fields that a new RoPE base (``rope_theta``) and, for a ``continued`` rotary checkpoint at longer
    rows, a ``max_position_embeddings`` that follows ``max_seq_length`` change (rotary positions have no table to
    outgrow), and the change in words (None: nothing changes). ``config`` is not changed.

    Raises:
        UsageError: ``rope_theta`` for a model with absolute positions.
    """
    rotary = config.position_embedding_type == "rotary"
    fields, changes = {}, []
    if rope_theta is not None:
        if not rotary:
            raise UsageError(
                f"--rope_theta sets the base of rotary positions; this model's positions are {config.position_embedding_type}"
            )
        if rope_theta != config.rope_theta:
            changes.append(f"RoPE base {config.rope_theta:g} → {rope_theta:g}")
            fields["rope_theta"] = float(rope_theta)
    if continued and rotary and max_seq_length > config.max_position_embeddings:
        changes.append(f"max_position_embeddings {config.max_position_embeddings} → {max_seq_length}")
        fields["max_position_embeddings"] = max_seq_length
    return fields, (", ".join(changes) + f" (rows of {max_seq_length} tokens)" if changes else None)


def describe_new_weights(checkpoint_name: str, model: torch.nn.Module, new_weights: list[str]) -> str:
    """One line saying which weights are new when pretraining continues a checkpoint."""
    if not new_weights:
        return f"continuing {checkpoint_name}: every weight of {type(model).__name__} comes from the checkpoint"
    return (
        f"continuing {checkpoint_name}: new {type(model).__name__} weights, initialised as BERT's: "
        f"{', '.join(new_weights)} (the MLM decoder is tied to the word embeddings)"
    )


__all__ = [
    "ModelArguments",
    "apply_config_overrides",
    "apply_freezing",
    "check_max_seq_length",
    "describe_new_weights",
    "from_the_hub",
    "hub_snapshot",
    "load_config",
    "load_model",
    "load_tokenizer",
    "mlm_suite_checkpoint",
    "position_changes",
    "pretrained_config",
    "pretrained_model",
    "pretrained_tokenizer",
    "resolve_model_path",
]
