"""``convert_bert_checkpoint``: randomly initialised HF BERT checkpoints (BertModel, BertForMaskedLM,
BertForPreTraining; with and without the ``bert.`` prefix; safetensors, ``pytorch_model.bin`` and
HF's own ``save_pretrained``) convert to mlm_suite folders whose hidden states (every layer),
pooler, MLM and NSP logits match HF's; the real MiniLM-L6 weights and tokenizer too; and the
conversion errors.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModel, AutoTokenizer, BertForMaskedLM, BertForPreTraining, BertModel

import mlm_suite
from conftest import make_random_batch, make_tiny_bert_config, make_tiny_config
from mlm_suite import MlmSuiteForMaskedLM, MlmSuiteForPreTraining, MlmSuiteModel, convert_bert_checkpoint
from mlm_suite.model import MlmSuiteForPreTrainingOutput
from mlm_suite.convert import convert_bert_state_dict

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
    assert convert_bert_checkpoint(src, dst) == dst
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
    model = load_converted(convert_bert_checkpoint(tmp_path, tmp_path / "out"), "BertForPreTraining")
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
    model = load_converted(convert_bert_checkpoint(tmp_path, tmp_path / "out"), "BertModel")
    batch = make_random_batch(seed=5)
    assert_outputs_match(ours_outputs(model, batch), hf_outputs(bert, batch), batch["attention_mask"].bool())


def test_real_minilm_conversion(minilm_dir, tmp_path):
    dst = convert_bert_checkpoint(minilm_dir, tmp_path / "minilm")
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
    assert_outputs_match(ours, theirs, batch["attention_mask"].bool())


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------
def test_missing_config(tmp_path):
    bert = random_bert("BertModel")
    save_file({k: v.clone().contiguous() for k, v in bert.state_dict().items()}, str(tmp_path / "model.safetensors"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        convert_bert_checkpoint(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_not_a_bert_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    with pytest.raises(ValueError, match="'gpt2'.*not a BERT"):
        convert_bert_checkpoint(tmp_path, tmp_path / "out")


def test_config_without_weights(tmp_path):
    make_tiny_bert_config().save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no model.safetensors or pytorch_model.bin"):
        convert_bert_checkpoint(tmp_path, tmp_path / "out")


def test_unsupported_bert_variants(tmp_path):
    config = make_tiny_bert_config().to_dict()
    (tmp_path / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    with pytest.raises(ValueError, match="relative_key"):
        convert_bert_checkpoint(tmp_path, tmp_path / "out")
    (tmp_path / "config.json").write_text(json.dumps({**config, "is_decoder": True}))
    with pytest.raises(ValueError, match="decoder"):
        convert_bert_checkpoint(tmp_path, tmp_path / "out")


def test_weights_that_do_not_match_the_config(tmp_path):
    bert = random_bert("BertModel")
    bert.config.save_pretrained(tmp_path)
    state = {k: v.clone().contiguous() for k, v in bert.state_dict().items()}
    del state["encoder.layer.1.output.dense.weight"]
    state["encoder.layer.1.output.extra.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing.*layers\.1\.ffn\.down\.weight"):
        convert_bert_checkpoint(tmp_path, tmp_path / "out")


# ------------------------------------------------------------------------------------------------
# Command line (in-process, through the same ``main`` the ``mlm-suite`` console script calls)
# ------------------------------------------------------------------------------------------------
def test_cli_convert_bert(tmp_path, capsys):
    from mlm_suite.cli import main

    bert = random_bert("BertForPreTraining", seed=3)
    src, dst = tmp_path / "bert", tmp_path / "converted"
    write_checkpoint(bert, src, "native", None)
    assert main(["convert-bert", str(src), str(dst)]) == 0
    assert str(dst) in capsys.readouterr().out
    model = load_converted(dst, "BertForPreTraining")
    batch = make_random_batch(seed=4)
    assert_outputs_match(ours_outputs(model, batch), hf_outputs(bert, batch), batch["attention_mask"].bool())
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # a user error: one line on stderr, exit status 2
        main(["convert-bert", str(tmp_path / "nowhere"), str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("mlm-suite convert-bert: error: ") and "config.json" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["convert-bert", str(src)])  # missing DST


@pytest.mark.parametrize("hf_class, ours_class", [("BertForMaskedLM", MlmSuiteForMaskedLM), ("BertForPreTraining", MlmSuiteForPreTraining)])
def test_training_gradients_equal_hf_bert(tmp_path, hf_class, ours_class):
    """Training mode with labels on a padded batch (sparse prediction: the MLM head and the last layer's
    finishing run only at masked positions; MLM + NSP for the pretraining head): the loss and every
    parameter's gradient equal HF ``BertForMaskedLM``'s / ``BertForPreTraining``'s for the same weights.
    Dropout is off, so both compute one function."""
    hf = random_bert(hf_class)
    hf.save_pretrained(tmp_path / "bert")
    ours = ours_class.from_pretrained(convert_bert_checkpoint(tmp_path / "bert", tmp_path / "ours"))
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
    ours = MlmSuiteModel.from_pretrained(convert_bert_checkpoint(tmp_path / "bert", tmp_path / "ours")).eval()
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
    ours = MlmSuiteForPreTraining.from_pretrained(convert_bert_checkpoint(tmp_path / "bert", tmp_path / "ours")).eval()
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
