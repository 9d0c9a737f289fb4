"""The model a job starts from: the default start (all-MiniLM-L6-v2 converted once), a folder's config, tokenizer
and weights loaded with the Hub flags, and a BERT checkpoint converted on the fly. See docs/fine_tuning.md."""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from transformers import AutoConfig, PretrainedConfig, TrainingArguments

from mlm_suite.convert import convert_bert_checkpoint
from mlm_suite.data import resources
from mlm_suite.model import MlmSuiteConfig

if TYPE_CHECKING:
    from mlm_suite.jobs.finetuning import ModelArguments


def resolve_model_path(model_name_or_path: str | None, training_args: TrainingArguments) -> str:
    """``model_name_or_path``, or the converted MiniLM folder when it is not given."""
    if model_name_or_path:
        return model_name_or_path
    with training_args.main_process_first(desc="converting all-MiniLM-L6-v2 to mlm_suite"):
        return str(resources.converted_minilm_dir())


def load_model(model_class: Any, path: str, config: Any, model_args: ModelArguments) -> Any:
    """``model_class`` (a model or ``AutoModelFor*`` class) with ``path``'s weights and ``config``'s labels, or,
    with ``--init random``, the same architecture newly initialised (call ``set_seed`` first). The Hub flags
    (``--cache_dir --model_revision --token --trust_remote_code``) go to ``from_pretrained``."""
    if model_args.init == "random":
        if not hasattr(model_class, "from_config"):
            return model_class(config)
        remote = {"trust_remote_code": True} if getattr(model_args, "trust_remote_code", False) else {}
        return model_class.from_config(config, **remote)
    return model_class.from_pretrained(
        path, config=config, ignore_mismatched_sizes=model_args.ignore_mismatched_sizes, **model_args.pretrained_kwargs()
    )


def load_config(model_path: str, model_args: ModelArguments) -> PretrainedConfig:
    """The config of ``--config_name`` (else of the model), loaded with the Hub flags."""
    return AutoConfig.from_pretrained(model_args.config_name or model_path, **model_args.pretrained_kwargs())


def load_tokenizer(model_path: str, model_args: ModelArguments) -> Any:
    """The tokenizer of ``--tokenizer_name`` (else of the model), loaded with the Hub flags."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_path, **model_args.pretrained_kwargs())


def mlm_suite_checkpoint(model_name_or_path: str, **pretrained: Any) -> str:
    """An mlm_suite folder holding ``model_name_or_path``: the folder itself, or a BERT folder converted.

    A BERT checkpoint (``BertModel``, ``BertForMaskedLM``, ``BertForPreTraining``) is converted with
    :func:`~mlm_suite.convert.convert_bert_checkpoint` into a temporary folder, removed when the process exits.
    ``pretrained`` (the Hub flags, :meth:`~mlm_suite.jobs.arguments.HubArguments.pretrained_kwargs`) go to
    ``AutoConfig.from_pretrained``.
    """
    config = AutoConfig.from_pretrained(model_name_or_path, **pretrained)
    if isinstance(config, MlmSuiteConfig):
        return model_name_or_path
    if config.model_type != "bert":
        raise ValueError(
            f"--model_name_or_path {model_name_or_path} holds a {config.model_type!r} model; this job takes "
            "mlm_suite or BERT checkpoints"
        )
    folder = tempfile.mkdtemp(prefix="mlm_suite-converted-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    print(f"converting the BERT checkpoint {model_name_or_path} to mlm_suite (in {folder}, removed at exit)", file=sys.stderr)
    return str(convert_bert_checkpoint(model_name_or_path, folder))


__all__ = ["load_config", "load_model", "load_tokenizer", "mlm_suite_checkpoint", "resolve_model_path"]
