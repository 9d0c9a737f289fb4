"""Retrieval: sentence embeddings, the in-batch-negatives loss, gradient caching, retrieval
metrics, the ``finetune-retrieval`` job, and folders that load through sentence-transformers and
``AutoModel`` without mlm_suite.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, TrainingArguments

from mlm_suite import MlmSuiteForSentenceEmbedding, MlmSuiteModel
from mlm_suite.cli import main as cli_main
from mlm_suite.data.inputs.builtin import wordnet_gloss_splits
from mlm_suite.data.flattening import flatten_sequences
from mlm_suite.jobs import finetune_retrieval
from mlm_suite.model.layout import SequenceLayout
from mlm_suite.model.modeling_mlm_suite import in_batch_negatives_loss, pool_sequences
from mlm_suite.training.retrieval import EmbeddingPrediction, GradientCaching, RetrievalCollator, split_flat_batch
from mlm_suite.training.trainer import JobTrainer, standard_features
from mlm_suite.evaluation.retrieval import RetrievalMetrics, embed_texts, evaluate_retrieval, rerank, retrieval_metrics
from tests.helpers import (
    RETRIEVAL_WORDS,
    assert_valid_model_card,
    make_random_batch,
    make_tiny_config,
    results_of,
    write_jsonl,
)

REPO = Path(__file__).resolve().parents[2]
FAST = ["--report_to", "none", "--disable_tqdm", "true", "--per_device_eval_batch_size", "8"]


def naive_pool(states: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """What sentence-transformers' Pooling computes on a padded batch."""
    if mode == "cls":
        return states[:, 0]
    if mode == "max":
        return states.masked_fill(mask[..., None] == 0, -1e9).max(dim=1).values
    weights = mask[..., None].float()
    return (states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
@pytest.mark.parametrize("normalize", [False, True])
def test_pooling_equals_a_naive_padded_computation_whatever_the_padding(mode, normalize):
    config = make_tiny_config(sentence_pooling=mode, normalize_embeddings=normalize)
    torch.manual_seed(0)
    model = MlmSuiteForSentenceEmbedding(config).eval()
    lengths = (7, 4, 9, 1)
    batch = make_random_batch(lengths, pairs=False)
    with torch.no_grad():
        states = model.encoder(**batch).last_hidden_state
        expected = naive_pool(states, batch["attention_mask"], mode)
        if normalize:
            expected = F.normalize(expected, dim=-1)
        padded = model(**batch).embeddings
        more_padding = model(**{key: F.pad(value, (0, 11)) for key, value in batch.items()}).embeddings
        sequences = [batch["input_ids"][row, :length].tolist() for row, length in enumerate(lengths)]
        flattened = model(**flatten_sequences(sequences)).embeddings
    assert padded.shape == (4, config.hidden_size)
    torch.testing.assert_close(padded, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(more_padding, padded, rtol=0, atol=1e-6)
    torch.testing.assert_close(flattened, padded, rtol=0, atol=1e-6)
    if normalize:
        torch.testing.assert_close(padded.norm(dim=-1), torch.ones(4))


@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
def test_traced_dense_layout_pools_as_the_padding_free_one(mode):
    """torch.compile / torch.export trace every cell of the grid; pooling must hide the pads there too."""
    hidden, mask = torch.randn(3, 5, 4), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    dense = SequenceLayout.traced_dense((3, 5), torch.device("cpu"), mask)
    padding_free = SequenceLayout.from_inputs((3, 5), torch.device("cpu"), mask)
    traced = pool_sequences(hidden.reshape(15, 4), dense, mask, mode)
    flat = pool_sequences(padding_free.unpad(hidden), padding_free, mask, mode)
    torch.testing.assert_close(traced, flat)
    torch.testing.assert_close(flat, naive_pool(hidden, mask, mode))


def test_folder_loads_as_encoder_and_keeps_a_learned_temperature(tmp_path):
    config = make_tiny_config(learn_temperature=True, contrastive_temperature=0.1)
    model = MlmSuiteForSentenceEmbedding(config)
    assert model.logit_scale.detach().item() == pytest.approx(math.log(10.0))
    assert model.similarity_scale().detach().item() == pytest.approx(10.0)
    with torch.no_grad():
        model.logit_scale.fill_(2.0)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"]["AutoModel"] == "modeling_mlm_suite.MlmSuiteModel"  # what sentence-transformers loads
    assert (tmp_path / "modeling_mlm_suite.py").is_file() and (tmp_path / "layout.py").is_file()
    assert MlmSuiteForSentenceEmbedding.from_pretrained(tmp_path).logit_scale.detach().item() == pytest.approx(2.0)
    encoder = MlmSuiteModel.from_pretrained(tmp_path)
    torch.testing.assert_close(encoder.embeddings.word_embeddings.weight, model.encoder.embeddings.word_embeddings.weight)
    # a checkpoint without one starts from the configured temperature
    MlmSuiteModel(make_tiny_config()).save_pretrained(tmp_path / "encoder")
    fresh = MlmSuiteForSentenceEmbedding.from_pretrained(tmp_path / "encoder", learn_temperature=True)
    assert fresh.logit_scale.detach().item() == pytest.approx(math.log(1 / 0.05))


# --------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------
def reference_loss(queries, documents, labels, scale, symmetric, divisor=None) -> float:
    """InfoNCE written out with Python loops."""
    def cosine(a, b):
        return float(a @ b) / (float(a.norm()) * float(b.norm()))

    def cross_entropy(scores, target):
        return math.log(sum(math.exp(s) for s in scores)) - scores[target]

    total = 0.0
    for i, query in enumerate(queries):
        total += cross_entropy([scale * cosine(query, d) for d in documents], int(labels[i]))
    if symmetric:
        backward = sum(cross_entropy([scale * cosine(documents[int(labels[j])], q) for q in queries], j)
                       for j in range(len(queries)))
        total = (total + backward) / 2
    return total / (divisor if divisor is not None else len(queries))


@pytest.mark.parametrize("symmetric", [False, True])
def test_in_batch_negatives_loss_equals_a_hand_written_reference(symmetric):
    generator = torch.Generator().manual_seed(0)
    queries, documents = torch.randn(3, 8, generator=generator), torch.randn(5, 8, generator=generator)  # 2 hard negatives
    labels = torch.tensor([0, 1, 2])
    loss, scores = in_batch_negatives_loss(queries, documents, labels, 20.0, symmetric)
    assert scores.shape == (3, 5)
    assert loss.item() == pytest.approx(reference_loss(queries, documents, labels, 20.0, symmetric), rel=1e-5)
    # num_items_in_batch (queries over an accumulated batch): the sum divided by it
    loss, _ = in_batch_negatives_loss(queries, documents, labels, 20.0, symmetric, num_items_in_batch=torch.tensor(12))
    assert loss.item() == pytest.approx(reference_loss(queries, documents, labels, 20.0, symmetric, 12), rel=1e-5)


def test_in_batch_negatives_loss_refuses_a_batch_of_one_document():
    # One query and its positive: every score is the positive's, the loss is exactly 0 and nothing would train.
    one_pair = torch.randn(1, 8), torch.randn(1, 8)
    with pytest.raises(ValueError, match="at least 2 documents"):
        in_batch_negatives_loss(*one_pair, torch.tensor([0]), 20.0)
    with_a_hard_negative = torch.randn(2, 8)  # one pair and its hard negative still rank something
    loss, _ = in_batch_negatives_loss(one_pair[0], with_a_hard_negative, torch.tensor([0]), 20.0)
    assert loss.item() > 0


def test_fine_tuning_leaves_out_a_last_batch_of_one_pair(tiny_model, tmp_path, capsys):
    from mlm_suite.jobs import finetune_retrieval

    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"query": f"q {i}", "document": f"d {i}"} for i in range(5)])
    finetune_retrieval.main(["--model_name_or_path", str(tiny_model), "--train_file", str(pairs), "--num_train_epochs",
                             "1", "--per_device_train_batch_size", "2", "--output_dir", str(tmp_path / "out")])
    assert "each epoch leaves out one of the 5 pairs" in capsys.readouterr().err
    results = json.loads((tmp_path / "out" / "train_results.json").read_text())
    # two batches of two pairs; the fifth pair alone would have no negatives (the loss would refuse it)
    assert round(results["train_steps_per_second"] * results["train_runtime"]) == 2
    assert json.loads((tmp_path / "out" / "training_args.json").read_text())["dataloader_drop_last"] is True


def test_model_loss_uses_queries_first_then_documents_and_the_learned_scale():
    config = make_tiny_config(learn_temperature=True, contrastive_symmetric=True)
    torch.manual_seed(0)
    model = MlmSuiteForSentenceEmbedding(config)
    batch = RetrievalCollator()([{"query": [5, 6, 7], "document": [8, 9], "negatives": [[10, 11, 12, 13]]},
                                 {"query": [14], "document": [15, 16, 17]}])
    out = model(**batch)
    embeddings = out.embeddings
    expected = reference_loss(embeddings[:2].detach(), embeddings[2:].detach(), batch["labels"], 20.0, True)
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)
    out.loss.backward()
    assert model.logit_scale.grad is not None and model.logit_scale.grad.abs() > 0
    assert all(p.grad is not None for name, p in model.named_parameters() if not name.startswith("encoder.pooler"))
    assert not any(p.requires_grad for p in model.unused_parameters())  # kept for AutoModel, never used
    with pytest.raises(ValueError, match="one positive-document index per query"):
        model(**{**batch, "labels": torch.arange(5)})


# --------------------------------------------------------------------------------------------
# Gradient caching
# --------------------------------------------------------------------------------------------
def trainer_for(model, tmp_path, mini_batch_size) -> JobTrainer:
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], label_names=["labels"],
                             remove_unused_columns=False)
    caching = [GradientCaching(mini_batch_size)] if mini_batch_size is not None else []
    trainer = JobTrainer(model=model, args=args, data_collator=RetrievalCollator(),
                         features=(*standard_features(), EmbeddingPrediction(), *caching))
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which these tests call into
    return trainer


def contrastive_batch(seed: int = 0, size: int = 6) -> dict:
    generator = torch.Generator().manual_seed(seed)

    def text() -> list[int]:
        return torch.randint(1, 99, (int(torch.randint(2, 9, (1,), generator=generator)),), generator=generator).tolist()

    return RetrievalCollator()([{"query": text(), "document": text(), "negatives": [text()] if i % 2 else []}
                                for i in range(size)])


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_gradient_cache_gives_the_full_batch_gradient(tmp_path):
    """15 sequences in mini-batches of 4: the same loss and the same gradient as one pass over the batch."""
    torch.manual_seed(0)
    model = MlmSuiteForSentenceEmbedding(make_tiny_config(learn_temperature=True))
    batch = contrastive_batch()
    assert batch["cu_seq_lens_q"].numel() - 1 == 15
    full_loss = trainer_for(model, tmp_path / "full", None).training_step(model, dict(batch))
    full = gradients(model)
    model.zero_grad()
    cached_loss = trainer_for(model, tmp_path / "cached", 4).training_step(model, dict(batch))
    cached = gradients(model)
    assert cached_loss.item() == pytest.approx(full_loss.item(), rel=1e-5)
    assert cached.keys() == full.keys() and "logit_scale" in cached
    for name in full:
        torch.testing.assert_close(cached[name], full[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("mini_batch_size", [None, 4])
def test_gradient_accumulation_averages_over_the_queries_of_the_accumulated_batch(mini_batch_size, tmp_path):
    """The Trainer counts the queries of every micro-batch (num_items_in_batch); each step's loss is its sum over that count."""
    torch.manual_seed(0)
    model = MlmSuiteForSentenceEmbedding(make_tiny_config())
    trainer = trainer_for(model, tmp_path, mini_batch_size)
    trainer.current_gradient_accumulation_steps = 2
    batches = [contrastive_batch(0, 6), contrastive_batch(1, 4)]
    count = trainer._get_num_items_in_batch(batches, torch.device("cpu"))
    assert int(count) == 10
    steps = [trainer.training_step(model, dict(batch), count).item() for batch in batches]
    with torch.no_grad():
        sums = [model(**batch).loss.item() * len(batch["labels"]) for batch in batches]  # mean × queries
    assert sum(steps) == pytest.approx(sum(sums) / 10, rel=1e-5)


def test_gradient_cache_replays_each_mini_batchs_dropout(tmp_path, monkeypatch):
    """With dropout, the second (graph-building) pass of a mini-batch must see the first pass's masks."""
    torch.manual_seed(0)
    model = MlmSuiteForSentenceEmbedding(make_tiny_config(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3))
    seen = []
    forward = model.forward

    def recording(*args, **kwargs):
        out = forward(*args, **kwargs)
        seen.append(out.embeddings.detach().clone())
        return out

    monkeypatch.setattr(model, "forward", recording)
    trainer_for(model, tmp_path, 4).training_step(model, contrastive_batch())
    assert len(seen) == 8  # 4 mini-batches, twice
    first, second = seen[:4], seen[4:]
    for a, b in zip(first, second):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    assert not torch.equal(seen[0], seen[1][: len(seen[0])]) or len(seen[0]) != len(seen[1])


def test_split_flat_batch_keeps_every_sequence():
    sequences = [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10], [11]]
    batch = flatten_sequences(sequences)
    chunks = split_flat_batch(batch, 2)
    assert [chunk["cu_seq_lens_q"].tolist() for chunk in chunks] == [[0, 3, 4], [0, 2, 6], [0, 1]]
    assert [chunk["max_length_q"] for chunk in chunks] == [3, 4, 1]
    assert torch.cat([chunk["input_ids"][0] for chunk in chunks]).tolist() == list(range(1, 12))
    assert torch.cat([chunk["position_ids"][0] for chunk in chunks]).tolist() == [0, 1, 2, 0, 0, 1, 0, 1, 2, 3, 0]


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
def test_retrieval_metrics_equal_hand_computed_values():
    ranked = np.array([
        [3, 1, 2, 0, 4, 5, 6, 7, 8, 9, 10],   # relevant {1}: rank 2
        [0, 5, 6, 7, 8, 9, 10, 11, 12, 2, 1],  # relevant {2, 1}: ranks 10 and 11
        [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0],  # relevant {0}: rank 11, outside the top 10
        [7, 0, 1, 2, 3, 4, 5, 6, 8, 9, 10],   # relevant {7}: rank 1
    ])
    relevant = [{1}, {2, 1}, {0}, {7}]
    metrics = retrieval_metrics(ranked, relevant)
    assert metrics["recall@1"] == pytest.approx((0 + 0 + 0 + 1) / 4)
    assert metrics["recall@5"] == pytest.approx((1 + 0 + 0 + 1) / 4)
    assert metrics["recall@10"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert metrics["mrr@10"] == pytest.approx((1 / 2 + 1 / 10 + 0 + 1) / 4)
    ndcg = [1 / math.log2(3), (1 / math.log2(11)) / (1 + 1 / math.log2(3)), 0.0, 1.0]
    assert metrics["ndcg@10"] == pytest.approx(sum(ndcg) / 4)
    assert metrics["n_queries"] == 4
    with pytest.raises(ValueError, match="at least one relevant document"):
        retrieval_metrics(ranked[:1], [set()])


def test_rerank_orders_the_top_k_by_the_cross_encoders_log_odds_and_keeps_the_rest():
    from mlm_suite import MlmSuiteForPairClassification
    from mlm_suite.data.inputs import downloads

    tokenizer = AutoTokenizer.from_pretrained(downloads.minilm_dir())
    config = make_tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=128, num_labels=3,
                              id2label={0: "irrelevant", 1: "relevant", 2: "unsure"},
                              label2id={"irrelevant": 0, "relevant": 1, "unsure": 2})
    torch.manual_seed(0)
    model = MlmSuiteForPairClassification(config).eval()
    queries = ["what is a violin", "where is the harbor", "tiger"]
    corpus = ["a string instrument", "a place for ships", "a large cat", "a kind of fruit", "a small boat", "music"]
    ranked = torch.tensor([[5, 0, 3, 1, 2, 4], [1, 4, 2, 0, 5, 3], [3, 2, 1, 5, 4, 0]])
    reranked = rerank(model, tokenizer, queries, corpus, ranked, top_k=4, batch_size=5, progress=False)
    for q, (row, new_row) in enumerate(zip(ranked.tolist(), reranked.tolist())):
        scores = []
        for d in row[:4]:
            with torch.no_grad():
                logits = model(**tokenizer(queries[q], corpus[d], return_tensors="pt")).logits[0]
            scores.append(float(logits[1] - torch.logsumexp(logits[[0, 2]], dim=0)))
        assert new_row[:4] == [row[i] for i in sorted(range(4), key=lambda i: -scores[i])]
        assert new_row[4:] == row[4:]


def test_retrieval_metrics_as_compute_metrics_check_the_order():
    from transformers import EvalPrediction

    embeddings = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0], [3.0, 0.1]])  # 2 queries, then 2 documents
    metric = RetrievalMetrics([{1}, {0}])
    assert metric(EvalPrediction(embeddings, np.arange(4)))["mrr@10"] == 1.0
    with pytest.raises(ValueError, match="out of order"):
        metric(EvalPrediction(embeddings, np.array([1, 0, 2, 3])))


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def retrieval_run(tiny_model, retrieval_files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("retrieval_run") / "out"
    finetune_retrieval.main([
        "--model_name_or_path", str(tiny_model), "--train_file", str(retrieval_files["train"]),
        "--corpus_file", str(retrieval_files["corpus"]), "--queries_file", str(retrieval_files["queries"]),
        "--test_corpus_file", str(retrieval_files["corpus"]), "--test_queries_file", str(retrieval_files["queries"]),
        "--output_dir", str(out), "--num_train_epochs", "25", "--per_device_train_batch_size", "10",
        "--learning_rate", "2e-3", "--seed", "0", *FAST,
    ])
    return out


def test_fine_tuning_learns_the_toy_task(retrieval_run, retrieval_files):
    """About 75 steps from a random encoder must learn the pairing that the zero-shot ranking cannot know."""
    results = json.loads((retrieval_run / "all_results.json").read_text())
    assert results["eval_n_queries"] == len(RETRIEVAL_WORDS)
    assert results["zero_shot_eval_mrr@10"] < 0.4
    assert results["eval_mrr@10"] > results["zero_shot_eval_mrr@10"] + 0.3, results
    # standalone evaluation of the saved model gives what the Trainer's compute_metrics gave
    queries = [json.loads(line)["query"] for line in retrieval_files["queries"].read_text().splitlines()]
    corpus = [json.loads(line)["text"] for line in retrieval_files["corpus"].read_text().splitlines()]
    standalone = evaluate_retrieval(MlmSuiteForSentenceEmbedding.from_pretrained(retrieval_run),
                                    AutoTokenizer.from_pretrained(retrieval_run), queries, corpus,
                                    [{i} for i in range(len(queries))], batch_size=7, progress=False)
    for name in ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"):
        assert results[f"test_{name}"] == pytest.approx(results[f"eval_{name}"])  # the same files
        assert standalone[name] == pytest.approx(results[f"eval_{name}"], abs=1e-6), name
    card = (retrieval_run / "README.md").read_text()
    assert "library_name: sentence-transformers" in card and "| validation | fine-tuned |" in card
    metadata = assert_valid_model_card(card)
    assert (metadata["library_name"], metadata["pipeline_tag"]) == ("sentence-transformers", "sentence-similarity")
    scores = results_of(metadata)  # the fine-tuned model's scores; zero-shot ones are the starting model's
    assert scores[("validation", "mrr@10 (cosine similarity)")] == results["eval_mrr@10"] and len(scores) == 10
    modules = json.loads((retrieval_run / "modules.json").read_text())
    assert [module["type"].rsplit(".", 1)[-1] for module in modules] == ["Transformer", "Pooling", "Normalize"]


# Loads the saved folder where mlm_suite cannot be imported, with sentence-transformers and with AutoModel
# (pooled by hand), runs the card's snippets, and prints the embeddings as JSON.
LOADER = r"""
import json, os, re, sys
folder, repo, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path[:] = [p for p in sys.path if p not in ("", ".") and os.path.realpath(p) != os.path.realpath(repo)]
sys.meta_path[:] = [f for f in sys.meta_path if "mlm_suite" not in getattr(f, "__module__", "")]
sys.modules["mlm_suite"] = None
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer
st = SentenceTransformer(folder, trust_remote_code=True, device="cpu")
st_embeddings = st.encode(texts, convert_to_tensor=True)
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
model = AutoModel.from_pretrained(folder, trust_remote_code=True)
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
batch = tokenizer(texts, padding=True, return_tensors="pt")
with torch.no_grad():
    states = model(**batch).last_hidden_state
mask = batch["attention_mask"][..., None].float()
auto_embeddings = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
card = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
blocks = re.findall(r"```python\n(.*?)```", card, flags=re.S)
for block in blocks:
    namespace = {}
    exec(block, namespace)
print("SNIPPETS", len(blocks), namespace["embeddings"].shape[1])
print("EMBEDDINGS", json.dumps({"st": st_embeddings.tolist(), "auto": auto_embeddings.tolist()}))
"""


@pytest.mark.multiprocess
@pytest.mark.slow  # over 10 s on 2 cores
def test_saved_folder_loads_without_mlm_suite_with_the_same_embeddings(retrieval_run, tmp_path):
    texts = ["what is a violin", "a much longer sentence about the harbor and the island and the ocean", "tiger"]
    expected = embed_texts(MlmSuiteForSentenceEmbedding.from_pretrained(retrieval_run),
                           AutoTokenizer.from_pretrained(retrieval_run), texts, progress=False)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    done = subprocess.run([sys.executable, "-I", "-c", LOADER, str(retrieval_run), str(REPO), json.dumps(texts)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "trust_remote_code" not in done.stdout + done.stderr
    assert "SNIPPETS 2 32" in done.stdout
    loaded = json.loads(done.stdout.split("EMBEDDINGS ", 1)[1])
    for name in ("st", "auto"):
        torch.testing.assert_close(torch.tensor(loaded[name]), expected, rtol=0, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    "rows, dropped, flags, fragments",
    [
        ({"train": [{"query": "a"}, {"query": "b", "document": ""}]}, None, [], ["train.jsonl line 1", "no 'document'"]),
        ({"corpus": []}, None, [], ["corpus.jsonl: the corpus is empty"]),
        ({"corpus": [{"id": "d1", "text": "x"}, {"id": "d2", "text": "y"}, {"id": "d1", "text": "z"}]}, None, [],
         ["corpus.jsonl line 3: duplicate document id 'd1' (first on line 1)"]),
        ({"queries": [{"query": "q", "document_id": "nope"}]}, None, [], ["queries.jsonl line 1: document id 'nope' is not in"]),
        ({}, "--corpus_file", [], ["--corpus_file and --queries_file go together"]),
        ({}, None, ["--temperature", "0"], ["--temperature must be positive"]),
        ({}, None, ["--mini_batch_size", "0"], ["--mini_batch_size must be at least 1"]),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(rows, dropped, flags, fragments, tiny_model, tmp_path, capsys):
    files = {"train": [{"query": "q", "document": "d"}], "corpus": [{"id": "d1", "text": "x"}],
             "queries": [{"query": "q", "document_id": "d1"}]} | rows
    paths = {name: write_jsonl(tmp_path / f"{name}.jsonl", records) for name, records in files.items()}
    given = {"--train_file": paths["train"], "--corpus_file": paths["corpus"], "--queries_file": paths["queries"]}
    argv = ["finetune-retrieval", "--model_name_or_path", str(tiny_model), "--output_dir", str(tmp_path / "out"),
            "--report_to", "none", *flags]
    argv += [str(item) for flag, path in given.items() if flag != dropped for item in (flag, path)]
    capsys.readouterr()
    try:
        status = cli_main(argv)
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert status == 2 and len(lines) == 1, err
    assert lines[0].startswith("mlm-suite finetune-retrieval: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], err
    assert not (tmp_path / "out").exists()


def test_training_without_an_evaluation_split_says_so_in_the_card(tiny_model, retrieval_files, tmp_path):
    finetune_retrieval.main(["--model_name_or_path", str(tiny_model), "--train_file", str(retrieval_files["train"]),
                             "--output_dir", str(tmp_path / "out"), "--max_steps", "2", *FAST])
    results = json.loads((tmp_path / "out" / "all_results.json").read_text())
    assert "train_loss" in results and not any(key.startswith(("eval_", "zero_shot")) for key in results)
    assert "Not evaluated: the run had no evaluation split" in (tmp_path / "out" / "README.md").read_text()


@pytest.mark.slow  # over 10 s on 2 cores
def test_wordnet_gloss_task_is_split_by_synset():
    pairs, splits = wordnet_gloss_splits(0)
    train_glosses = {pair["document"] for pair in pairs}
    validation, test = splits["validation"], splits["test"]
    assert len(pairs) > 30_000 and len(validation.queries) > 3_000 and len(test.corpus) > 3_000
    # glosses are unique per synset, so a gloss in two splits would be a synset in two splits
    assert not train_glosses & set(validation.corpus) and not train_glosses & set(test.corpus)
    assert not set(validation.corpus) & set(test.corpus)
    assert len(set(test.corpus)) == len(test.corpus)
    assert all(len(relevant) == 1 and 0 <= next(iter(relevant)) < len(test.corpus) for relevant in test.relevant)
    assert wordnet_gloss_splits(0)[1]["test"].queries == test.queries  # reproducible
