"""benchmarks/diagnose_transfer.py: each diagnostic against a hand computation or a case with a known answer."""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import load_benchmark, make_tiny_config
from mlm_suite.model import MlmSuiteForMaskedLM

@pytest.fixture(scope="module")
def diagnose():
    yield load_benchmark("diagnose_transfer")
    sys.modules.pop("diagnose_transfer", None)


@pytest.fixture(scope="module")
def minilm_vocab_model(tokenizer):
    """A fresh tiny MLM on the MiniLM vocabulary, so the sentiment words are single tokens."""
    torch.manual_seed(0)
    return MlmSuiteForMaskedLM(make_tiny_config(vocab_size=len(tokenizer), max_position_embeddings=128)).eval()


def test_probe_finds_a_linear_signal_and_not_noise(diagnose):
    generator = torch.Generator().manual_seed(0)
    features = {split: torch.randn(n, 16, generator=generator) for split, n in (("train", 600), ("validation", 300), ("test", 300))}
    signal = {split: (values[:, 3] - 0.5 * values[:, 7] > 0).float() for split, values in features.items()}
    validation, test = diagnose.probe(features, signal)
    assert validation > 0.95 and test > 0.95
    noise = {split: (torch.rand(len(values), generator=generator) > 0.5).float() for split, values in features.items()}
    assert diagnose.probe(features, noise)[1] < 0.62


def test_bag_of_pieces_is_log_counts_without_special_tokens(diagnose, tokenizer):
    bag = diagnose.bag_of_pieces(tokenizer, ["good good movie", "bad"])
    vocab = tokenizer.get_vocab()
    assert bag.shape == (2, len(tokenizer))
    assert bag[0, vocab["good"]] == pytest.approx(math.log(3)) and bag[0, vocab["movie"]] == pytest.approx(math.log(2))
    assert bag[1, vocab["bad"]] == pytest.approx(math.log(2))
    assert bag.sum().item() == pytest.approx(2 * math.log(2) + math.log(3))  # nothing else, no [CLS]/[SEP]


def test_fresh_weights_have_the_initializer_scale(diagnose, minilm_vocab_model):
    scales = diagnose.weight_rms(minilm_vocab_model)
    assert set(scales) == {"word embeddings", "attention matrices", "feed-forward matrices"}
    for value in scales.values():
        assert value == pytest.approx(minilm_vocab_model.config.initializer_range, rel=0.1)


def test_pair_cosines_match_the_embedding_table_and_skip_missing_words(diagnose, tokenizer, minilm_vocab_model):
    cosines = diagnose.pair_cosines(minilm_vocab_model, tokenizer, [("good", "bad"), ("good", "qwertyzzz")])
    table = minilm_vocab_model.encoder.embeddings.word_embeddings.weight
    vocab = tokenizer.get_vocab()
    assert list(cosines) == ["good/bad"]
    assert cosines["good/bad"] == pytest.approx(F.cosine_similarity(table[vocab["good"]], table[vocab["bad"]], dim=0).item())


def test_frozen_features_are_means_and_cls_of_real_tokens(diagnose, tokenizer, minilm_vocab_model):
    texts = ["a fine film", "the plot is a mess from start to end"]
    features = diagnose.frozen_features(minilm_vocab_model, tokenizer, texts)
    for row, text in enumerate(texts):  # one sentence at a time: no padding at all
        alone = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            states = minilm_vocab_model.encoder(**alone, output_hidden_states=True).hidden_states
        torch.testing.assert_close(features["embedding mean"][row], states[0][0].mean(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(features["final mean"][row], states[-1][0].mean(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(features["final [CLS]"][row], states[-1][0, 0], atol=1e-5, rtol=1e-5)


def test_prompt_scores_read_the_mask_position(diagnose, tokenizer, minilm_vocab_model):
    texts = ["a fine film", "the plot is a mess from start to end"]
    scores = diagnose.prompt_scores(minilm_vocab_model, tokenizer, texts)
    vocab = tokenizer.get_vocab()
    positive = [vocab[word] for word in diagnose.POSITIVE_WORDS]
    negative = [vocab[word] for word in diagnose.NEGATIVE_WORDS]
    for row, text in enumerate(texts):
        alone = tokenizer(text + diagnose.PROMPT.format(mask=tokenizer.mask_token), return_tensors="pt")
        with torch.no_grad():
            logits = minilm_vocab_model(**alone).logits[0]
        at_mask = logits[alone["input_ids"][0] == tokenizer.mask_token_id][0].log_softmax(-1)
        expected = at_mask[positive].logsumexp(-1) - at_mask[negative].logsumexp(-1)
        assert scores[row].item() == pytest.approx(expected.item(), abs=1e-5)


def test_median_split_accuracy(diagnose):
    labels = torch.tensor([1.0, 0.0, 1.0, 0.0])
    assert diagnose.median_split_accuracy(torch.tensor([2.0, -1.0, 0.5, 0.1]), labels) == 1.0
    assert diagnose.median_split_accuracy(torch.tensor([-2.0, 1.0, -0.5, 0.1]), labels) == 0.0


def test_a_folder_without_a_model_is_a_usage_error(diagnose, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        diagnose.main(["--model", str(tmp_path / "nothing")])
    assert exit_info.value.code == 2
    assert "no config.json" in capsys.readouterr().err
