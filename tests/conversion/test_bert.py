"""``convert_checkpoint`` on BERT folders: randomly initialised HF BERT checkpoints (BertModel, BertForMaskedLM,
BertForPreTraining; with and without the ``bert.`` prefix; safetensors, ``pytorch_model.bin`` and
HF's own ``save_pretrained``) convert to mlm_suite folders whose hidden states (every layer),
pooler, MLM and NSP logits match HF's; every fine-tuned head (NSP, sequence classification with each
``problem_type``, token classification, QA) converts with its labels and gives BERT's logits and loss;
a sentence-transformers folder's pooling is carried into the config; the real MiniLM-L6 weights and
tokenizer too, and the jobs' default start (MiniLM converted once into the cache); and the conversion errors, in the
library and through ``mlm-suite convert``.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import (
    AutoModel,
    AutoTokenizer,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)

import mlm_suite
from tests.helpers import (
    assert_one_line_error,
    label_maps,
    make_random_batch,
    make_tiny_bert_config,
    make_tiny_config,
    printed_lines,
    run_cli,
)
from mlm_suite import MlmSuiteForMaskedLM, MlmSuiteForPreTraining, MlmSuiteModel, convert_checkpoint
from mlm_suite.conversion.bert import convert_bert_state_dict
from mlm_suite.conversion import CONVERTED_MINILM_FOLDER, converted_minilm_dir
from mlm_suite.errors import UsageError
from mlm_suite.model import (
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPreTrainingOutput,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
)

KINDS = {
    # kind: (HF class, HF kwargs, expected mlm_suite class, has pooler)
    "BertModel": (BertModel, {}, MlmSuiteModel, True),
    "BertModel-nopool": (BertModel, {"add_pooling_layer": False}, MlmSuiteModel, False),
    "BertForMaskedLM": (BertForMaskedLM, {}, MlmSuiteForMaskedLM, False),
    "BertForPreTraining": (BertForPreTraining, {}, MlmSuiteForPreTraining, True),
}


def random_bert(kind: str, seed: int = 0):
    cls, kwargs, _, _ = KINDS[kind]
    torch.manual_seed(seed)
    model = cls(make_tiny_bert_config(), **kwargs).eval()
    with torch.no_grad():  # move LayerNorms and biases off 1/0 so a mix-up would show
        for name, param in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                param.add_(0.1 * torch.randn_like(param))
    return model


def write_checkpoint(model, folder, fmt: str, prefix: bool) -> None:
    """Write ``model`` as a BERT folder: HF's ``save_pretrained`` ("native"), or a hand-written
    ``model.safetensors`` / ``pytorch_model.bin`` with or without the ``bert.`` prefix."""
    if fmt == "native":
        model.save_pretrained(folder)
        return
    model.config.save_pretrained(folder)
    state = {}
    for name, tensor in model.state_dict().items():
        bare = name.removeprefix("bert.")
        is_encoder = not bare.startswith("cls.")
        state[f"bert.{bare}" if prefix and is_encoder else bare] = tensor.detach().clone().contiguous()
    if fmt == "safetensors":
        save_file(state, str(folder / "model.safetensors"))
    else:
        torch.save(state, folder / "pytorch_model.bin")


def hf_outputs(model, batch):
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    result = {f"hidden_{i}": h for i, h in enumerate(out.hidden_states)}
    if isinstance(model, BertModel):
        if model.pooler is not None:
            result["pooler"] = out.pooler_output
    elif isinstance(model, BertForMaskedLM):
        result["mlm"] = out.logits
    else:
        result["mlm"], result["nsp"] = out.prediction_logits, out.seq_relationship_logits
    return result


def ours_outputs(model, batch):
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    result = {f"hidden_{i}": h for i, h in enumerate(out.hidden_states)}
    if isinstance(model, MlmSuiteModel):
        if model.pooler is not None:
            result["pooler"] = out.pooler_output
    elif isinstance(model, MlmSuiteForMaskedLM):
        result["mlm"] = out.logits
    else:
        result["mlm"], result["nsp"] = out.prediction_logits, out.seq_relationship_logits
    return result


def assert_outputs_match(ours, theirs, real, atol=1e-4):
    assert ours.keys() == theirs.keys()
    for name in theirs:
        a, b = ours[name], theirs[name]
        if a.dim() == 3:  # (batch, seq, ...): compare real tokens only
            a, b = a[real], b[real]
        torch.testing.assert_close(a, b, atol=atol, rtol=0, msg=name)


def load_converted(dst, kind):
    _, _, expected_cls, has_pooler = KINDS[kind]
    config = json.loads((dst / "config.json").read_text())
    assert config["architectures"] == [expected_cls.__name__]
    assert config["model_type"] == "mlm_suite"
    kwargs = {"add_pooling_layer": has_pooler} if expected_cls is MlmSuiteModel else {}
    model = expected_cls.from_pretrained(dst, **kwargs).eval()
    return model


CASES = (
    [(kind, "native", None) for kind in KINDS]
    + [
        (kind, fmt, prefix)
        for kind in ("BertModel", "BertForPreTraining")
        for fmt in ("safetensors", "bin")
        for prefix in (True, False)
    ]
    + [("BertForMaskedLM", "safetensors", False), ("BertForMaskedLM", "bin", True)]
)


@pytest.mark.parametrize("kind, fmt, prefix", CASES)
def test_converted_checkpoint_matches_hf(kind, fmt, prefix, tmp_path):
    bert = random_bert(kind)
    src, dst = tmp_path / "bert", tmp_path / "converted"
    src.mkdir()
    write_checkpoint(bert, src, fmt, prefix)
    assert convert_checkpoint(src, dst) == dst
    assert (dst / "model.safetensors").exists()
    model = load_converted(dst, kind)
    batch = make_random_batch(lengths=(7, 4, 9, 2), seq_len=10, seed=2)
    theirs, ours = hf_outputs(bert, batch), ours_outputs(model, batch)
    assert len([k for k in ours if k.startswith("hidden_")]) == bert.config.num_hidden_layers + 1
    assert ("pooler" in ours) == (kind == "BertModel")
    assert_outputs_match(ours, theirs, batch["attention_mask"].bool())


def test_converted_masked_lm_is_tied(tmp_path):
    bert = random_bert("BertForPreTraining")
    write_checkpoint(bert, tmp_path, "native", None)
    model = load_converted(convert_checkpoint(tmp_path, tmp_path / "out"), "BertForPreTraining")
    assert model.lm_head.decoder.weight.data_ptr() == model.encoder.embeddings.word_embeddings.weight.data_ptr()
    torch.testing.assert_close(model.lm_head.decoder.weight, bert.cls.predictions.decoder.weight)


def test_legacy_gamma_beta_layernorm_names(tmp_path):
    bert = random_bert("BertModel")
    bert.config.save_pretrained(tmp_path)
    state = {}
    for name, tensor in bert.state_dict().items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        state[name] = tensor.clone().contiguous()
    save_file(state, str(tmp_path / "model.safetensors"))
    model = load_converted(convert_checkpoint(tmp_path, tmp_path / "out"), "BertModel")
    batch = make_random_batch(seed=5)
    assert_outputs_match(ours_outputs(model, batch), hf_outputs(bert, batch), batch["attention_mask"].bool())


def mean_of_real_tokens(states, attention_mask):
    weights = attention_mask[..., None].to(states.dtype)
    return (states * weights).sum(1) / weights.sum(1)


def test_real_minilm_conversion(minilm_dir, tmp_path):
    dst = convert_checkpoint(minilm_dir, tmp_path / "minilm")
    for filename in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (dst / filename).read_bytes() == (minilm_dir / filename).read_bytes()
    tokenizer = AutoTokenizer.from_pretrained(dst)
    first = ["A man is eating a piece of bread.", "The bank raised its interest rates again this spring.", "Hi"]
    second = ["Someone eats.", "Rates went up.", "Hello there, how are you doing today?"]
    batch = tokenizer(first, second, padding=True, return_tensors="pt")
    assert batch["token_type_ids"].max() == 1 and (batch["attention_mask"] == 0).any()
    reference = tokenizer.from_pretrained(minilm_dir)(first, second, padding=True, return_tensors="pt")
    torch.testing.assert_close(batch["input_ids"], reference["input_ids"])

    bert = BertModel.from_pretrained(minilm_dir).eval()
    ours_model = AutoModel.from_pretrained(dst).eval()  # registered by `import mlm_suite`
    assert type(ours_model) is mlm_suite.MlmSuiteModel and ours_model.pooler is not None
    inputs = dict(batch)
    theirs, ours = hf_outputs(bert, inputs), ours_outputs(ours_model, inputs)
    assert len(theirs) == 6 + 1 + 1
    # all-MiniLM-L6-v2 was trained as a sentence-transformers model: mean pooling, then L2 normalisation. The pooler
    # (BERT's dense + tanh) reads the mean of the real tokens, not [CLS].
    config = json.loads((dst / "config.json").read_text())
    assert (config["classifier_pooling"], config["sentence_pooling"], config["normalize_embeddings"]) == ("mean", "mean", True)
    with torch.no_grad():
        mean = mean_of_real_tokens(theirs["hidden_6"], batch["attention_mask"])
        theirs["pooler"] = torch.tanh(bert.pooler.dense(mean))
        embeddings = MlmSuiteForSentenceEmbedding.from_pretrained(dst).eval()(**inputs).embeddings
    assert_outputs_match(ours, theirs, batch["attention_mask"].bool())
    torch.testing.assert_close(embeddings, F.normalize(mean, dim=-1), atol=1e-5, rtol=0)


def test_the_default_fine_tuning_start_keeps_the_mean_pooling_minilm_was_trained_for():
    """Chosen on validation by benchmarks/bench_default_pooling.py; a cache converted under the earlier [CLS] rule
    sits in another folder and is not reused (the damaged-cache and concurrency paths: tests/e2e/test_hostile_files.py).
    """
    folder = converted_minilm_dir()
    assert folder.name == CONVERTED_MINILM_FOLDER != "minilm-l6-mlm_suite"
    config = json.loads((folder / "config.json").read_text())
    assert (config["classifier_pooling"], config["sentence_pooling"], config["normalize_embeddings"]) == ("mean", "mean", True)


# ------------------------------------------------------------------------------------------------
# Fine-tuned heads
# ------------------------------------------------------------------------------------------------
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
HEADS = {
    # case: (BERT class, BERT config overrides, mlm_suite class, name of the logits compared)
    "next_sentence": (BertForNextSentencePrediction, {}, MlmSuiteForNextSentencePrediction, "logits"),
    "single_label": (
        BertForSequenceClassification,
        {"problem_type": "single_label_classification", **label_maps(["negative", "neutral", "positive"])},
        MlmSuiteForSequenceClassification,
        "logits",
    ),
    "regression": (
        BertForSequenceClassification,
        {"problem_type": "regression", **label_maps(["score"])},
        MlmSuiteForSequenceClassification,
        "logits",
    ),
    "multi_label": (
        BertForSequenceClassification,
        {"problem_type": "multi_label_classification", **label_maps(["sports", "politics", "science", "arts"])},
        MlmSuiteForSequenceClassification,
        "logits",
    ),
    "token": (BertForTokenClassification, label_maps(TAGS), MlmSuiteForTokenClassification, "logits"),
    "question_answering": (BertForQuestionAnswering, {}, MlmSuiteForQuestionAnswering, "start_logits"),
}


def random_head(case: str, seed: int = 0):
    bert_class, overrides, _, _ = HEADS[case]
    torch.manual_seed(seed)
    model = bert_class(make_tiny_bert_config(**overrides)).eval()
    with torch.no_grad():  # move LayerNorms and biases off 1/0 so a mix-up would show
        for name, param in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                param.add_(0.1 * torch.randn_like(param))
    return model


def head_labels(case: str, batch: dict, num_labels: int) -> dict:
    generator = torch.Generator().manual_seed(11)
    rows, seq_len = batch["input_ids"].shape
    if case in ("next_sentence", "single_label"):
        return {"labels": torch.randint(0, num_labels, (rows,), generator=generator)}
    if case == "regression":
        return {"labels": torch.randn(rows, generator=generator)}
    if case == "multi_label":
        return {"labels": torch.randint(0, 2, (rows, num_labels), generator=generator).float()}
    if case == "token":
        labels = torch.randint(0, num_labels, (rows, seq_len), generator=generator)
        return {"labels": labels.masked_fill(batch["attention_mask"] == 0, -100)}
    start = torch.randint(0, seq_len, (rows,), generator=generator)
    return {"start_positions": start, "end_positions": (start + 2).clamp(max=seq_len - 1)}


@pytest.mark.parametrize("case", sorted(HEADS))
def test_fine_tuned_heads_convert_whole(case, tmp_path):
    """Each BertFor* head folder converts to its mlm_suite head: the same logits (real tokens, padded batch) and loss
    to 1e-5, its id2label / label2id / problem_type, and the mlm_suite class in ``architectures``."""
    bert = random_head(case)
    bert.save_pretrained(tmp_path / "bert")
    _, _, ours_class, logits_name = HEADS[case]
    dst = convert_checkpoint(tmp_path / "bert", tmp_path / "ours")
    config = json.loads((dst / "config.json").read_text())
    assert config["architectures"] == [ours_class.__name__]
    assert config.get("problem_type") == bert.config.problem_type
    ours = ours_class.from_pretrained(dst).eval()
    assert ours.config.id2label == bert.config.id2label and ours.config.label2id == bert.config.label2id

    batch = make_random_batch(lengths=(9, 4, 7, 2), seed=3)
    with torch.no_grad():
        theirs, mine = bert(**batch), ours(**batch)
    real = batch["attention_mask"].bool()
    for name in (logits_name, "end_logits") if case == "question_answering" else (logits_name,):
        expected, got = theirs[name], mine[name]
        if expected.shape[:2] == real.shape:  # per token: pads hold no prediction
            expected, got = expected[real], got[real]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0, msg=name)

    # BERT's QA softmax runs over pad positions too: compare its loss on a batch without padding.
    loss_batch = make_random_batch(lengths=(8, 8, 8, 8), seed=4) if case == "question_answering" else batch
    labels = head_labels(case, loss_batch, bert.config.num_labels)
    with torch.no_grad():
        expected_loss, loss = bert(**loss_batch, **labels).loss, ours(**loss_batch, **labels).loss
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-5)


def test_auto_class_loads_the_converted_head(tmp_path):
    """``AutoModelForSequenceClassification`` on the converted folder is the converted head, labels included."""
    from transformers import AutoModelForSequenceClassification

    bert = random_head("single_label")
    bert.save_pretrained(tmp_path / "bert")
    model = AutoModelForSequenceClassification.from_pretrained(convert_checkpoint(tmp_path / "bert", tmp_path / "ours"))
    assert type(model) is MlmSuiteForSequenceClassification
    assert model.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
    torch.testing.assert_close(model.classifier.weight, bert.classifier.weight)


def write_state(folder, config, state):
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    save_file({name: tensor.detach().clone().contiguous() for name, tensor in state.items()}, str(folder / "model.safetensors"))


def test_pooler_the_head_does_not_use_is_dropped_with_a_line(tmp_path, capsys):
    """A masked-LM folder that also holds BERT's pooler (as bert-base-uncased's BertForPreTraining weights without
    NSP): the pooler is left out, and a line on stderr says so."""
    bert = random_bert("BertForPreTraining")
    state = {name: tensor for name, tensor in bert.state_dict().items() if not name.startswith("cls.seq_relationship.")}
    bert.config.architectures = ["BertForMaskedLM"]
    write_state(tmp_path / "bert", bert.config, state)
    dst = convert_checkpoint(tmp_path / "bert", tmp_path / "ours")
    lines = printed_lines(capsys.readouterr().err)
    assert lines == [
        f"mlm_suite: converting {tmp_path / 'bert'}: BERT's pooler (pooler.dense.bias, pooler.dense.weight) dropped: "
        "MlmSuiteForMaskedLM does not use one"
    ]
    assert json.loads((dst / "config.json").read_text())["architectures"] == ["MlmSuiteForMaskedLM"]


def test_masked_lm_with_its_nsp_head_keeps_both(tmp_path):
    """Weights holding more heads than ``architectures`` names (bert-base-uncased: BertForMaskedLM with the NSP
    head) convert whole, to the pretraining model."""
    bert = random_bert("BertForPreTraining")
    bert.config.architectures = ["BertForMaskedLM"]
    write_state(tmp_path / "bert", bert.config, bert.state_dict())
    dst = convert_checkpoint(tmp_path / "bert", tmp_path / "ours")
    assert json.loads((dst / "config.json").read_text())["architectures"] == ["MlmSuiteForPreTraining"]


def test_untied_decoder_is_kept(tmp_path):
    """``tie_word_embeddings=False``: BERT's own decoder matrix is converted, not replaced by the embeddings."""
    torch.manual_seed(0)
    bert = BertForMaskedLM(make_tiny_bert_config(tie_word_embeddings=False)).eval()
    with torch.no_grad():
        bert.cls.predictions.decoder.weight.normal_()
    bert.save_pretrained(tmp_path / "bert")
    ours = MlmSuiteForMaskedLM.from_pretrained(convert_checkpoint(tmp_path / "bert", tmp_path / "ours")).eval()
    assert ours.lm_head.decoder.weight.data_ptr() != ours.encoder.embeddings.word_embeddings.weight.data_ptr()
    batch = make_random_batch(seed=6)
    with torch.no_grad():
        expected, got = bert(**batch).logits, ours(**batch).logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------------
# Pooling of sentence-transformers folders
# ------------------------------------------------------------------------------------------------
def sentence_transformers_folder(folder, modes=("mean",), extra_modules=(), seed=0):
    """A tiny random BertModel saved as sentence-transformers saves it: modules.json and 1_Pooling/config.json."""
    bert = random_bert("BertModel", seed=seed)
    bert.save_pretrained(folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    modules += [{"idx": 2 + i, "name": str(2 + i), "path": path, "type": f"sentence_transformers.models.{kind}"}
                for i, (path, kind) in enumerate(extra_modules)]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    flags = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
             "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens"}
    pooling = {"word_embedding_dimension": bert.config.hidden_size, **{flag: mode in modes for mode, flag in flags.items()}}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return bert


def test_sentence_transformers_mean_pooling_reaches_the_classifier(tmp_path, capsys):
    """A mean-pooling, normalising sentence-transformers folder converts to ``classifier_pooling`` / ``sentence_pooling``
    ``mean`` and ``normalize_embeddings``: a classifier built from it pools the mean of the real tokens (through BERT's
    pooler dense + tanh), the sentence embeddings are the model's own; ``classifier_pooling="cls"`` overrides."""
    bert = sentence_transformers_folder(tmp_path / "st", extra_modules=[("2_Normalize", "Normalize")])
    dst = convert_checkpoint(tmp_path / "st", tmp_path / "ours")
    assert printed_lines(capsys.readouterr().err) == []
    config = json.loads((dst / "config.json").read_text())
    assert (config["classifier_pooling"], config["sentence_pooling"], config["normalize_embeddings"]) == ("mean", "mean", True)
    batch = make_random_batch(lengths=(9, 4, 7, 2), seed=3)
    classifier = MlmSuiteForSequenceClassification.from_pretrained(dst, num_labels=2).eval()
    with torch.no_grad():
        states = bert(**batch).last_hidden_state
        expected_pooled = torch.tanh(bert.pooler.dense(mean_of_real_tokens(states, batch["attention_mask"])))
        pooled = classifier.encoder(**batch).pooler_output
        embeddings = MlmSuiteForSentenceEmbedding.from_pretrained(dst).eval()(**batch).embeddings
    torch.testing.assert_close(pooled, expected_pooled, atol=1e-5, rtol=0)
    expected_embeddings = F.normalize(mean_of_real_tokens(states, batch["attention_mask"]), dim=-1)
    torch.testing.assert_close(embeddings, expected_embeddings, atol=1e-5, rtol=0)

    chosen = convert_checkpoint(tmp_path / "st", tmp_path / "cls", classifier_pooling="cls")
    config = json.loads((chosen / "config.json").read_text())
    assert (config["classifier_pooling"], config["sentence_pooling"]) == ("cls", "mean")


@pytest.mark.parametrize(
    "modes, extra, expected, note",
    [
        (("max",), (), ("cls", "max"), "classifier_pooling stays 'cls': the sequence heads' pooler takes cls or mean, not 'max'"),
        (("cls",), (), ("cls", "cls"), None),
        (("mean_sqrt_len",), (), ("cls", "mean"), "sentence-transformers pooling ['mean_sqrt_len']"),
        (("cls", "mean"), (), ("cls", "mean"), "sentence-transformers pooling ['cls', 'mean']"),
        (("mean",), (("2_Dense", "Dense"),), ("mean", "mean"), "sentence-transformers module 2_Dense (Dense) dropped"),
    ],
)
def test_sentence_transformers_pooling_it_cannot_carry_is_said(modes, extra, expected, note, tmp_path, capsys):
    sentence_transformers_folder(tmp_path / "st", modes, extra)
    dst = convert_checkpoint(tmp_path / "st", tmp_path / "ours")
    config = json.loads((dst / "config.json").read_text())
    assert (config["classifier_pooling"], config["sentence_pooling"]) == expected
    lines = printed_lines(capsys.readouterr().err)
    if note is None:
        assert lines == []
    else:
        assert len(lines) == 1 and note in lines[0]


# ------------------------------------------------------------------------------------------------
# Errors: one line naming the file or key, nothing written
# ------------------------------------------------------------------------------------------------
def test_missing_config(tmp_path):
    bert = random_bert("BertModel")
    save_file({k: v.clone().contiguous() for k, v in bert.state_dict().items()}, str(tmp_path / "model.safetensors"))
    with pytest.raises(UsageError, match="config.json"):
        convert_checkpoint(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_not_a_bert_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    with pytest.raises(UsageError, match="'gpt2' checkpoint, which mlm_suite cannot convert"):
        convert_checkpoint(tmp_path, tmp_path / "out")


def test_config_without_weights(tmp_path):
    make_tiny_bert_config().save_pretrained(tmp_path)
    with pytest.raises(UsageError, match="no model.safetensors or pytorch_model.bin"):
        convert_checkpoint(tmp_path, tmp_path / "out")


@pytest.mark.parametrize("damage", ["truncated_safetensors", "truncated_bin", "config_not_json", "missing_shard"])
def test_damaged_input_names_the_file(damage, tmp_path):
    bert = random_bert("BertModel")
    src = tmp_path / "bert"
    write_checkpoint(bert, src, "bin" if damage == "truncated_bin" else "native", False)
    if damage.startswith("truncated"):
        path = src / ("pytorch_model.bin" if damage == "truncated_bin" else "model.safetensors")
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "config_not_json":
        path = src / "config.json"
        path.write_text(path.read_text()[:40])
    else:
        path = src / "model-00002-of-00002.safetensors"
        (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"pooler.dense.weight": path.name}}))
    with pytest.raises(UsageError) as error:
        convert_checkpoint(src, tmp_path / "out")
    assert str(path) in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_unsupported_bert_variants(tmp_path):
    config = make_tiny_bert_config().to_dict()
    (tmp_path / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    with pytest.raises(UsageError, match="relative_key"):
        convert_checkpoint(tmp_path, tmp_path / "out")
    (tmp_path / "config.json").write_text(json.dumps({**config, "is_decoder": True}))
    with pytest.raises(UsageError, match="decoder"):
        convert_checkpoint(tmp_path, tmp_path / "out")


def test_weights_that_do_not_match_the_config(tmp_path):
    """A layer weight missing and one no rename fits: both named, the latter by its name in the source."""
    bert = random_bert("BertModel")
    state = {k: v.clone().contiguous() for k, v in bert.state_dict().items()}
    del state["encoder.layer.1.output.dense.weight"]
    state["encoder.layer.1.output.extra.weight"] = torch.zeros(2)
    write_state(tmp_path, bert.config, state)
    with pytest.raises(UsageError, match=r"missing.*layers\.1\.ffn\.down\.weight.*encoder\.layer\.1\.output\.extra\.weight"):
        convert_checkpoint(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "case, edit, message",
    [
        ("multiple_choice", None, "BertForMultipleChoice cannot be converted: mlm_suite has no multiple-choice head"),
        ("causal_lm", None, "BertLMHeadModel cannot be converted: it is a left-to-right language model"),
        ("single_label", {"architectures": None}, "classifier.weight: config.json's architectures (None) does not say"),
        ("single_label", {"architectures": ["BertForQuestionAnswering"]}, "names BertForQuestionAnswering, but the weights hold no qa_outputs head"),
        ("single_label", {"extra": "classifier_extra.weight"}, "no counterpart for ['classifier_extra.weight']"),
        ("token", {"extra": "cls.predictions.transform.dense.weight"}, "the weights hold the heads ['classifier', 'lm_head']"),
    ],
)
def test_heads_that_cannot_be_carried_are_named(case, edit, message, tmp_path):
    torch.manual_seed(0)
    if case == "multiple_choice":
        bert = BertForMultipleChoice(make_tiny_bert_config())
    elif case == "causal_lm":  # a BertLMHeadModel folder, as its save_pretrained writes it without is_decoder
        bert = BertForMaskedLM(make_tiny_bert_config())
    else:
        bert = random_head(case)
    state = dict(bert.state_dict())
    if edit and "extra" in edit:
        state[edit["extra"]] = torch.zeros(3)
    names = {"multiple_choice": "BertForMultipleChoice", "causal_lm": "BertLMHeadModel"}
    bert.config.architectures = edit["architectures"] if edit and "architectures" in edit else [names.get(case, type(bert).__name__)]
    write_state(tmp_path / "bert", bert.config, state)
    with pytest.raises(UsageError) as error:
        convert_checkpoint(tmp_path / "bert", tmp_path / "out")
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------
# Command line (in-process, through the same ``main`` the ``mlm-suite`` console script calls)
# ------------------------------------------------------------------------------------------------
def test_cli_convert(tmp_path, capsys):
    bert = random_bert("BertForPreTraining", seed=3)
    src, dst = tmp_path / "bert", tmp_path / "converted"
    write_checkpoint(bert, src, "native", None)
    status, out, _ = run_cli(["convert", str(src), str(dst)], capsys)
    assert status == 0 and out == f"converted {src} -> {dst} (MlmSuiteForPreTraining, classifier_pooling=cls)\n"
    model = load_converted(dst, "BertForPreTraining")
    batch = make_random_batch(seed=4)
    assert_outputs_match(ours_outputs(model, batch), hf_outputs(bert, batch), batch["attention_mask"].bool())
    status, _, err = run_cli(["convert", str(tmp_path / "nowhere"), str(tmp_path / "out")], capsys)
    assert status == 2  # a user error: one line on stderr
    assert_one_line_error(err, "convert", "config.json")
    status, _, _ = run_cli(["convert", str(src)], capsys)  # missing DST
    assert status == 2


def test_cli_converts_a_classifier_and_chooses_its_pooling(tmp_path, capsys):
    bert = random_head("token")
    bert.save_pretrained(tmp_path / "token")
    status, out, err = run_cli(["convert", str(tmp_path / "token"), str(tmp_path / "ours")], capsys)
    assert status == 0 and "(MlmSuiteForTokenClassification, " in out and printed_lines(err) == []
    assert MlmSuiteForTokenClassification.from_pretrained(tmp_path / "ours").config.id2label == dict(enumerate(TAGS))

    sentence_transformers_folder(tmp_path / "st")
    status, out, _ = run_cli(["convert", str(tmp_path / "st"), str(tmp_path / "st_mean")], capsys)
    assert status == 0 and out.endswith("(MlmSuiteModel, classifier_pooling=mean)\n")
    argv = ["convert", str(tmp_path / "st"), str(tmp_path / "st_cls"), "--classifier_pooling", "cls"]
    status, out, _ = run_cli(argv, capsys)
    assert status == 0 and out.endswith("(MlmSuiteModel, classifier_pooling=cls)\n")
    status, _, err = run_cli([*argv[:3], "--classifier_pooling", "max"], capsys)
    assert status == 2 and "invalid choice: 'max'" in err


@pytest.mark.parametrize("damage", ["multiple_choice", "truncated"])
def test_cli_errors_exit_2_and_write_nothing(damage, tmp_path, capsys):
    torch.manual_seed(0)
    bert = BertForMultipleChoice(make_tiny_bert_config()) if damage == "multiple_choice" else random_bert("BertModel")
    bert.save_pretrained(tmp_path / "bert")
    if damage == "truncated":
        weights = tmp_path / "bert" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    status, out, err = run_cli(["convert", str(tmp_path / "bert"), str(tmp_path / "out")], capsys)
    assert status == 2 and out == ""
    assert_one_line_error(err, "convert", "BertForMultipleChoice" if damage == "multiple_choice" else "model.safetensors")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("hf_class, ours_class", [("BertForMaskedLM", MlmSuiteForMaskedLM), ("BertForPreTraining", MlmSuiteForPreTraining)])
def test_training_gradients_equal_hf_bert(tmp_path, hf_class, ours_class):
    """Training mode with labels on a padded batch (sparse prediction: the MLM head and the last layer's
    finishing run only at masked positions; MLM + NSP for the pretraining head): the loss and every
    parameter's gradient equal HF ``BertForMaskedLM``'s / ``BertForPreTraining``'s for the same weights.
    Dropout is off, so both compute one function."""
    hf = random_bert(hf_class)
    hf.save_pretrained(tmp_path / "bert")
    ours = ours_class.from_pretrained(convert_checkpoint(tmp_path / "bert", tmp_path / "ours"))
    assert ours.config.sparse_prediction
    batch = make_random_batch(lengths=(9, 4, 7, 2), seed=3)
    selected = (torch.rand(batch["input_ids"].shape, generator=torch.Generator().manual_seed(4)) < 0.3)
    selected &= batch["attention_mask"].bool()
    batch["labels"] = torch.where(selected, batch["input_ids"], -100)
    batch["input_ids"] = batch["input_ids"].masked_fill(selected, 3)
    if ours_class is MlmSuiteForPreTraining:
        batch["next_sentence_label"] = torch.tensor([0, 1, 1, 0])
    losses = {}
    for name, model in (("hf", hf), ("ours", ours)):
        model.train().zero_grad()
        loss = model(**batch).loss
        loss.backward()
        losses[name] = loss.item()
    assert losses["ours"] == pytest.approx(losses["hf"], rel=1e-6)
    # HF's gradients under mlm_suite's names, renamed (and Q/K/V fused) by the conversion itself.
    hf_gradients = convert_bert_state_dict({name: p.grad for name, p in hf.named_parameters()}, hf.config.num_hidden_layers)
    ours_gradients = {name.removeprefix("encoder."): p.grad for name, p in ours.named_parameters()}
    assert ours_gradients.keys() == hf_gradients.keys()
    for name, gradient in ours_gradients.items():
        torch.testing.assert_close(gradient, hf_gradients[name], atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_gradients_reach_returned_hidden_states_and_attentions_as_in_hf_bert(tmp_path, attn_implementation):
    """Gradient-based attribution reads ``.grad`` of the returned ``hidden_states`` and ``attentions``:
    on a padded batch they are in the graph and their gradients equal HF ``BertModel``'s for the same
    weights (at real tokens; BERT's pad rows feed nothing real, ours are not computed)."""
    hf = random_bert("BertModel")
    hf.save_pretrained(tmp_path / "bert")
    hf.set_attn_implementation("eager")  # BERT returns attention weights from eager only
    ours = MlmSuiteModel.from_pretrained(convert_checkpoint(tmp_path / "bert", tmp_path / "ours")).eval()
    ours.set_attn_implementation(attn_implementation)
    batch = make_random_batch(lengths=(9, 4, 7, 2), seed=5)
    real = batch["attention_mask"].bool()
    weights = torch.randn(*real.shape, hf.config.hidden_size, generator=torch.Generator().manual_seed(6))
    grads = {}
    for name, model in (("hf", hf), ("ours", ours)):
        out = model(**batch, output_hidden_states=True, output_attentions=True)
        for tensor in out.hidden_states + out.attentions:
            tensor.retain_grad()
        (out.last_hidden_state[real] * weights[real]).sum().backward()
        grads[name] = out
    pair_is_real = real[:, None, :, None] & real[:, None, None, :]  # (batch, 1, query, key)
    for layer, (a, b) in enumerate(zip(grads["ours"].hidden_states, grads["hf"].hidden_states)):
        assert a.grad is not None, f"hidden_states[{layer}] is outside the graph"
        torch.testing.assert_close(a.grad[real], b.grad[real], atol=1e-5, rtol=1e-4, msg=f"hidden_states[{layer}]")
    for layer, (a, b) in enumerate(zip(grads["ours"].attentions, grads["hf"].attentions)):
        assert a.grad is not None, f"attentions[{layer}] is outside the graph"
        mask = pair_is_real.expand_as(a)
        torch.testing.assert_close(a.grad[mask], b.grad[mask], atol=1e-5, rtol=1e-4, msg=f"attentions[{layer}]")


def test_return_dict_false_gives_bert_tuples(tmp_path):
    """``config.return_dict=False`` (or ``return_dict=False`` in the call) returns the tuple BERT returns."""
    hf = random_bert("BertForPreTraining")
    hf.save_pretrained(tmp_path / "bert")
    ours = MlmSuiteForPreTraining.from_pretrained(convert_checkpoint(tmp_path / "bert", tmp_path / "ours")).eval()
    batch = make_random_batch(seed=7)
    with torch.no_grad():
        expected = hf(**batch, return_dict=False)
        by_call = ours(**batch, return_dict=False)
        ours.config.return_dict = False
        hf.config.return_dict = False
        by_config, hf_by_config = ours(**batch), hf(**batch)
        explicit = ours(**batch, return_dict=True)
    for got, reference in ((by_call, expected), (by_config, hf_by_config)):
        assert isinstance(got, tuple) and len(got) == len(reference) == 2
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(got[0][real], reference[0][real], atol=1e-4, rtol=0)
        torch.testing.assert_close(got[1], reference[1], atol=1e-4, rtol=0)
    assert isinstance(explicit, MlmSuiteForPreTrainingOutput)


def test_set_attn_implementation_switches_the_kernel(monkeypatch):
    """``set_attn_implementation`` switches a built model the way it switches transformers' own models."""
    model = MlmSuiteModel(make_tiny_config()).eval()
    assert model.config._attn_implementation == "sdpa"
    batch = make_random_batch(seed=8)
    with torch.no_grad():
        sdpa = model(**batch).last_hidden_state
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    assert all(layer.attention.config._attn_implementation == "eager" for layer in model.layers)

    def no_sdpa(*args, **kwargs):
        raise AssertionError("the eager model called scaled_dot_product_attention")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", no_sdpa)
    with torch.no_grad():
        eager = model(**batch).last_hidden_state
    torch.testing.assert_close(eager, sdpa, atol=1e-5, rtol=0)
    monkeypatch.undo()
    model.set_attn_implementation("sdpa")
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    with torch.no_grad():
        model(**batch)
    assert len(calls) == model.config.num_hidden_layers
