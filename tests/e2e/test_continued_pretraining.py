"""Continued (domain-adaptive) pretraining: ``mlm-suite pretrain --model_name_or_path`` (issue 13 §1).

The checkpoints are tiny random models on the MiniLM (bert-base-uncased) vocabulary, saved with its
tokenizer: a headless HF ``BertModel`` (the shape of all-MiniLM-L6-v2, which ships without an MLM head)
and an mlm_suite ``MlmSuiteForMaskedLM``; and native masked-LM folders of the other families mlm_suite converts
(RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA's generator, ModernBERT) with a byte-level BPE tokenizer (issue 47).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertConfig, BertModel

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM, MlmSuiteForPreTraining, convert_checkpoint
from mlm_suite.conversion import REGISTRY
from mlm_suite.jobs.common.model_loading import mlm_suite_checkpoint
from mlm_suite.jobs.pretrain import build_config, build_model, main, plan_run
from mlm_suite.training.pretraining import evaluation_collator
from mlm_suite.cards.rendering import table_cell
from mlm_suite.data.inputs import downloads
from tests.helpers import (
    job_args, make_documents, make_native_model, read_json, roberta_tokenizer, run_cli, train_byte_level_bpe, write_text,
)  # fmt: skip

NEW_MLM_HEAD = ["lm_head.decoder.bias", "lm_head.dense.bias", "lm_head.dense.weight", "lm_head.norm.bias", "lm_head.norm.weight"]
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)


@pytest.fixture(scope="module")
def headless_bert(tmp_path_factory, tokenizer) -> Path:
    """A randomly initialised HF ``BertModel`` (pooler, no heads) with the MiniLM tokenizer."""
    folder = tmp_path_factory.mktemp("headless_bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **SIZES)
    BertModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def mlm_checkpoint(tmp_path_factory, tokenizer) -> Path:
    """A randomly initialised ``MlmSuiteForMaskedLM`` (pre-norm, rotary: the job's recipe) with the MiniLM tokenizer."""
    folder = tmp_path_factory.mktemp("mlm_checkpoint")
    torch.manual_seed(0)
    config = MlmSuiteConfig(
        vocab_size=len(tokenizer), norm_position="pre", position_embedding_type="rotary",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **SIZES,
    )  # fmt: skip
    MlmSuiteForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_text(tmp_path_factory.mktemp("corpus") / "train.txt", make_documents(30, seed=3))


def load_for_pretraining(path: Path, tokenizer, objective: str = "mlm"):
    plan = plan_run(["--output_dir", "unused", "--model_name_or_path", str(path), "--objective", objective])
    assert plan.model_source == mlm_suite_checkpoint(str(path))  # converted once, by the plan
    return build_model(plan, build_config(plan, tokenizer)[0])


def continued_args(output_dir: Path, checkpoint: Path, corpus: Path, *extra: str) -> list[str]:
    """The shared test flags without the tiny-model ``--config_overrides`` (the checkpoint has its own sizes)."""
    argv = job_args(
        output_dir, "--model_name_or_path", str(checkpoint), "--train_file", str(corpus),
        "--validation_split_percentage", "20", "--fill_mask_probes", "2", "--eval_steps", "100", *extra,
    )  # fmt: skip
    at = argv.index("--config_overrides")
    return argv[:at] + argv[at + 2 :]


def test_headless_bert_gets_exactly_a_new_tied_mlm_head(headless_bert, tokenizer, random_batch):
    model, new_weights = load_for_pretraining(headless_bert, tokenizer)
    assert new_weights == NEW_MLM_HEAD
    assert model.lm_head.decoder.weight is model.encoder.embeddings.word_embeddings.weight
    # The new head is initialised as BERT initialises it.
    assert model.lm_head.dense.weight.std().item() == pytest.approx(model.config.initializer_range, rel=0.1)
    assert torch.equal(model.lm_head.decoder.bias, torch.zeros_like(model.lm_head.decoder.bias))
    assert torch.equal(model.lm_head.norm.weight, torch.ones_like(model.lm_head.norm.weight))
    # The encoder is the BERT checkpoint's, converted exactly.
    bert = BertModel.from_pretrained(headless_bert).eval()
    batch = random_batch(vocab_size=len(tokenizer))
    expected = bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    hidden = model.eval().encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    real = batch["attention_mask"].bool()
    assert torch.allclose(hidden[real], expected[real], atol=1e-5)


def test_mlm_nsp_from_headless_bert_adds_the_nsp_head_too(headless_bert, tokenizer):
    model, new_weights = load_for_pretraining(headless_bert, tokenizer, "mlm_nsp")
    assert isinstance(model, MlmSuiteForPreTraining)
    assert new_weights == sorted([*NEW_MLM_HEAD, "nsp_head.bias", "nsp_head.weight"])


def test_mlm_suite_checkpoint_continues_unchanged(mlm_checkpoint, tokenizer, corpus, tmp_path):
    model, new_weights = load_for_pretraining(mlm_checkpoint, tokenizer)
    assert new_weights == []
    saved = MlmSuiteForMaskedLM.from_pretrained(mlm_checkpoint).eval()
    assert all(torch.equal(value, saved.state_dict()[name]) for name, value in model.state_dict().items())
    # Same loss as the checkpoint on the same masked rows.
    rows = [tokenizer(text, return_special_tokens_mask=True) for text in make_documents(4, seed=5)]
    features = [{**row, "example_index": index} for index, row in enumerate(rows)]
    batch = evaluation_collator(tokenizer)(features)
    assert model.eval()(**batch).loss.item() == saved(**batch).loss.item()

    # A run whose one step has learning rate 0 writes the checkpoint's weights back unchanged.
    output_dir = tmp_path / "unchanged"
    assert main(continued_args(output_dir, mlm_checkpoint, corpus, "--max_steps", "1", "--learning_rate", "0")) == 0
    before, after = load_file(mlm_checkpoint / "model.safetensors"), load_file(output_dir / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[name], after[name]) for name in before)
    assert "continued from" in (output_dir / "README.md").read_text(encoding="utf-8")


def test_head_warmup_freezes_the_encoder_then_trains_everything(mlm_checkpoint, corpus, tmp_path):
    before = load_file(mlm_checkpoint / "model.safetensors")
    encoder = [name for name in before if name.startswith("encoder.")]
    head = [name for name in before if name.startswith("lm_head.")]
    warm = tmp_path / "warm"
    assert main(continued_args(warm, mlm_checkpoint, corpus, "--max_steps", "2", "--head_warmup_steps", "2")) == 0
    during = load_file(warm / "model.safetensors")
    assert all(torch.equal(before[name], during[name]) for name in encoder)  # word embeddings (tied decoder) too
    assert any(not torch.equal(before[name], during[name]) for name in head)
    assert "2 steps with the encoder frozen" in (warm / "README.md").read_text(encoding="utf-8")

    then = tmp_path / "then"
    assert main(continued_args(then, mlm_checkpoint, corpus, "--max_steps", "3", "--head_warmup_steps", "2")) == 0
    after = load_file(then / "model.safetensors")
    changed = [name for name in encoder if not torch.equal(before[name], after[name])]
    assert len(changed) == len(encoder)


def test_bert_folder_is_continued_end_to_end(headless_bert, corpus, tmp_path, capfd):
    output_dir = tmp_path / "from_bert"
    assert main(continued_args(output_dir, headless_bert, corpus, "--max_steps", "2")) == 0
    logged = capfd.readouterr().err
    assert f"continuing {headless_bert}: new MlmSuiteForMaskedLM weights, initialised as BERT's: " in logged
    assert all(name in logged for name in NEW_MLM_HEAD)
    assert len(AutoTokenizer.from_pretrained(output_dir)) == len(AutoTokenizer.from_pretrained(headless_bert))
    assert isinstance(MlmSuiteForMaskedLM.from_pretrained(output_dir), MlmSuiteForMaskedLM)
    # The checkpoint's own configuration carries over: a converted BERT keeps its [CLS] pooling.
    assert MlmSuiteConfig.from_pretrained(output_dir).classifier_pooling == "cls"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--vocab_size", "100"], "own vocabulary"),
        (["--train_tokenizer", "true"], "own vocabulary"),
        (["--head_warmup_steps", "-1"], "must not be negative"),
    ],
)
def test_bad_continuation_flags_fail_before_writing(mlm_checkpoint, corpus, tmp_path, extra, message):
    output_dir = tmp_path / "out"
    with pytest.raises(ValueError, match=message):
        main(continued_args(output_dir, mlm_checkpoint, corpus, "--max_steps", "1", *extra))
    assert not output_dir.exists()


def test_head_warmup_needs_a_checkpoint(corpus, tmp_path):
    output_dir = tmp_path / "out"
    with pytest.raises(ValueError, match="needs --model_name_or_path"):
        main(job_args(output_dir, "--train_file", str(corpus), "--max_steps", "1", "--head_warmup_steps", "2"))
    assert not output_dir.exists()


@pytest.fixture(scope="module")
def byte_level_bpe(corpus):
    return train_byte_level_bpe(corpus.read_text(encoding="utf-8").splitlines())


def native_masked_lm(family: str, tokenizer, folder: Path) -> Path:
    """A random masked-LM folder of transformers' own class for ``family``, with ``tokenizer`` and 64 positions."""
    offset = tokenizer.pad_token_id + 1 if "roberta" in family else 0  # RoBERTa's positions start after the pad
    make_native_model(family, "ForMaskedLM", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                 max_position_embeddings=64 + offset).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("family", [family.model_types[0] for family in REGISTRY[1:]])  # BERT's: the other tests
def test_a_native_folder_of_another_family_continues_from_its_converted_weights(family, byte_level_bpe, corpus,
                                                                                 tmp_path, capsys):
    """``--model_name_or_path`` a native masked-LM folder: converted on the fly, it trains with its BPE tokenizer
    (``<mask>``, ``<s>``/``</s>``, no token types); a step at learning rate 0 writes back exactly the converted
    weights, and a whole-word-masked run of two steps learns."""
    source = native_masked_lm(family, byte_level_bpe, tmp_path / "native")
    converted = convert_checkpoint(source, tmp_path / "converted")
    output_dir = tmp_path / "unchanged"
    assert main(continued_args(output_dir, source, corpus, "--max_steps", "1", "--learning_rate", "0")) == 0
    name = {"xlm-roberta": "XLM-RoBERTa", "distilbert": "DistilBERT", "electra": "ELECTRA",
            "modernbert": "ModernBERT"}.get(family, "RoBERTa")
    assert f"converting the {name} checkpoint {source} to mlm_suite" in capsys.readouterr().err
    before, after = load_file(converted / "model.safetensors"), load_file(output_dir / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[key], after[key]) for key in before)
    assert AutoTokenizer.from_pretrained(output_dir).mask_token == "<mask>"

    trained = tmp_path / "trained"
    assert main(continued_args(trained, source, corpus, "--max_steps", "2", "--masking", "whole_word")) == 0
    after = load_file(trained / "model.safetensors")
    assert not torch.equal(before["encoder.layers.0.ffn.up.weight"], after["encoder.layers.0.ffn.up.weight"])


def test_a_roberta_folder_s_card_and_probe_write_its_mask_token_and_show_words(tmp_path, capsys):
    """``mlm-suite pretrain`` continuing a ``RobertaForMaskedLM`` folder saved with transformers' ``RobertaTokenizer``:
    the card's snippet and the fill-mask probe (its JSON, the card's table, the printed lines) write ``<mask>``, and
    the predictions and the baseline token are shown as words, never as "Ġ" pieces."""
    reviews = [text for _, text in downloads.pang_lee_reviews()[:100]]
    tokenizer = roberta_tokenizer(reviews)
    source = native_masked_lm("roberta", tokenizer, tmp_path / "native")
    output_dir = tmp_path / "out"
    argv = continued_args(output_dir, source, write_text(tmp_path / "reviews.txt", reviews), "--max_steps", "2",
                          "--max_seq_length", "64")
    status, printed, _ = run_cli(["pretrain", *argv], capsys)
    assert status == 0

    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert 'print(fill_mask("the movie was <mask> ."))' in card
    assert "`[MASK]` stands for this tokenizer's mask token, `<mask>`." in card
    probe = read_json(output_dir / "fill_mask_probe.json")
    assert len(probe) == 2
    for item in probe:
        assert item["sentence"].count("<mask>") == 1 and "[MASK]" not in item["sentence"]
        assert all(prediction and not any(marker in prediction for marker in "ĠĊ▁") for prediction in item["predictions"])
        shown = ", ".join(item["predictions"])
        assert f"| {table_cell(item['sentence'])} | {item['answer']} | {table_cell(shown)} |" in card
        assert f"  {item['sentence']}\n      {item['answer']} -> {shown}" in printed
    baseline = re.search(r"\(always '(.+?)', the most frequent training token\)", printed).group(1)
    assert baseline and not any(marker in baseline for marker in "ĠĊ▁")
    assert f"The baseline predicts the most frequent training token, `{baseline}`, at every `[MASK]`." in card
