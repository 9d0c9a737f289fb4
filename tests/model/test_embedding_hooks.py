"""``get_input_embeddings()`` behaves as BERT's: an ``nn.Embedding`` whose output is ``(batch, seq, hidden)``,
so what the Trainer, PEFT and users hook onto it works on every head: NEFTune (the same noise as on HF BERT
for the same weights and seed), ``inputs_embeds`` of that shape, a LoRA adapter that trains and saves, and
prompt tuning. The PEFT tests need the ``peft`` extra.
"""

from __future__ import annotations

import pytest
import torch
from transformers import BertForMaskedLM, BertForPreTraining, Trainer, TrainingArguments
from transformers.integrations.neftune import neftune_post_forward_hook

from tests.helpers import ALL_HEADS, make_random_batch, make_tiny_bert_config, make_tiny_config
from mlm_suite import (
    MlmSuiteForMaskedLM,
    MlmSuiteForPreTraining,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    convert_checkpoint,
)
from mlm_suite.data.flattening import flatten_batch

LENGTHS = (7, 4, 9, 2)


def build(cls, seed=0, **overrides):
    torch.manual_seed(seed)
    return cls(make_tiny_config(**overrides))


def record_outputs(module: torch.nn.Module) -> list[torch.Tensor]:
    """The outputs of ``module`` after the hooks registered before this one."""
    seen = []
    module.register_forward_hook(lambda _module, _input, output: seen.append(output))
    return seen


def add_neftune(model, alpha=5.0) -> list[torch.Tensor]:
    """NEFTune as the Trainer adds it; returns the list the noisy embeddings are recorded in."""
    embeddings = model.get_input_embeddings()
    embeddings.neftune_noise_alpha = alpha
    embeddings.register_forward_hook(neftune_post_forward_hook)
    return record_outputs(embeddings)


@pytest.mark.parametrize("cls", ALL_HEADS, ids=lambda cls: cls.__name__)
def test_input_embeddings_are_an_embedding_of_batch_seq_hidden(cls):
    model = build(cls).train()
    assert type(model.get_input_embeddings()) is torch.nn.Embedding
    seen = add_neftune(model)
    batch = make_random_batch(LENGTHS)
    model(**batch)
    model(**flatten_batch(batch))
    assert [tuple(output.shape) for output in seen] == [(4, 9, 32), (1, sum(LENGTHS), 32)]


@pytest.mark.parametrize("hf_class, ours_class", [(BertForMaskedLM, MlmSuiteForMaskedLM), (BertForPreTraining, MlmSuiteForPreTraining)])
def test_neftune_adds_the_noise_it_adds_to_bert(tmp_path, hf_class, ours_class):
    """Same weights, same seed: NEFTune's noisy embeddings are BERT's, and so is the loss they give."""
    torch.manual_seed(0)
    hf_class(make_tiny_bert_config()).save_pretrained(tmp_path / "bert")
    hf = hf_class.from_pretrained(tmp_path / "bert")
    ours = ours_class.from_pretrained(convert_checkpoint(tmp_path / "bert", tmp_path / "ours"))
    batch = make_random_batch(LENGTHS, seed=2)
    batch["labels"] = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -100)
    if ours_class is MlmSuiteForPreTraining:
        batch["next_sentence_label"] = torch.tensor([0, 1, 1, 0])
    clean_loss = ours.train()(**batch).loss
    noisy, losses = {}, {}
    for name, model in (("hf", hf), ("ours", ours)):
        seen = add_neftune(model.train())
        torch.manual_seed(7)
        losses[name] = model(**batch).loss
        noisy[name] = seen[0]
    assert torch.equal(noisy["ours"], noisy["hf"])
    noise = noisy["ours"] - ours.get_input_embeddings().weight[batch["input_ids"]]
    bound = 5.0 / (9 * 32) ** 0.5  # alpha / sqrt(seq * hidden)
    assert 0.5 * bound < noise.abs().max() <= bound
    torch.testing.assert_close(losses["ours"], losses["hf"], atol=1e-6, rtol=1e-6)
    assert abs(losses["ours"] - clean_loss) > 1e-4


def _train(tmp_path, model, dataset, **overrides):
    arguments = dict(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        max_steps=2,
        learning_rate=1e-2,
        seed=0,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=TrainingArguments(**{**arguments, **overrides}), train_dataset=dataset)
    trainer.train()
    return trainer


def _token_dataset():
    batch = make_random_batch((7, 4, 9, 2, 5, 8, 3, 6), pairs=False, seed=4)
    labels = torch.where(batch["attention_mask"].bool(), batch["input_ids"] % 5, -100)
    return [{"input_ids": batch["input_ids"][i], "attention_mask": batch["attention_mask"][i], "labels": labels[i]} for i in range(8)]


@pytest.mark.parametrize("cls", [MlmSuiteForMaskedLM, MlmSuiteForTokenClassification], ids=lambda cls: cls.__name__)
def test_stock_trainer_trains_with_neftune(tmp_path, cls):
    """``--neftune_noise_alpha``: the stock Trainer trains, the noise changes the step, and the hook goes afterwards."""
    weights = {}
    for alpha in (None, 5.0):
        model = build(cls, num_labels=5)
        trainer = _train(tmp_path, model, _token_dataset(), neftune_noise_alpha=alpha)
        assert all(torch.isfinite(torch.tensor(entry["loss"])) for entry in trainer.state.log_history if "loss" in entry)
        assert not model.get_input_embeddings()._forward_hooks
        weights[alpha] = model.get_input_embeddings().weight.detach().clone()
    assert not torch.equal(weights[None], weights[5.0])


@pytest.mark.parametrize("cls", ALL_HEADS, ids=lambda cls: cls.__name__)
def test_inputs_embeds_of_batch_seq_hidden(cls):
    """``inputs_embeds`` from the input embeddings gives what ``input_ids`` give, on a padded batch."""
    model = build(cls).eval()
    batch = make_random_batch(LENGTHS)
    with torch.no_grad():
        from_ids = model(**batch)
        embeds = model.get_input_embeddings()(batch.pop("input_ids"))  # (batch, seq, hidden)
        from_embeds = model(**batch, inputs_embeds=embeds)
    assert from_ids.keys() == from_embeds.keys()
    for name, value in from_ids.items():
        torch.testing.assert_close(from_embeds[name], value, atol=0, rtol=0, msg=name)


def test_lora_adapter_trains_and_saves(tmp_path):
    peft = pytest.importorskip("peft")
    dataset = [
        {"input_ids": row["input_ids"], "attention_mask": row["attention_mask"], "labels": row["labels"][1] % 3}
        for row in _token_dataset()
    ]
    lora = peft.LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["qkv", "out", "up", "down"])
    model = peft.get_peft_model(build(MlmSuiteForSequenceClassification, num_labels=3), lora)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or "classifier" in name for name in trainable)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    _train(tmp_path, model, dataset, learning_rate=5e-2, max_steps=3)
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and changed <= trainable and any("lora_B" in name for name in changed)

    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    reloaded = peft.PeftModel.from_pretrained(build(MlmSuiteForSequenceClassification, num_labels=3), tmp_path / "adapter")
    batch = make_random_batch(LENGTHS)
    with torch.no_grad():
        torch.testing.assert_close(reloaded.eval()(**batch).logits, model.eval()(**batch).logits, atol=0, rtol=0)


def test_prompt_tuning_trains_the_prompt(tmp_path):
    """PEFT's prompt methods embed the ids with get_input_embeddings() and pass inputs_embeds with the prompt in front."""
    peft = pytest.importorskip("peft")
    config = peft.PromptTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=5)
    model = peft.get_peft_model(build(MlmSuiteForSequenceClassification, num_labels=3), config).train()
    batch = make_random_batch(LENGTHS)
    out = model(**batch, labels=torch.tensor([0, 1, 2, 1]))
    out.loss.backward()
    assert out.logits.shape == (4, 3)
    prompt = model.prompt_encoder["default"].embedding.weight
    assert prompt.grad is not None and prompt.grad.abs().sum() > 0
