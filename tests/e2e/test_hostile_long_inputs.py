"""A sentence far longer than ``--max_seq_length`` given to ``mlm-suite finetune-ner``: the job reads it in windows,
but scores it as the one sentence it is (docs/finetuning.md): the sentences and gold entities reported are the
file's, and every word gets exactly one prediction, whether the windows are scored by argmax or a CRF."""

from __future__ import annotations

import json

import pytest

from tests.helpers import FAST, SENTENCES, run_command, write_conll

MAX_SEQ_LENGTH = 32  # 30 sub-tokens a window besides [CLS] and [SEP]


def long_sentence(blocks: int = 60) -> tuple[list[str], list[str]]:
    """``1 + 5 * blocks`` one-piece words holding ``blocks`` two-word entities; the leading word shifts the blocks
    so that each window edge (every 30 words) cuts an entity in two."""
    words, tags = ["so"], ["O"]
    for _ in range(blocks):
        words += ["the", "man", "met", "peter", "parker"]
        tags += ["O", "O", "O", "B-PER", "I-PER"]
    return words, tags


@pytest.mark.parametrize("decoder", [[], ["--use_crf"]], ids=["argmax", "crf"])
def test_a_sentence_longer_than_max_seq_length_is_scored_as_one_sentence(tmp_path, tiny_model, decoder, capsys):
    long = long_sentence()
    scored = [long, *SENTENCES[:3]]
    files = {name: write_conll(tmp_path / f"{name}.conll", scored) for name in ("dev", "test")}
    train = write_conll(tmp_path / "train.conll", [long, *SENTENCES])
    output_dir = tmp_path / "out"
    outcome = run_command(["finetune-ner", "--model_name_or_path", tiny_model, "--train_file", train,
                           "--validation_file", files["dev"], "--test_file", files["test"],
                           "--max_seq_length", MAX_SEQ_LENGTH, "--output_dir", output_dir, *decoder, *FAST], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    metrics = json.loads((output_dir / "all_results.json").read_text())
    entities = sum(tag.startswith("B-") for _, tags in scored for tag in tags)
    words = sum(len(tokens) for tokens, _ in scored)
    assert len(long[0]) > 9 * MAX_SEQ_LENGTH and entities > 60
    for split in ("eval", "test"):
        # the file's sentences and entities, not the windows' (an entity cut by a window edge counted twice)
        assert metrics[f"{split}_n_sentences"] == len(scored)
        assert metrics[f"{split}_gold_entities"] == entities
        assert metrics[f"{split}_n_tokens"] == words  # one prediction per word, however many windows hold it
        for key in ("f1", "conlleval_f1", "strict_f1", "accuracy"):
            assert 0.0 <= metrics[f"{split}_{key}"] <= 1.0
