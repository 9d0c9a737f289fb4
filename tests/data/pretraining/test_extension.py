"""A new language for an existing model (mlm_suite.data.pretraining.extension): pieces learnt from the text with the
tokenizer's own algorithm (WordPiece, BPE, Unigram) join its model, not its added tokens; words of the new language
fall into fewer pieces; the tokenizer saves and loads as itself; each new embedding row is the mean of the old pieces
it replaces; the same text gives the same pieces in every process; one-line refusals."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM
from mlm_suite.data.pretraining.extension import extend_tokenizer, grow_embeddings, resumed_extension
from mlm_suite.errors import UsageError
from tests.helpers import make_documents, polarity_texts, roberta_tokenizer, xlm_roberta_tokenizer

GERMAN = polarity_texts("polarity-de-amazon.csv")[:600]
ENGLISH = make_documents(300, seed=4)


@pytest.fixture(scope="module", params=["WordPiece", "BPE", "Unigram"])
def family_tokenizer(request, tokenizer):
    """MiniLM's WordPiece, a RoBERTa-style byte-level BPE or an XLM-R-style Unigram tokenizer, each of English."""
    if request.param == "WordPiece":
        return request.param, tokenizer
    return request.param, (roberta_tokenizer if request.param == "BPE" else xlm_roberta_tokenizer)(ENGLISH)


def model_pieces(tokenizer) -> set[str]:
    vocab = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["vocab"]
    return {entry[0] for entry in vocab} if isinstance(vocab, list) else set(vocab)


def test_new_pieces_join_the_tokenizer_s_model_and_cut_the_new_language_s_words_into_fewer_pieces(family_tokenizer, tmp_path):
    kind, old = family_tokenizer
    before = {"size": len(old), "vocab": old.get_vocab(), "added": dict(old.added_tokens_decoder)}
    extension = extend_tokenizer(old, GERMAN, 100)
    new = extension.tokenizer
    assert extension.algorithm == kind and len(extension.pieces) == 100 and extension.first_id == before["size"]
    assert len(new) == before["size"] + 100
    vocabulary = new.get_vocab()
    assert all(vocabulary[piece] == index for piece, index in before["vocab"].items())  # old ids unchanged
    assert [vocabulary[piece] for piece in extension.pieces] == list(range(before["size"], before["size"] + 100))
    assert set(extension.pieces) <= model_pieces(new) and not set(extension.pieces) & set(before["vocab"])
    assert new.added_tokens_decoder.keys() == before["added"].keys()  # not added tokens, which match inside words
    assert extension.pieces_per_word_after < extension.pieces_per_word_before
    ids = new(GERMAN[:50], add_special_tokens=False)["input_ids"]
    assert any(index >= before["size"] for row in ids for index in row)
    assert len(old) == before["size"] and old.get_vocab() == before["vocab"]  # the old tokenizer is untouched
    new.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded) is type(new) and len(loaded) == len(new)
    assert loaded(GERMAN[:50])["input_ids"] == new(GERMAN[:50])["input_ids"]


def test_each_new_embedding_row_is_the_mean_of_the_old_pieces_it_replaces(tokenizer):
    config = MlmSuiteConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=48)
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(config)
    with torch.no_grad():
        model.lm_head.decoder.bias.normal_()
    old_rows = model.get_input_embeddings().weight.detach().clone()
    old_bias = model.lm_head.decoder.bias.detach().clone()
    extension = extend_tokenizer(tokenizer, GERMAN, 50)
    grow_embeddings(model, extension)
    rows, bias = model.get_input_embeddings().weight, model.lm_head.decoder.bias
    assert rows.shape[0] == model.config.vocab_size == len(tokenizer) + 50
    assert model.get_output_embeddings().weight is rows  # the decoder stays tied
    assert torch.equal(rows[: len(tokenizer)], old_rows) and torch.equal(bias[: len(tokenizer)], old_bias)
    for offset, old in enumerate(extension.old_pieces):
        assert old, extension.pieces[offset]  # MiniLM cuts every German piece into pieces of its own
        torch.testing.assert_close(rows[len(tokenizer) + offset], old_rows[list(old)].mean(0))
        torch.testing.assert_close(bias[len(tokenizer) + offset], old_bias[list(old)].mean(0))
    # A continuation piece is made of continuation pieces: "##ung" of "##un" "##g", never of "un" "##g".
    continued = [(piece, old) for piece, old in zip(extension.pieces, extension.old_pieces) if piece.startswith("##")]
    assert continued and all(tokenizer.convert_ids_to_tokens(old[0]).startswith("##") for _, old in continued)
    # A model with spare rows (embeddings padded past the vocabulary) keeps its size.
    padded = MlmSuiteForMaskedLM(MlmSuiteConfig(**{**config.to_dict(), "vocab_size": len(tokenizer) + 64}))
    grow_embeddings(padded, extension)
    assert padded.get_input_embeddings().weight.shape[0] == len(tokenizer) + 64


def test_a_resumed_run_takes_the_extension_its_checkpoint_saved(tokenizer):
    extension = extend_tokenizer(tokenizer, GERMAN, 30)
    resumed = resumed_extension(tokenizer, extension.tokenizer, GERMAN)
    assert resumed.pieces == extension.pieces and resumed.old_pieces == extension.old_pieces
    other = xlm_roberta_tokenizer(ENGLISH)
    with pytest.raises(UsageError, match="is not the continued model's .* extended: resume from a checkpoint of this run"):
        resumed_extension(tokenizer, other, GERMAN)


@pytest.mark.multiprocess
def test_the_same_text_gives_the_same_pieces_in_every_process(tmp_path):
    """``tokenizers``' trainers run on threads; every process of a run must extend its copy of the checkpoint's
    tokenizer alike: a process on one thread learns what this one learns on its threads."""
    texts = GERMAN[:300]
    folders = {kind: tmp_path / kind for kind in ("BPE", "Unigram")}
    roberta_tokenizer(ENGLISH).save_pretrained(folders["BPE"])
    xlm_roberta_tokenizer(ENGLISH).save_pretrained(folders["Unigram"])
    script = (
        "import sys\n"
        "from transformers import AutoTokenizer\n"
        "from mlm_suite.data.pretraining.extension import extend_tokenizer\n"
        "from tests.helpers import polarity_texts\n"
        "texts = polarity_texts('polarity-de-amazon.csv')[:300]\n"
        "for folder in sys.argv[1:]:\n"
        "    print(extend_tokenizer(AutoTokenizer.from_pretrained(folder), texts, 60).tokenizer.backend_tokenizer.to_str())\n"
    )  # fmt: skip
    environment = {**os.environ, "RAYON_NUM_THREADS": "1", "PYTHONHASHSEED": "1"}
    done = subprocess.run([sys.executable, "-c", script, *map(str, folders.values())], capture_output=True, text=True,
                          env=environment, cwd=Path(__file__).parents[3])
    assert done.returncode == 0, done.stderr[-2000:]
    here = [extend_tokenizer(AutoTokenizer.from_pretrained(folder), texts, 60).tokenizer.backend_tokenizer.to_str()
            for folder in folders.values()]
    assert done.stdout.splitlines() == here


def test_what_cannot_be_extended_is_refused_in_one_line(tokenizer):
    with pytest.raises(UsageError, match=re.escape("--extend_vocabulary 100000: the training text yields")) as caught:
        extend_tokenizer(tokenizer, GERMAN[:20], 100_000)
    assert "ask for at most" in str(caught.value) and "\n" not in str(caught.value)
    # Text in the tokenizer's own language: every piece learnt from it is in the vocabulary already.
    english = [f"the {word} is here" for word in ("cat", "dog", "sun", "car")] * 20
    with pytest.raises(UsageError, match="yields 0 piece"):
        extend_tokenizer(tokenizer, english, 10)
    word_level = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "a": 2}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]", pad_token="[PAD]")
    with pytest.raises(UsageError, match=re.escape("is a WordLevel model, which cannot learn new pieces (extendable: "
                                                   "WordPiece, BPE, Unigram)")):
        extend_tokenizer(fast, GERMAN, 10, source="--model_name_or_path words")
