"""Tests of mlm_suite.analysis.embeddings: geometry on synthetic vectors, the embedder on tiny random and
real (all-MiniLM-L6-v2) BERT weights, the standardizer and the sense-centroid classifier."""

from __future__ import annotations

import random
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

from mlm_suite.analysis import embeddings
from mlm_suite.analysis.embeddings import (
    ContextualEmbedder,
    SenseCentroidClassifier,
    Standardizer,
    accuracy,
    anisotropy,
    contextual_similarity,
    layerwise_anisotropy,
    most_frequent_sense_baseline,
    rogue_dimensions,
    similarity_in_context,
)
from mlm_suite.data.inputs import downloads
from mlm_suite.data.words import split_words


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(downloads.minilm_dir())


@pytest.fixture(scope="module")
def minilm():
    return BertModel.from_pretrained(downloads.minilm_dir())


@pytest.fixture(scope="module")
def tiny_model(tokenizer):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128,
    )
    return BertModel(config).eval()


SHORT = ["the", "unbelievably", "tokenizable", "bank", "!"]
LONG = ("a much longer sentence that forces plenty of padding onto the short one " * 4).split()


# ---------------------------------------------------------------- geometry


def test_isotropic_gaussian_has_anisotropy_near_zero():
    vectors = torch.randn(2000, 64, generator=torch.Generator().manual_seed(0))
    value = anisotropy(vectors)
    assert abs(value) < 0.02, value


def test_common_offset_makes_vectors_anisotropic_and_zscoring_removes_it():
    generator = torch.Generator().manual_seed(1)
    vectors = torch.randn(2000, 64, generator=generator) + 20 * torch.randn(64, generator=generator)
    raw = anisotropy(vectors)
    standardized = anisotropy(Standardizer().fit_transform(vectors))
    assert raw > 0.9, raw
    assert abs(standardized) < 0.02, standardized


def test_anisotropy_is_seeded_and_checks_input():
    vectors = torch.randn(50, 8)
    assert anisotropy(vectors, seed=3) == anisotropy(vectors, seed=3)
    with pytest.raises(ValueError, match="at least 2 vectors"):
        anisotropy(vectors[:1])
    with pytest.raises(ValueError, match="2-D"):
        anisotropy(torch.randn(8))


def test_anisotropy_is_the_mean_cosine_of_pairs_drawn_and_gathered_in_blocks(monkeypatch):
    """Memory stays bounded whatever ``n_pairs`` (``anisotropy --n_pairs 100000000`` asked for 102 GB at once): pairs
    are drawn in blocks, each drawn as the whole sample was, and their vectors gathered a few rows at a time."""
    monkeypatch.setattr(embeddings, "_PAIRS_PER_DRAW", 7)
    monkeypatch.setattr(embeddings, "_ENTRIES_PER_PRODUCT", 3 * 8)  # 3 rows of 8 dimensions at a time
    vectors = torch.randn(20, 8, generator=torch.Generator().manual_seed(0))
    unit = vectors.double() / vectors.double().norm(dim=1, keepdim=True)
    generator = torch.Generator().manual_seed(5)
    cosines = []
    for count in (7, 7, 3):
        first = torch.randint(20, (count,), generator=generator)
        second = torch.randint(19, (count,), generator=generator)
        second += (second >= first).long()
        cosines.append((unit[first] * unit[second]).sum(dim=1))
    assert anisotropy(vectors, n_pairs=17, seed=5) == pytest.approx(float(torch.cat(cosines).mean()), abs=1e-12)


def test_rogue_dimension_detection_finds_injected_dimension():
    generator = torch.Generator().manual_seed(2)
    vectors = torch.randn(1000, 48, generator=generator)
    vectors[:, 17] += 25.0
    rogue = rogue_dimensions(vectors, k=3)
    assert rogue.indices[0] == 17
    assert rogue.shares[0] > 0.9, rogue.shares
    # The contributions of all dimensions add up to the expected cosine between distinct pairs.
    assert rogue.expected_cosine == pytest.approx(anisotropy(vectors, n_pairs=200000), abs=0.01)
    assert rogue_dimensions(Standardizer().fit_transform(vectors), k=1).shares[0] < 0.9


# ---------------------------------------------------------------- standardizer


def test_standardizer_round_trip(tmp_path):
    vectors = torch.randn(100, 6) * torch.arange(1.0, 7.0) + 3.0
    vectors[:, 2] = 5.0  # a constant dimension: std floored at eps, no division by zero
    standardizer = Standardizer(eps=1e-4).fit(vectors)
    z = standardizer.transform(vectors)
    assert torch.isfinite(z).all()
    assert torch.allclose(z[:, [0, 1, 3, 4, 5]].mean(0), torch.zeros(5), atol=1e-5)
    assert torch.allclose(z[:, [0, 1, 3, 4, 5]].std(0, unbiased=False), torch.ones(5), atol=1e-4)
    path = tmp_path / "standardizer.safetensors"
    standardizer.save(path)
    loaded = Standardizer.load(path)
    assert loaded.eps == 1e-4
    assert torch.equal(loaded.transform(vectors), z)


def test_standardizer_errors(tmp_path):
    with pytest.raises(RuntimeError, match="before fit"):
        Standardizer().transform(torch.randn(3, 4))
    with pytest.raises(ValueError, match="dimension 5 .*dimension 4"):
        Standardizer().fit(torch.randn(3, 4)).transform(torch.randn(3, 5))
    other = tmp_path / "other.safetensors"
    from safetensors.torch import save_file

    save_file({"mean": torch.zeros(3)}, str(other))
    with pytest.raises(ValueError, match="not a saved Standardizer"):
        Standardizer.load(other)


# ---------------------------------------------------------------- sense classification


def _synthetic_senses(seed: int, n_per_sense: int = 40):
    """Two words, each with senses around distinct random directions, plus a shared offset."""
    generator = torch.Generator().manual_seed(seed)
    offset = 10 * torch.randn(32, generator=generator)
    words, senses, vectors = [], [], []
    for word, sense_names in {"bank": ["bank.n.01", "bank.n.02"], "play": ["play.n.01", "play.v.01", "play.v.02"]}.items():
        for sense in sense_names:
            center = 3 * torch.randn(32, generator=generator)
            for _ in range(n_per_sense):
                words.append(word)
                senses.append(sense)
                vectors.append(offset + center + 0.5 * torch.randn(32, generator=generator))
    return words, torch.stack(vectors), senses


@pytest.mark.parametrize("standardize", [False, True])
def test_centroids_separate_synthetic_senses(standardize):
    train_words, train_vectors, train_senses = _synthetic_senses(seed=0)
    classifier = SenseCentroidClassifier(Standardizer() if standardize else None)
    classifier.fit(train_words, train_vectors, train_senses)
    # Test instances: the training instances moved by fresh noise.
    test_vectors = train_vectors + 0.3 * torch.randn(train_vectors.shape, generator=torch.Generator().manual_seed(9))
    assert classifier.score(train_words, test_vectors, train_senses) == 1.0
    assert classifier.predict(["unknown"], test_vectors[:1]) == [None]


def test_classifier_errors_and_baseline():
    classifier = SenseCentroidClassifier()
    with pytest.raises(RuntimeError, match="before fit"):
        classifier.predict(["bank"], torch.randn(1, 4))
    classifier.fit(["bank", "bank", "bank"], torch.randn(3, 4), ["bank.n.01", "bank.n.02", "bank.n.02"])
    assert classifier.most_frequent_sense("bank") == "bank.n.02"
    with pytest.raises(ValueError, match=r"sense 'bank\.n\.09' of word 'bank' was never seen in training"):
        classifier.score(["bank"], torch.randn(1, 4), ["bank.n.09"])
    with pytest.raises(ValueError, match="2 words but 1 vectors"):
        classifier.predict(["bank", "bank"], torch.randn(1, 4))

    baseline = most_frequent_sense_baseline(["a", "a", "a", "b"], ["x", "y", "y", "z"], ["a", "b", "c"])
    assert baseline == ["y", "z", None]
    assert accuracy(baseline, ["y", "q", "r"]) == pytest.approx(1 / 3)


def test_contextual_similarity():
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([3.0, 3.0])
    assert contextual_similarity(a, b) == pytest.approx(2**-0.5)
    # mean (1, 2), std (1, 2): a -> (0, -1), b -> (2, 0.5)
    standardizer = Standardizer().fit(torch.tensor([[0.0, 0.0], [2.0, 4.0]]))
    assert contextual_similarity(a, b, standardizer) == pytest.approx(-0.5 / 4.25**0.5)
    with pytest.raises(ValueError, match="same shape"):
        contextual_similarity(torch.ones(2), torch.ones(3))


# ---------------------------------------------------------------- embedder


@pytest.mark.parametrize("pooling", ["mean", "first"])
@pytest.mark.parametrize("layers", ["last", "last4_mean", "last4_sum", [0, 2]])
def test_embedding_does_not_depend_on_batch_padding(tiny_model, tokenizer, pooling, layers):
    embedder = ContextualEmbedder(tiny_model, tokenizer, layers=layers, subword_pooling=pooling, batch_size=8)
    alone = embedder.embed_words([SHORT])[0]
    batched = embedder.embed_words([LONG, SHORT, ["x"]])
    assert alone.shape == (len(SHORT), 32)
    assert [vectors.shape[0] for vectors in batched] == [len(LONG), len(SHORT), 1]
    torch.testing.assert_close(batched[1], alone, atol=1e-5, rtol=0)
    # Batches of one sentence each, in another order: order is restored.
    single = ContextualEmbedder(tiny_model, tokenizer, layers=layers, subword_pooling=pooling, batch_size=1)
    torch.testing.assert_close(single.embed_words([LONG, SHORT, ["x"]])[1], alone, atol=1e-5, rtol=0)


def test_pooling_modes_match_a_manual_computation(tiny_model, tokenizer):
    encoding = tokenizer([SHORT], is_split_into_words=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = tiny_model(**encoding, output_hidden_states=True).hidden_states
    word_ids = encoding.word_ids(0)
    word = 2  # "tokenizable": several pieces
    positions = [position for position, index in enumerate(word_ids) if index == word]
    assert len(positions) > 1
    mean = ContextualEmbedder(tiny_model, tokenizer, layers=[1, 3]).embed_words([SHORT])[0][word]
    first = ContextualEmbedder(tiny_model, tokenizer, subword_pooling="first").embed_words([SHORT])[0][word]
    torch.testing.assert_close(mean, ((hidden[1] + hidden[3]) / 2)[0, positions].mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(first, hidden[-1][0, positions[0]], atol=1e-5, rtol=0)


def test_masked_lm_model_is_unwrapped_and_texts_keep_spans(tokenizer):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    masked_lm = BertForMaskedLM(config)
    embedder = ContextualEmbedder(masked_lm, tokenizer)
    assert embedder.model is masked_lm.bert
    texts = ["He sat on the bank.", "", "Banks lend money"]
    embedded = embedder.embed_texts(texts)
    assert [len(item.words) for item in embedded] == [6, 0, 3]
    assert embedded[0].vectors.shape == (6, 16) and embedded[1].vectors.shape == (0, 16)
    assert texts[2][slice(*embedded[2].spans[0])] == "Banks"
    per_layer = embedder.embed_words_all_layers([["He", "sat"], [], ["x"]])
    assert [item.shape for item in per_layer] == [(3, 2, 16), (3, 0, 16), (3, 1, 16)]
    assert embedder.embed_words([[]])[0].shape == (0, 16) and embedder.embed_words([]) == []
    torch.testing.assert_close(per_layer[0][-1], embedder.embed_words([["He", "sat"]])[0], atol=1e-5, rtol=0)


def test_embedder_errors(tiny_model, tokenizer):
    # transformers 5 ships fast tokenizers only; a stand-in with is_fast=False plays a slow one.
    slow = SimpleNamespace(is_fast=False, pad_token_id=0)
    with pytest.raises(TypeError, match="needs a fast tokenizer .* got SimpleNamespace"):
        ContextualEmbedder(tiny_model, slow)
    with pytest.raises(ValueError, match="layers must be one of"):
        ContextualEmbedder(tiny_model, tokenizer, layers="middle")
    embedder = ContextualEmbedder(tiny_model, tokenizer)
    with pytest.raises(ValueError, match=r"sentence 1 is \d+ tokens long .*max_length=128"):
        embedder.embed_words([SHORT, ["word"] * 200])
    with pytest.raises(ValueError, match=r"word 1 \('\\u200b'\) of sentence 0 has no sub-tokens"):
        embedder.embed_words([["a", "\u200b", "b"]])
    with pytest.raises(IndexError, match="target index 5 is outside sentence 0, which has 5 words"):
        embedder.embed_targets([SHORT], [5])
    with pytest.raises(IndexError, match="target index -1 is outside context_b, which has 2 words"):
        similarity_in_context(embedder, (SHORT, 0), (["a", "b"], -1))
    with pytest.raises(IndexError, match="layer index 7 is out of range: the model returns 5 hidden states"):
        ContextualEmbedder(tiny_model, tokenizer, layers=[7]).embed_words([SHORT])


# ---------------------------------------------------------------- real weights


@pytest.mark.slow
def test_real_minilm_anisotropy_drops_after_zscoring(minilm, tokenizer):
    rows = random.Random(0).sample(downloads.pang_lee_sentences(), 100)
    sentences = [[word for word, _, _ in split_words(text)] for _, text in rows]
    embedder = ContextualEmbedder(minilm, tokenizer, batch_size=32)
    vectors = torch.cat(embedder.embed_words(sentences))
    raw = anisotropy(vectors)
    standardized = anisotropy(Standardizer().fit_transform(vectors))
    print(f"MiniLM last layer, {vectors.shape[0]} instances: anisotropy raw {raw:.4f}, z-scored {standardized:.4f}")
    assert raw > 0.05
    assert abs(standardized) < raw / 3

    # The layer-wise helper agrees with the single-layer path for the last layer.
    per_layer = layerwise_anisotropy(embedder, sentences[:20], n_pairs=2000)
    assert [row["layer"] for row in per_layer] == list(range(7))
    last = torch.cat(embedder.embed_words(sentences[:20]))
    assert per_layer[-1]["raw"] == pytest.approx(anisotropy(last, n_pairs=2000), abs=1e-5)


def test_real_minilm_separates_bank_senses(minilm, tokenizer):
    embedder = ContextualEmbedder(minilm, tokenizer)
    river = (["he", "sat", "on", "the", "bank", "of", "the", "river"], 4)
    shore = (["the", "canoe", "drifted", "toward", "the", "muddy", "bank"], 6)
    money = (["she", "deposited", "the", "cheque", "at", "the", "bank"], 6)
    same = similarity_in_context(embedder, river, shore)
    different = similarity_in_context(embedder, river, money)
    print(f"bank river/shore {same:.3f}, river/money {different:.3f}")
    assert same > different


def test_every_public_name_is_documented():
    """``mlm_suite.analysis.__all__`` is the public API: each name exists and docs/analysis.md names it (its
    snippets run in tests/conformance/test_docs.py)."""
    import mlm_suite.analysis

    page = (Path(__file__).resolve().parents[2] / "docs" / "analysis.md").read_text(encoding="utf-8")
    assert sorted(mlm_suite.analysis.__all__) == mlm_suite.analysis.__all__
    for name in mlm_suite.analysis.__all__:
        assert hasattr(mlm_suite.analysis, name) and re.search(rf"\b{name}\b", page), name
