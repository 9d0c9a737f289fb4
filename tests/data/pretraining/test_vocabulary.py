"""WordPiece tokenizer training and XLM-R style multilingual sampling."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest
from transformers import AutoTokenizer

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining import vocabulary
from mlm_suite.data.pretraining.vocabulary import train_wordpiece_tokenizer
from tests.helpers import polarity_texts

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _review_texts() -> list[str]:
    return [text for _, text in downloads.pang_lee_reviews()]


@pytest.fixture(scope="module")
def trained():
    start = time.perf_counter()
    tokenizer = train_wordpiece_tokenizer(_review_texts(), vocab_size=2000)
    return tokenizer, time.perf_counter() - start


def _words(tokenizer, text: str) -> list[str]:
    backend = tokenizer.backend_tokenizer
    return [word for word, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))]


def test_trains_fast_with_the_requested_vocab(trained):
    tokenizer, seconds = trained
    assert seconds < 20
    assert len(tokenizer) == 2000
    assert any(token.startswith("##") for token in tokenizer.get_vocab())


def test_special_tokens_have_ids_0_to_4(trained):
    tokenizer, _ = trained
    assert tokenizer.convert_ids_to_tokens(list(range(5))) == SPECIALS
    roles = [tokenizer.pad_token, tokenizer.unk_token, tokenizer.cls_token, tokenizer.sep_token, tokenizer.mask_token]
    assert roles == SPECIALS
    assert [tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.mask_token_id] == [0, 1, 4]


def test_training_numbers_the_vocabulary_the_same_way_every_time():
    """The trainer's continuing-subword alphabet comes out in hash-set order; ids must not follow it,
    or a seeded model would start from different embeddings in every run."""
    texts = _review_texts()[:300]
    vocabularies = [train_wordpiece_tokenizer(texts, vocab_size=600).get_vocab() for _ in range(4)]
    assert all(vocabulary == vocabularies[0] for vocabulary in vocabularies[1:])


def test_encode_decode_round_trip(trained):
    tokenizer, _ = trained
    for text in _review_texts()[:20]:
        ids = tokenizer(text)["input_ids"]
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids, skip_special_tokens=True) == " ".join(_words(tokenizer, text))
    # Lowercasing is part of the normalizer; already lowercased text comes back unchanged.
    assert tokenizer.decode(tokenizer("The MOVIE was Great")["input_ids"], skip_special_tokens=True) == (
        "the movie was great"
    )


def test_pair_encoding_has_segments(trained):
    tokenizer, _ = trained
    first, second = "the film is long .", "but worth it ."
    encoded = tokenizer(first, second)
    a = tokenizer(first, add_special_tokens=False)["input_ids"]
    b = tokenizer(second, add_special_tokens=False)["input_ids"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert encoded["input_ids"] == [cls, *a, sep, *b, sep]
    assert encoded["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    assert tokenizer(first)["token_type_ids"] == [0] * (len(a) + 2)


def test_save_and_reload_offline(trained, tmp_path):
    tokenizer, _ = trained
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    text, pair = _review_texts()[5][:400], "a second segment ."
    assert reloaded(text, pair) == tokenizer(text, pair)
    assert reloaded.get_vocab() == tokenizer.get_vocab()
    assert reloaded.model_max_length == 512
    assert reloaded.mask_token == "[MASK]" and reloaded.pad_token_id == 0
    assert reloaded.decode(reloaded(text)["input_ids"], skip_special_tokens=True) == " ".join(_words(tokenizer, text))


def test_files_and_iterators_are_accepted(tmp_path):
    texts = _review_texts()[:300]
    files = []
    for index in range(3):
        path = tmp_path / f"part{index}.txt"
        path.write_text("\n".join(texts[index::3]), encoding="utf-8")
        files.append(path)
    from_paths = train_wordpiece_tokenizer(files, vocab_size=800)
    from_strings = train_wordpiece_tokenizer([str(path) for path in files], vocab_size=800)
    from_generator = train_wordpiece_tokenizer((text for text in texts), vocab_size=800)
    assert len(from_paths) == len(from_strings) == len(from_generator) == 800
    # Trained on the same words, the three agree on most of the vocabulary.
    vocabularies = [set(t.get_vocab()) for t in (from_paths, from_strings, from_generator)]
    assert len(vocabularies[0] & vocabularies[1] & vocabularies[2]) > 0.95 * 800
    # A path read as a text would give a vocabulary of file-name pieces.
    assert "movie" in vocabularies[0] and "movie" in vocabularies[1]


def test_accents_follow_bert_rule_unless_kept():
    german = polarity_texts("polarity-de-amazon.csv")[:300]
    stripped = train_wordpiece_tokenizer(german, vocab_size=1500)
    kept = train_wordpiece_tokenizer(german, vocab_size=1500, strip_accents=False)
    assert "ü" not in stripped.get_vocab() and "u" in stripped.get_vocab()
    assert "ü" in kept.get_vocab()
    assert kept.decode(kept("Größe")["input_ids"], skip_special_tokens=True) == "größe"


def test_custom_special_tokens_and_errors():
    texts = _review_texts()[:50]
    tokenizer = train_wordpiece_tokenizer(
        texts, vocab_size=500, special_tokens=["<pad>", "<unk>", "<s>", "</s>", "<mask>", "<extra>"]
    )
    assert tokenizer.convert_ids_to_tokens(list(range(6))) == ["<pad>", "<unk>", "<s>", "</s>", "<mask>", "<extra>"]
    assert tokenizer.cls_token == "<s>" and tokenizer.mask_token == "<mask>"
    assert tokenizer.tokenize("a <extra> b") == ["a", "<extra>", "b"]
    with pytest.raises(ValueError, match="at least the pad, unk, cls, sep and mask"):
        train_wordpiece_tokenizer(texts, special_tokens=["[PAD]", "[UNK]"])
    with pytest.raises(ValueError, match="distinct"):
        train_wordpiece_tokenizer(texts, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[SEP]"])
    with pytest.raises(ValueError, match="not one string"):
        train_wordpiece_tokenizer("just one text", vocab_size=100)


@pytest.mark.multiprocess
@pytest.mark.slow  # two interpreters importing transformers: over 40 s at the lowest versions
def test_a_small_corpus_gives_the_same_vocabulary_in_every_process(tmp_path):
    """Ties between equally frequent pairs, common on a small corpus, must not be broken by a process's hash seed:
    separate interpreters train the same vocabulary (the module is loaded from its file, without torch)."""
    rng = random.Random(1)
    words = "the film story actor scene music plot director camera audience character ending dialogue".split()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(" ".join(rng.choices(words, k=rng.randint(4, 8))).capitalize() + ".\n" for _ in range(90)),
                      encoding="utf-8")
    script = (
        "import importlib.util, json, sys\n"
        "spec = importlib.util.spec_from_file_location('vocabulary', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "texts = open(sys.argv[2], encoding='utf-8').read().splitlines()\n"
        "print(json.dumps(module.train_wordpiece_tokenizer(texts, vocab_size=200).get_vocab(), sort_keys=True))\n"
    )
    command = [sys.executable, "-c", script, vocabulary.__file__, str(corpus)]
    vocabularies = [
        subprocess.run(command, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")  # two hash seeds for certain, where unset ones would differ only by chance
    ]
    assert len(set(vocabularies)) == 1
    assert len(json.loads(vocabularies[0])) > 50


@pytest.mark.slow  # over 10 s on 2 cores
def test_the_vocabulary_is_the_one_tokenizers_trainer_learns_up_to_ties():
    """Against ``tokenizers``' own WordPiece trainer on the same pipeline: the learnt pieces differ only where that
    trainer breaks ties between equally frequent pairs in hash order (well under 1 % of a 2000-token vocabulary)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    texts = _review_texts()[:2000]
    ours = set(train_wordpiece_tokenizer(texts, vocab_size=2000).get_vocab())
    reference = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    reference.normalizer = normalizers.BertNormalizer(lowercase=True)
    reference.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    reference.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=2000, min_frequency=2, special_tokens=SPECIALS, limit_alphabet=1000, continuing_subword_prefix="##",
        show_progress=False,
    ))
    theirs = set(reference.get_vocab())
    assert len(ours) == len(theirs) == 2000
    assert len(ours ^ theirs) <= 2 * 20, sorted(ours ^ theirs)


# ------------------------------------------------------------------------------------------------
# Unigram (SentencePiece-style) vocabularies
# ------------------------------------------------------------------------------------------------
KANA_WORDS = ["ねこ", "いぬ", "とり", "さかな", "たべる", "はしる", "みる", "あおい", "しろい", "ちいさい"]


def _unspaced_sentences(count: int, seed: int = 0) -> list[str]:
    """Sentences of kana words written without spaces between them, as Japanese is."""
    rng = random.Random(seed)
    return ["".join(rng.choices(KANA_WORDS, k=rng.randint(3, 7))) + "。" for _ in range(count)]


def test_unigram_learns_the_words_of_text_written_without_spaces():
    """A whitespace WordPiece sees each sentence as one word and keeps it whole or in characters; a Unigram
    vocabulary learns the words inside it."""
    unigram = vocabulary.train_unigram_tokenizer(_unspaced_sentences(400), vocab_size=60)
    sentence = "しろいねこがはしる。".replace("が", "")
    pieces = unigram.tokenize(sentence)
    assert "".join(pieces).replace("▁", "") == sentence
    assert {"しろい", "ねこ", "はしる"} <= {piece.lstrip("▁") for piece in pieces}
    wordpiece = train_wordpiece_tokenizer(_unspaced_sentences(400), vocab_size=60)
    assert len(wordpiece.tokenize(sentence)) > len(pieces)
    # Cased, accents kept; a word (for whole-word masking) is a run between spaces and punctuation.
    cased = vocabulary.train_unigram_tokenizer(["Élan vital, Über alles."] * 50, vocab_size=40)
    assert "".join(cased.tokenize("Élan")).replace("▁", "") == "Élan"
    encoding = cased("Élan vital, Über")
    assert len({word for word in encoding.word_ids() if word is not None}) == 4  # Élan, vital, ",", Über


@pytest.mark.multiprocess
def test_unigram_vocabularies_are_the_same_in_every_process():
    """tokenizers' Unigram trainer sums log-probabilities on threads in varying order, and adds the characters it
    must keep in hash-set order; the vocabulary must not vary: a process on one thread learns what this one does."""
    script = (
        "from mlm_suite.data.pretraining.vocabulary import train_unigram_tokenizer\n"
        "from mlm_suite.data.inputs import downloads\n"
        "texts = [text for _, text in downloads.pang_lee_reviews()][:200]\n"
        "print(train_unigram_tokenizer(texts, vocab_size=1500).backend_tokenizer.to_str())\n"
    )
    environment = {**os.environ, "RAYON_NUM_THREADS": "1", "PYTHONHASHSEED": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment)
    assert done.returncode == 0, done.stderr[-2000:]
    texts = [text for _, text in downloads.pang_lee_reviews()][:200]
    assert done.stdout.strip() == vocabulary.train_unigram_tokenizer(texts, vocab_size=1500).backend_tokenizer.to_str()
