"""The checks of what a job loads (mlm_suite/jobs/common/model_loading.py): a tokenizer against the model's vocabulary."""

from __future__ import annotations

import pytest

from mlm_suite.errors import UsageError
from mlm_suite.model_files import check_vocabulary
from mlm_suite.model import MlmSuiteConfig


class Tokenizer:
    """What :func:`check_vocabulary` reads of a tokenizer: its size, added tokens included (``len``)."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def test_a_tokenizer_with_more_ids_than_the_model_embeds_is_refused_naming_both_sizes_and_sources():
    with pytest.raises(UsageError) as refused:
        check_vocabulary(Tokenizer(30523), MlmSuiteConfig(vocab_size=30522), "tok/", "model/")
    assert str(refused.value) == (
        "the tokenizer (tok/) has 30523 tokens but the model (model/) has vocab_size 30522, so ids from 30522 on have "
        "no embedding: use the tokenizer the model was trained with, or a model with vocab_size 30523 or more"
    )


@pytest.mark.parametrize("size", [30522, 1000])
def test_a_tokenizer_within_the_model_s_vocabulary_is_accepted(size):
    """Every id has an embedding; spare rows (a vocabulary rounded up to a multiple of 64) are unused, not wrong."""
    check_vocabulary(Tokenizer(size), MlmSuiteConfig(vocab_size=30522), "tok/", "model/")


def test_a_native_folder_is_converted_once_per_process_until_its_files_change(tmp_path, capsys):
    """``mlm-suite seeds`` runs its jobs in one process: each run from the same native folder reads one conversion
    (one temporary copy of the weights, not one per seed); a folder whose files changed is converted again."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    from mlm_suite.jobs.common.model_loading import mlm_suite_checkpoint

    source = tmp_path / "roberta"
    config = RobertaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=20, max_position_embeddings=20)
    RobertaForMaskedLM(config).save_pretrained(source)
    first, again = mlm_suite_checkpoint(str(source)), mlm_suite_checkpoint(str(source))
    assert first == again and capsys.readouterr().err.count("converting the RoBERTa checkpoint") == 1
    RobertaForMaskedLM(config).save_pretrained(source)  # new weights in the same folder
    assert mlm_suite_checkpoint(str(source)) != first and "converting the RoBERTa" in capsys.readouterr().err
