"""``freeze_encoder``: which parameters change after an optimizer step, on mlm_suite and HF BERT heads."""

from __future__ import annotations

import pytest
import torch
from tests.helpers import make_random_batch, make_tiny_bert_config, make_tiny_config
from transformers import BertForTokenClassification, Trainer, TrainingArguments

from mlm_suite import MlmSuiteForSequenceClassification, MlmSuiteForTokenClassification
from mlm_suite.training.freezing import freeze_encoder
from mlm_suite.jobs.common.model_loading import apply_freezing

BIO = {0: "O", 1: "B-PER", 2: "I-PER"}


def token_model(**overrides) -> MlmSuiteForTokenClassification:
    torch.manual_seed(0)
    return MlmSuiteForTokenClassification(make_tiny_config(num_labels=3, id2label=BIO, **overrides))


def changed_after_step(model: torch.nn.Module) -> set[str]:
    """Names of the parameters that one AdamW step (over *all* parameters, no weight decay) changes."""
    batch = make_random_batch(lengths=(7, 5, 9))
    labels = torch.randint(0, model.config.num_labels, batch["input_ids"].shape, generator=torch.Generator().manual_seed(1))
    if isinstance(model, MlmSuiteForSequenceClassification):
        labels = labels[:, 0]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    model.train()
    model(**batch, labels=labels).loss.backward()
    optimizer.step()
    return {name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])}


def names(model: torch.nn.Module, prefix: str) -> set[str]:
    return {name for name, _ in model.named_parameters() if name.startswith(prefix)}


def test_head_only_freezes_the_whole_encoder():
    model = token_model()
    counts = freeze_encoder(model, 0)
    changed = changed_after_step(model)
    assert changed == names(model, "classifier.")
    head = sum(p.numel() for p in model.classifier.parameters())
    assert counts == {"trainable": head, "frozen": sum(p.numel() for p in model.parameters()) - head}


def test_last_k_layers_train_with_the_head():
    model = token_model()
    freeze_encoder(model, train_last_k_layers=1)
    changed = changed_after_step(model)
    assert changed == names(model, "classifier.") | names(model, "encoder.layers.1.")
    assert not changed & (names(model, "encoder.embeddings.") | names(model, "encoder.layers.0."))


@pytest.mark.parametrize("k", [None, -1])
def test_none_or_minus_one_trains_everything(k):
    model = token_model()
    freeze_encoder(model, 0)  # a later call undoes an earlier one
    counts = freeze_encoder(model, k)
    assert counts["frozen"] == 0
    assert changed_after_step(model) == {name for name, _ in model.named_parameters()}


def test_k_equal_to_depth_freezes_only_the_embeddings():
    model = token_model()
    freeze_encoder(model, 2)
    assert changed_after_step(model) == {n for n, _ in model.named_parameters()} - names(model, "encoder.embeddings.")


def test_pooler_counts_as_head():
    torch.manual_seed(0)
    model = MlmSuiteForSequenceClassification(make_tiny_config(num_labels=2))
    freeze_encoder(model, 0)
    assert changed_after_step(model) == names(model, "classifier.") | names(model, "encoder.pooler.")


def test_final_norm_of_pre_norm_encoders_trains_with_the_top_layers():
    model = token_model(norm_position="pre")
    freeze_encoder(model, 0)
    assert not model.encoder.final_norm.weight.requires_grad
    freeze_encoder(model, 1)
    assert changed_after_step(model) >= names(model, "encoder.final_norm.")


def test_hf_bert():
    torch.manual_seed(0)

    model = BertForTokenClassification(make_tiny_bert_config(num_labels=3))
    freeze_encoder(model, 1)
    changed = changed_after_step(model)
    assert changed == names(model, "classifier.") | names(model, "bert.encoder.layer.1.")


def test_bad_arguments():
    with pytest.raises(ValueError, match="train_last_k_layers=3 but the encoder has 2 layers"):
        freeze_encoder(token_model(), 3)
    with pytest.raises(ValueError, match="train_last_k_layers=-2"):
        freeze_encoder(token_model(), -2)
    with pytest.raises(TypeError, match="does not know where the layers of Linear are"):
        freeze_encoder(torch.nn.Linear(2, 2), 0)


def test_trainer_optimizes_only_trainable_parameters(tmp_path):
    model = token_model()
    freeze_encoder(model, 1)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    optimizer = Trainer(model=model, args=args).create_optimizer()
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in model.parameters() if p.requires_grad}
    assert optimized and len(optimized) < len(list(model.parameters()))


def test_the_jobs_describe_what_trains():
    model = token_model()
    line = apply_freezing(model, 1)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert line.startswith("the head and the last 1 encoder layer(s) (") and f"{trainable / 1e6:.2f} M of" in line
    assert apply_freezing(model, None).startswith("all layers (")
    assert all(p.requires_grad for p in model.parameters())
