"""Flattened batches, ``torch.compile`` without graph breaks, ``torch.export`` / ONNX, attention backend choice.

The padded eager path is the reference: a flattened batch, a compiled step and an exported
program must give the same numbers for the real tokens.
"""

from __future__ import annotations

import random
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend
from transformers import DataCollatorWithFlattening

from mlm_suite import (
    MlmSuiteConfig,
    MlmSuiteForMaskedLM,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPairClassification,
    MlmSuiteForPreTraining,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)
from mlm_suite import export as mlm_export
from mlm_suite.jobs import export_onnx
from mlm_suite.data import DataCollatorForMaskedLM
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.model import attention
from mlm_suite.model.layout import SequenceLayout
from tests.helpers import BERT_ARCHITECTURE, job_args, make_documents, max_difference, read_json, weights, write_text

VOCAB = 90
ARCHITECTURES = {
    "bert": dict(norm_position="post", position_embedding_type="absolute"),
    "modern": dict(norm_position="pre", position_embedding_type="rotary"),
}
HEADS = (
    MlmSuiteModel,
    MlmSuiteForMaskedLM,
    MlmSuiteForPreTraining,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForSequenceClassification,
    MlmSuiteForPairClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
)


def config(architecture: str = "modern", **overrides) -> MlmSuiteConfig:
    settings = dict(vocab_size=VOCAB, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return MlmSuiteConfig.preset("tiny", **{**settings, **ARCHITECTURES[architecture], **overrides})


def padded_batch(lengths=(11, 6, 9, 3), seq_len: int = 12, seed: int = 0, left: bool = False) -> dict:
    """Random ids, two segments per row, labels at ~30 % of the real tokens (at least one per row)."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    input_ids = torch.randint(5, VOCAB, (rows, seq_len), generator=generator)
    attention_mask = torch.zeros(rows, seq_len, dtype=torch.long)
    token_type_ids = torch.zeros(rows, seq_len, dtype=torch.long)
    for row, length in enumerate(lengths):
        span = slice(seq_len - length, seq_len) if left else slice(0, length)
        attention_mask[row, span] = 1
        token_type_ids[row, span][length // 2 :] = 1
    labels = torch.where(torch.rand(rows, seq_len, generator=generator) < 0.3, input_ids, -100)
    first_real = attention_mask.argmax(dim=1)
    labels[torch.arange(rows), first_real] = input_ids[torch.arange(rows), first_real]
    labels[attention_mask == 0] = -100
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels)


# --------------------------------------------------------------------------------------------
# flatten_batch
# --------------------------------------------------------------------------------------------
def test_flatten_batch_lays_sequences_end_to_end_with_offsets_and_labelled_positions():
    batch = padded_batch()
    flat = flatten_batch(batch, max_length_multiple=8)
    real = batch["attention_mask"].bool()
    assert torch.equal(flat["input_ids"][0], batch["input_ids"][real])
    assert torch.equal(flat["token_type_ids"][0], batch["token_type_ids"][real])
    assert flat["cu_seq_lens_q"].tolist() == [0, 11, 17, 26, 29] and flat["cu_seq_lens_q"].dtype == torch.int32
    assert flat["max_length_q"] == 16 and flat["max_length_k"] == 16  # 11 rounded up to a multiple of 8
    assert flat["position_ids"][0].tolist() == [*range(11), *range(6), *range(9), *range(3)]
    labelled = flat["labels"][0] != -100
    assert torch.equal(flat["masked_lm_positions"], labelled.nonzero().squeeze(1))
    assert flatten_batch(batch)["max_length_q"] == 11


def test_flatten_batch_keeps_the_padded_positions_with_left_padding():
    batch = padded_batch(left=True)
    flat = flatten_batch(batch)
    layout = SequenceLayout.from_inputs(tuple(batch["input_ids"].shape), torch.device("cpu"), batch["attention_mask"])
    assert torch.equal(flat["position_ids"][0], layout.positions)  # BERT counts the left pads


def test_flatten_batch_makes_each_packed_document_a_sequence():
    input_ids = torch.arange(1, 11).view(1, 10)
    position_ids = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3, 0]])
    flat = flatten_batch({"input_ids": input_ids, "position_ids": position_ids})
    assert flat["cu_seq_lens_q"].tolist() == [0, 3, 5, 9, 10] and flat["max_length_q"] == 4
    documents = {"input_ids": input_ids, "document_ids": torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2, 3]])}
    assert flatten_batch(documents)["position_ids"].tolist() == position_ids.tolist()
    with pytest.raises(ValueError, match="NSP pairs cannot be packed"):
        flatten_batch({"input_ids": input_ids, "position_ids": position_ids, "next_sentence_label": torch.tensor([0])})
    with pytest.raises(ValueError, match="cannot flatten"):
        flatten_batch({"input_ids": input_ids, "pixel_values": input_ids})


# --------------------------------------------------------------------------------------------
# A flattened batch gives the padded batch's numbers
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@pytest.mark.parametrize("head", HEADS, ids=lambda head: head.__name__)
def test_flattened_batch_gives_the_padded_outputs_for_every_head(head, architecture):
    torch.manual_seed(0)
    model = head(config(architecture)).eval()
    batch = padded_batch()
    del batch["labels"]
    flat = flatten_batch(batch)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        padded_out, flat_out = model(**batch), model(**flat)
    for name, value in padded_out.items():
        if value.dim() == 3 or name in ("start_logits", "end_logits"):  # per token
            torch.testing.assert_close(flat_out[name][0], value[real], atol=1e-5, rtol=1e-5, msg=name)
        else:  # per sequence: one row per flattened sequence, as one per padded row
            torch.testing.assert_close(flat_out[name], value, atol=1e-5, rtol=1e-5, msg=name)


def test_flattened_batch_pools_each_sequence_by_its_mean():
    torch.manual_seed(0)
    model = MlmSuiteForSequenceClassification(config(classifier_pooling="mean")).eval()
    batch = padded_batch()
    del batch["labels"]
    with torch.no_grad():
        torch.testing.assert_close(model(**flatten_batch(batch)).logits, model(**batch).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", (MlmSuiteForMaskedLM, MlmSuiteForPreTraining), ids=lambda head: head.__name__)
def test_flattened_mlm_training_step_equals_the_padded_one(head):
    torch.manual_seed(0)
    model = head(config()).train()
    batch = padded_batch()
    if head is MlmSuiteForPreTraining:
        batch["next_sentence_label"] = torch.tensor([0, 1, 1, 0])
    losses, grads = [], []
    for inputs in (batch, flatten_batch(batch)):
        model.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[1], losses[0])
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=name)


def test_masked_lm_positions_also_serve_a_padded_batch():
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(config()).train()
    batch = padded_batch()
    positions = (batch["labels"].reshape(-1) != -100).nonzero().squeeze(1)  # flat indices into batch * seq
    without, with_positions = model(**batch), model(**batch, masked_lm_positions=positions)
    torch.testing.assert_close(with_positions.logits, without.logits)
    torch.testing.assert_close(with_positions.loss, without.loss)


def test_transformers_data_collator_with_flattening_feeds_the_model():
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(config()).eval()
    sequences = [[5, 17, 33, 8, 9], [12, 40], [7, 7, 61, 22, 13, 50, 4]]
    features = [{"input_ids": ids} for ids in sequences]
    flat = DataCollatorWithFlattening(return_flash_attn_kwargs=True)(features)
    assert set(flat) >= {"cu_seq_lens_q", "max_length_q", "position_ids"}
    flat.pop("labels")
    padded = {"input_ids": torch.zeros(3, 7, dtype=torch.long), "attention_mask": torch.zeros(3, 7, dtype=torch.long)}
    for row, ids in enumerate(sequences):
        padded["input_ids"][row, : len(ids)] = torch.tensor(ids)
        padded["attention_mask"][row, : len(ids)] = 1
    with torch.no_grad():
        expected = model(**padded).logits[padded["attention_mask"].bool()]
        torch.testing.assert_close(model(**flat).logits[0], expected, atol=1e-5, rtol=1e-5)


def test_flattened_batch_rejects_padding_and_a_missing_bound():
    model = MlmSuiteModel(config()).eval()
    flat = flatten_batch({"input_ids": torch.tensor([[5, 6, 7, 8]])})
    with pytest.raises(ValueError, match="pass neither attention_mask"):
        model(**flat, attention_mask=torch.ones(1, 4, dtype=torch.long))
    del flat["max_length_q"]
    with pytest.raises(ValueError, match="needs max_length_q"):
        model(**flat)
    with pytest.raises(ValueError, match="flattened batch"):
        SequenceLayout.from_offsets((2, 4), torch.tensor([0, 4], dtype=torch.int32), 4)


def test_crf_refuses_a_flattened_batch():
    model = MlmSuiteForTokenClassification(config(use_crf=True, tagging_scheme="BIO", id2label={0: "O", 1: "B-X", 2: "I-X"}))
    flat = flatten_batch({"input_ids": torch.tensor([[5, 6, 7, 8]]), "labels": torch.tensor([[0, 1, 2, 0]])})
    with pytest.raises(ValueError, match="padded batches, not flattened"):
        model(**flat)


def test_masking_collator_flattens_with_the_same_masks(tokenizer):
    features = [
        {"input_ids": [tokenizer.cls_token_id, *random.Random(row).choices(range(2000, 3000), k=length), tokenizer.sep_token_id],
         "example_index": row}
        for row, length in enumerate((9, 4, 14))
    ]
    padded = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.3, seed=3)(features)
    flat = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.3, seed=3, flatten=True, pad_to_multiple_of=8)(features)
    real = padded["attention_mask"].bool()
    assert torch.equal(flat["input_ids"][0], padded["input_ids"][real])
    assert torch.equal(flat["labels"][0], padded["labels"][real])
    assert flat["max_length_q"] == 16 and flat["cu_seq_lens_q"].tolist() == [0, 11, 17, 33]


# --------------------------------------------------------------------------------------------
# torch.compile
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@pytest.mark.parametrize("head", (MlmSuiteForMaskedLM, MlmSuiteForPreTraining), ids=lambda head: head.__name__)
def test_mlm_training_step_compiles_without_a_graph_break(head, architecture):
    torch.manual_seed(0)
    model = head(config(architecture)).train()
    batch = padded_batch()
    if head is MlmSuiteForPreTraining:
        batch["next_sentence_label"] = torch.tensor([0, 1, 1, 0])
    torch._dynamo.reset()
    for inputs in (flatten_batch(batch, 8), batch):  # flattened: padding-free; padded: the traced dense layout
        explanation = torch._dynamo.explain(model)(**inputs)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        assert explanation.graph_count == 1


@pytest.mark.compile
@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
def test_contrastive_training_step_compiles_without_a_graph_break(mode):
    from mlm_suite.training.retrieval import RetrievalCollator

    torch.manual_seed(0)
    model = MlmSuiteForSentenceEmbedding(config(sentence_pooling=mode, normalize_embeddings=True)).train()
    batch = RetrievalCollator()([{"query": [5, 6, 7], "document": [8, 9, 10, 11], "negatives": [[12, 13]]},
                                 {"query": [14, 15], "document": [16]}])
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(**batch)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.slow
@pytest.mark.compile
def test_compiled_training_compiles_a_bounded_number_of_times_and_matches_eager():
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(config()).train()
    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter)
    compiles = []
    shapes = [(4, 16), (8, 32), (3, 64), (16, 48), (2, 9), (5, 40), (8, 32), (1, 5), (1, 30), (6, 20)]
    for step, (rows, seq_len) in enumerate(shapes):
        lengths = [random.Random(step * 31 + row).randint(2, seq_len) for row in range(rows)]
        flat = flatten_batch(padded_batch(lengths, seq_len, seed=step), max_length_multiple=8)
        model.zero_grad()
        compiled_loss = compiled(**flat).loss
        compiled_loss.backward()
        compiled_grad = model.encoder.embeddings.word_embeddings.weight.grad.clone()
        model.zero_grad()
        eager_loss = model(**flat).loss
        eager_loss.backward()
        torch.testing.assert_close(compiled_loss, eager_loss)
        torch.testing.assert_close(compiled_grad, model.encoder.embeddings.word_embeddings.weight.grad)
        compiles.append(counter.frame_count)
    # The first batch compiles with static shapes, the second with its varying sizes dynamic; after
    # that only a batch of a single sequence compiles once more (dynamo specialises sizes of 1).
    assert compiles == [1, 2, 2, 2, 2, 2, 2, 3, 3, 3]


# --------------------------------------------------------------------------------------------
# torch.export and ONNX
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@pytest.mark.parametrize("head", HEADS, ids=lambda head: head.__name__)
def test_exported_program_equals_eager_on_other_shapes(head, architecture):
    torch.manual_seed(0)
    model = head(config(architecture)).eval()
    program = mlm_export.export_program(model)
    batch = padded_batch((13, 4, 9), seq_len=13, seed=5)
    del batch["labels"]
    with torch.no_grad():
        expected, produced = model(**batch), program.module()(**batch)
    for name, value in expected.items():
        torch.testing.assert_close(produced[name], value, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.compile
def test_exported_program_keeps_packed_documents_apart():
    torch.manual_seed(0)
    model = MlmSuiteModel(config()).eval()
    inputs = {"input_ids": torch.randint(5, VOCAB, (2, 10)), "document_ids": torch.tensor([[0] * 4 + [1] * 6, [2] * 10])}
    program = torch.export.export(model, (), kwargs=inputs)
    with torch.no_grad():
        torch.testing.assert_close(
            program.module()(**inputs).last_hidden_state, model(**inputs).last_hidden_state, atol=1e-5, rtol=1e-5
        )


@pytest.mark.compile
def test_export_onnx_command_writes_a_file_onnxruntime_runs_like_eager(tmp_path, capsys):
    torch.manual_seed(0)
    source = tmp_path / "ner"
    MlmSuiteForTokenClassification(config("bert", id2label={0: "O", 1: "B-X", 2: "I-X"})).save_pretrained(source)
    difference = export_onnx.main(["--model_name_or_path", str(source), "--output", str(tmp_path / "ner.onnx")])
    assert difference < 1e-4
    assert (tmp_path / "ner.onnx").stat().st_size > 10_000
    assert "outputs logits" in capsys.readouterr().out
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "ner.onnx"))
    assert [item.name for item in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]


@pytest.mark.multiprocess
def test_export_onnx_user_errors_are_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mlm_suite.cli", "export-onnx", "--model_name_or_path", str(tmp_path), "--output", "x.onnx"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"mlm-suite export-onnx: error: --model_name_or_path {tmp_path}: no config.json there (an mlm_suite checkpoint folder)"


# --------------------------------------------------------------------------------------------
# The attention backend choice
# --------------------------------------------------------------------------------------------
def test_varlen_is_chosen_only_where_it_applies(monkeypatch):
    monkeypatch.setattr(attention, "varlen_attn", object())
    layout = SimpleNamespace(cu_seqlens=torch.tensor([0, 3], dtype=torch.int32))
    cuda_bf16 = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16)
    choose = attention.attention_backend
    assert choose("sdpa", cuda_bf16, layout, 0.0, False) == "varlen"
    assert choose("sdpa", SimpleNamespace(is_cuda=True, dtype=torch.float16), layout, 0.0, False) == "varlen"
    assert choose("sdpa", SimpleNamespace(is_cuda=True, dtype=torch.float32), layout, 0.0, False) == "sdpa"
    assert choose("sdpa", SimpleNamespace(is_cuda=False, dtype=torch.bfloat16), layout, 0.0, False) == "sdpa"
    assert choose("sdpa", cuda_bf16, layout, 0.1, False) == "sdpa"  # varlen_attn has no dropout
    assert choose("sdpa", cuda_bf16, layout, 0.0, True) == "eager"  # attention weights
    assert choose("eager", cuda_bf16, layout, 0.0, False) == "eager"
    assert choose("sdpa", cuda_bf16, SimpleNamespace(cu_seqlens=None), 0.0, False) == "sdpa"  # traced dense layout
    monkeypatch.setattr(attention, "varlen_attn", None)  # torch < 2.10
    assert choose("sdpa", cuda_bf16, layout, 0.0, False) == "sdpa"


# --------------------------------------------------------------------------------------------
# CUDA (run where a GPU is present; CI has none)
# --------------------------------------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
def test_cuda_varlen_equals_the_grid_in_bf16_and_hf_bert_in_fp32():
    from transformers import BertConfig, BertModel

    from mlm_suite.convert import convert_bert_state_dict

    torch.manual_seed(0)
    sizes = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    bert = BertModel(BertConfig(vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **sizes))
    model = MlmSuiteModel(config("bert", **sizes))
    model.load_state_dict(convert_bert_state_dict(bert.state_dict(), 2))
    bert, model = bert.cuda().eval(), model.cuda().eval()
    batch = {k: v.cuda() for k, v in padded_batch().items() if k != "labels"}
    real = batch["attention_mask"].bool()
    flat = {k: v.cuda() if torch.is_tensor(v) else v for k, v in flatten_batch(batch).items()}
    with torch.no_grad():
        reference = bert(**batch).last_hidden_state[real]
        torch.testing.assert_close(model(**batch).last_hidden_state[real], reference, atol=1e-4, rtol=1e-4)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert attention.attention_backend("sdpa", reference.bfloat16(), model.layout((1, 29), "cuda", **{
                "cu_seq_lens": flat["cu_seq_lens_q"], "max_length": flat["max_length_q"]}), 0.0, False) == "varlen"
            varlen_padded = model(**batch).last_hidden_state[real].float()
            varlen_flat = model(**flat).last_hidden_state[0].float()
            model.set_attn_implementation("eager")
            grid = model(**batch).last_hidden_state[real].float()
            model.set_attn_implementation("sdpa")
    torch.testing.assert_close(varlen_padded, grid, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(varlen_flat, grid, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(grid, reference, atol=1e-1, rtol=1e-1)


@pytest.mark.parametrize(
    "head", (MlmSuiteForSequenceClassification, MlmSuiteForPairClassification, MlmSuiteForTokenClassification),
    ids=lambda head: head.__name__,
)
def test_flattened_finetuning_step_equals_the_padded_one(head):
    """The fine-tuning collators' flattened batches (labels per row, or per token) train as the padded ones."""
    torch.manual_seed(0)
    model = head(config()).train()
    batch = padded_batch()
    per_row = head is not MlmSuiteForTokenClassification
    if per_row:
        batch["labels"] = torch.tensor([0, 2, 1, 2])
    else:
        batch["labels"] = batch["labels"].clamp(max=2).masked_fill(batch["labels"] < 0, -100)
    flat = flatten_batch(batch, labels_per_row=per_row, masked_lm_positions=False)
    assert "masked_lm_positions" not in flat
    losses, grads = [], []
    for inputs in (batch, flat):
        model.zero_grad()
        loss = model(**inputs, num_items_in_batch=torch.tensor(7)).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[1], losses[0])
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=name)


def test_flatten_batch_refuses_row_labels_of_packed_rows():
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long), "position_ids": torch.tensor([[0, 1, 0, 1]]),
             "labels": torch.tensor([1])}
    with pytest.raises(ValueError, match="classified sequences cannot be packed"):
        flatten_batch(batch, labels_per_row=True)


@cuda
def test_cuda_flattened_training_step_has_no_host_synchronisation():
    torch.manual_seed(0)
    model = MlmSuiteForMaskedLM(config()).cuda().train()
    flat = {k: v.cuda() if torch.is_tensor(v) else v for k, v in flatten_batch(padded_batch(), 8).items()}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(**flat).loss.backward()  # warm-up: lazy initialisations may synchronise
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            model(**flat).loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")


@cuda
def test_cuda_packed_documents_stay_isolated_under_varlen():
    torch.manual_seed(0)
    model = MlmSuiteModel(config()).cuda().eval()
    first, second = torch.randint(5, VOCAB, (1, 7)).cuda(), torch.randint(5, VOCAB, (1, 5)).cuda()
    packed = flatten_batch({"input_ids": torch.cat([first, second], dim=1).cpu(),
                            "document_ids": torch.tensor([[0] * 7 + [1] * 5])})
    packed = {k: v.cuda() if torch.is_tensor(v) else v for k, v in packed.items()}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        together = model(**packed).last_hidden_state[0].float()
        alone = torch.cat([model(input_ids=first).last_hidden_state[0], model(input_ids=second).last_hidden_state[0]]).float()
    torch.testing.assert_close(together, alone, atol=3e-2, rtol=3e-2)


# --------------------------------------------------------------------------------------------
# The pretraining job on flattened batches, compiled by the Trainer
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
@pytest.mark.slow  # over 10 s on 2 cores
def test_pretrain_job_on_flattened_compiled_batches_takes_the_padded_runs_steps(tmp_path):

    from mlm_suite.jobs.pretrain import main

    corpus = write_text(tmp_path / "train.txt", make_documents(30, seed=1))
    common = ["--train_file", str(corpus), "--validation_split_percentage", "20", "--packing", "--max_steps", "3"]
    common += ["--train_tokenizer", "false", "--max_eval_samples", "4", *BERT_ARCHITECTURE]
    runs = {
        "padded": [],
        "flattened": ["--flatten_batches"],
        "compiled": ["--flatten_batches", "--torch_compile", "--torch_compile_backend", "aot_eager"],
    }
    for name, flags in runs.items():
        assert main(job_args(tmp_path / name, *common, *flags)) == 0
    losses = {name: [e["loss"] for e in read_json(tmp_path / name / "trainer_state.json")["log_history"] if "loss" in e]
              for name in runs}
    assert len(losses["padded"]) == 3
    for name in ("flattened", "compiled"):
        assert losses[name] == pytest.approx(losses["padded"], rel=1e-5), name
        assert max_difference(weights(tmp_path / name), weights(tmp_path / "padded")) < 1e-5, name
