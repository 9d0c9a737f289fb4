"""Bi-encoder retrieval with ``MlmSuiteForSentenceEmbedding``: batches, gradient caching, metrics, sentence-transformers files.

* :class:`RetrievalCollator` lays a batch's queries, positive documents and hard negatives end to
  end in one flattened row (no padding; ``labels`` = each query's positive), the input of the
  model's in-batch-negatives loss; texts to embed are flattened the same way.
* :class:`RetrievalTrainer` trains it with the HF Trainer. Negatives come from the batch, so
  gradient accumulation (which the loss supports: ``num_items_in_batch`` counts queries) does not
  enlarge the set of negatives; ``mini_batch_size`` does (gradient caching, Gao et al. 2021): the
  whole batch is embedded without a graph in mini-batches, the loss's gradient with respect to
  the embeddings is computed once, then each mini-batch is embedded again with a graph (same
  dropout) and back-propagates its share. The gradient equals the full batch's; memory is that
  of one mini-batch.
* :class:`RetrievalMetrics` (a ``compute_metrics`` for an evaluation set of queries followed by the
  corpus) and :func:`evaluate_retrieval` (standalone) report recall@k, MRR@10 and nDCG@10.
* :func:`rerank` reorders each query's top k with a sentence-pair model (a cross-encoder).
* :func:`write_sentence_transformers_files` makes a saved folder load with
  ``SentenceTransformer(path, trust_remote_code=True)``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mlm_suite.data.flattening import flatten_sequences, sequence_offsets
from mlm_suite.trainer import JobTrainer

RANKING_DEPTH = 10  # MRR and nDCG are computed over the top 10


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------
class RetrievalCollator:
    """Examples → one flattened batch, for training and for embedding.

    Training examples ``{"query": ids, "document": ids, "negatives": [ids, ...]}``: the sequences are
    the queries, their positive documents (query ``i``'s is document ``i``), then every hard
    negative, and ``labels`` ``(num_queries,)`` = ``0 .. num_queries - 1``. Texts to embed
    ``{"input_ids": ids, "index": i}``: one sequence (one embedding) per example, and ``indices``
    (what :meth:`RetrievalTrainer.prediction_step` reports as label ids, to check the order).
    """

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if "input_ids" in examples[0]:
            batch = flatten_sequences([example["input_ids"] for example in examples])
            batch["indices"] = torch.tensor([example["index"] for example in examples])
            return batch
        queries = [example["query"] for example in examples]
        documents = [example["document"] for example in examples]
        negatives = [negative for example in examples for negative in example.get("negatives", ())]
        batch = flatten_sequences(queries + documents + negatives)
        batch["labels"] = torch.arange(len(queries))
        return batch


def split_flat_batch(batch: Mapping[str, Any], max_sequences: int) -> list[dict[str, Any]]:
    """A flattened batch → consecutive flattened batches of at most ``max_sequences`` sequences each."""
    offsets = batch["cu_seq_lens_q"].long()
    lengths = offsets[1:] - offsets[:-1]  # (num_sequences,)
    chunks = []
    for start in range(0, lengths.numel(), max_sequences):
        end = min(start + max_sequences, lengths.numel())
        first, last = int(offsets[start]), int(offsets[end])
        chunk = {key: batch[key][:, first:last] for key in ("input_ids", "position_ids", "token_type_ids") if key in batch}
        chunks.append(chunk | sequence_offsets(lengths[start:end]))
    return chunks


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
class _RandomState:
    """The RNG state before a forward pass, to replay its dropout when the pass is repeated with a graph."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def replayed(self) -> Iterator[None]:
        with torch.random.fork_rng(devices=[self.device] if self.cuda is not None else []):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


class RetrievalTrainer(JobTrainer):
    """``JobTrainer`` for ``MlmSuiteForSentenceEmbedding`` with optional gradient caching (see the module).

    Args:
        mini_batch_size: embed at most this many sequences (queries, documents and negatives
            together) with a graph at a time; ``None``: the whole batch at once.
    """

    card_template = "retrieval"

    def __init__(self, *args: Any, mini_batch_size: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if mini_batch_size is not None and mini_batch_size < 1:
            raise ValueError(f"mini_batch_size must be at least 1, got {mini_batch_size}")
        if mini_batch_size is not None and self.args.world_size > 1 and getattr(self.model, "logit_scale", None) is not None:
            # The learned temperature's gradient is computed outside DDP's forward, so DDP would not average it.
            raise ValueError("a learned temperature cannot be trained with mini_batch_size on several processes")
        self.mini_batch_size = mini_batch_size

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        num_sequences = inputs["cu_seq_lens_q"].numel() - 1
        if self.mini_batch_size is None or num_sequences <= self.mini_batch_size:
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        inputs = self._prepare_inputs(inputs)
        labels = inputs.pop("labels")
        chunks = split_flat_batch(inputs, self.mini_batch_size)

        # 1. Every embedding, without a graph; the RNG state of each pass is kept to replay its dropout.
        states, pieces = [], []
        with torch.no_grad():
            for chunk in chunks:
                states.append(_RandomState(self.args.device))
                with self.compute_loss_context_manager():
                    pieces.append(model(**chunk).embeddings)
        embeddings = torch.cat(pieces).detach().requires_grad_()  # (num_sequences, hidden)

        # 2. The loss and its gradient with respect to the embeddings (and a learned temperature).
        with self.compute_loss_context_manager():
            loss, _ = self.accelerator.unwrap_model(model).contrastive_loss(embeddings, labels, num_items_in_batch)
        if num_items_in_batch is None:
            loss = loss / self.current_gradient_accumulation_steps  # as the Trainer scales a per-batch mean
        elif self.args.average_tokens_across_devices:
            # As compute_loss does: num_items_in_batch counts every process's queries and DDP averages the gradients.
            loss = loss * self.accelerator.num_processes
        self.accelerator.backward(loss)

        # 3. Each mini-batch again, with a graph, back-propagating its rows of that gradient; DDP
        # averages the gradients once, after the last one.
        for index, (chunk, state, gradient) in enumerate(zip(chunks, states, embeddings.grad.split([len(p) for p in pieces]))):
            last = index == len(chunks) - 1
            with contextlib.nullcontext() if last else self.accelerator.no_sync(model), state.replayed():
                with self.compute_loss_context_manager():
                    piece = model(**chunk).embeddings
                piece.backward(gradient.to(piece.dtype))
        return loss.detach()

    def prediction_step(
        self, model: torch.nn.Module, inputs: dict[str, Any], prediction_loss_only: bool, ignore_keys: Any = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """A batch of texts to embed → ``(None, embeddings, indices)``; a training batch → its loss, as the Trainer does.

        The Trainer only calls ``compute_metrics`` with label ids: the texts' positions in the
        evaluation set serve, and :class:`RetrievalMetrics` checks they arrive in order.
        """
        if "indices" not in inputs:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        inputs = self._prepare_inputs(inputs)
        indices = inputs.pop("indices")
        with torch.no_grad(), self.compute_loss_context_manager():
            embeddings = model(**inputs).embeddings
        return None, embeddings.float(), indices


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
def rank_documents(queries: torch.Tensor, documents: torch.Tensor, depth: int, chunk_size: int = 1024) -> torch.Tensor:
    """``(num_queries, min(depth, num_documents))`` indices of each query's best documents by cosine similarity, best first."""
    queries = F.normalize(queries.float(), dim=-1)
    documents = F.normalize(documents.float(), dim=-1)
    depth = min(depth, documents.shape[0])
    ranked = [torch.topk(block @ documents.T, depth, dim=1).indices for block in queries.split(chunk_size)]
    return torch.cat(ranked) if ranked else torch.zeros(0, depth, dtype=torch.long)


def retrieval_metrics(
    ranked: torch.Tensor | np.ndarray, relevant: Sequence[set[int]], ks: Sequence[int] = (1, 5, 10)
) -> dict[str, float]:
    """Recall@k, MRR@10 and nDCG@10 (binary relevance), averaged over the queries.

    Args:
        ranked: ``(num_queries, depth)`` document indices per query, best first (depth ≥ 10
            unless the corpus is smaller).
        relevant: per query, the indices of its relevant documents (at least one).

    recall@k: the fraction of a query's relevant documents among its top k. MRR@10: the inverse
    rank of the first relevant document in the top 10 (0 when none is). nDCG@10:
    ``sum(1 / log2(rank + 1))`` over the relevant documents in the top 10, divided by its best
    possible value. These are the definitions of sentence-transformers' InformationRetrievalEvaluator.
    """
    ranked = np.asarray(ranked)
    if len(ranked) != len(relevant):
        raise ValueError(f"{len(ranked)} rankings for {len(relevant)} queries")
    if any(not documents for documents in relevant):
        raise ValueError("every query needs at least one relevant document")
    discounts = 1.0 / np.log2(np.arange(2, RANKING_DEPTH + 2))  # rank 1, 2, ...
    totals = {f"recall@{k}": 0.0 for k in ks} | {f"mrr@{RANKING_DEPTH}": 0.0, f"ndcg@{RANKING_DEPTH}": 0.0}
    for row, documents in zip(ranked, relevant):
        hits = np.array([int(document) in documents for document in row])
        for k in ks:
            totals[f"recall@{k}"] += hits[:k].sum() / len(documents)
        top = hits[:RANKING_DEPTH]
        if top.any():
            totals[f"mrr@{RANKING_DEPTH}"] += 1.0 / (int(np.argmax(top)) + 1)
        ideal = discounts[: min(len(documents), RANKING_DEPTH)].sum()
        totals[f"ndcg@{RANKING_DEPTH}"] += float((discounts[: len(top)] * top).sum() / ideal)
    count = max(len(relevant), 1)
    return {name: float(value / count) for name, value in totals.items()} | {"n_queries": len(relevant)}


class RetrievalMetrics:
    """``compute_metrics`` for an evaluation set holding the queries, then the corpus (see :func:`retrieval_eval_dataset`).

    The Trainer's predictions are then every embedding, gathered from all processes in order.
    """

    def __init__(self, relevant: Sequence[set[int]], ks: Sequence[int] = (1, 5, 10)):
        self.relevant = list(relevant)
        self.ks = tuple(ks)

    def __call__(self, eval_pred: Any) -> dict[str, float]:
        embeddings = torch.as_tensor(np.asarray(eval_pred.predictions))
        order = np.asarray(eval_pred.label_ids)
        if not np.array_equal(order, np.arange(len(embeddings))):
            raise ValueError("the evaluation embeddings arrived out of order (label ids must be 0, 1, 2, ...)")
        num_queries = len(self.relevant)
        ranked = rank_documents(embeddings[:num_queries], embeddings[num_queries:], max(*self.ks, RANKING_DEPTH))
        return retrieval_metrics(ranked, self.relevant, self.ks)


def tokenize_texts(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids (with the special tokens) of each text, truncated to ``max_length``."""
    return tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]


def retrieval_eval_dataset(tokenizer: Any, queries: Sequence[str], corpus: Sequence[str], max_length: int) -> list[dict]:
    """The evaluation set :class:`RetrievalMetrics` reads: the queries, then the corpus, as ``{"input_ids", "index"}``."""
    texts = tokenize_texts(tokenizer, [*queries, *corpus], max_length)
    return [{"input_ids": ids, "index": index} for index, ids in enumerate(texts)]


def _on_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """A flattened batch with its tensors on ``device`` (``max_length_q`` stays a Python int)."""
    return {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


@torch.no_grad()
def embed_texts(
    model: Any, tokenizer: Any, texts: Sequence[str], batch_size: int = 64, max_length: int = 128, progress: bool = True
) -> torch.Tensor:
    """``(len(texts), hidden)`` float32 embeddings, in flattened (padding-free) batches, with a progress bar."""
    from tqdm.auto import tqdm

    model.eval()
    device = next(model.parameters()).device
    ids = tokenize_texts(tokenizer, texts, max_length)
    pieces = []
    for start in tqdm(range(0, len(ids), batch_size), desc="embedding", unit="batch", disable=not progress):
        batch = _on_device(flatten_sequences(ids[start : start + batch_size]), device)
        pieces.append(model(**batch).embeddings.float().cpu())
    return torch.cat(pieces) if pieces else torch.zeros(0, model.config.hidden_size)


def evaluate_retrieval(
    model: Any,
    tokenizer: Any,
    queries: Sequence[str],
    corpus: Sequence[str],
    relevant: Sequence[set[int]],
    batch_size: int = 64,
    max_length: int = 128,
    ks: Sequence[int] = (1, 5, 10),
    progress: bool = True,
) -> dict[str, float]:
    """Embed the corpus once and the queries, rank, and return :func:`retrieval_metrics`."""
    documents = embed_texts(model, tokenizer, corpus, batch_size, max_length, progress)
    query_embeddings = embed_texts(model, tokenizer, queries, batch_size, max_length, progress)
    return retrieval_metrics(rank_documents(query_embeddings, documents, max(*ks, RANKING_DEPTH)), relevant, ks)


@torch.no_grad()
def rerank(
    cross_encoder: Any,
    tokenizer: Any,
    queries: Sequence[str],
    corpus: Sequence[str],
    ranked: torch.Tensor,
    top_k: int = 10,
    relevant_label: str = "relevant",
    batch_size: int = 64,
    max_length: int = 256,
    progress: bool = True,
) -> torch.Tensor:
    """Reorder each query's first ``top_k`` documents by a cross-encoder's relevance score; the rest keep their places.

    ``cross_encoder`` is a sentence-pair model (``MlmSuiteForPairClassification``) reading
    ``[CLS] query [SEP] document [SEP]``: its score is the logit of ``relevant_label`` minus the log-sum-exp of
    the others (the log-odds of that class), or its single output for a regression head. Pairs run in
    flattened (padding-free) batches.
    """
    from tqdm.auto import tqdm

    cross_encoder.eval()
    device = next(cross_encoder.parameters()).device
    top_k = min(top_k, ranked.shape[1])
    candidates = ranked[:, :top_k]  # (num_queries, top_k)
    pairs = [(q, int(d)) for q, row in enumerate(candidates.tolist()) for d in row]
    scores = []
    for start in tqdm(range(0, len(pairs), batch_size), desc="reranking", unit="batch", disable=not progress):
        chunk = pairs[start : start + batch_size]
        encoded = tokenizer([queries[q] for q, _ in chunk], [corpus[d] for _, d in chunk], truncation=True,
                            max_length=max_length)
        batch = _on_device(flatten_sequences(encoded["input_ids"], encoded.get("token_type_ids")), device)
        logits = cross_encoder(**batch).logits.float()  # (pairs, num_labels)
        if logits.shape[1] == 1:
            scores.append(logits[:, 0].cpu())
        else:
            relevant = int(cross_encoder.config.label2id[relevant_label])
            others = torch.cat([logits[:, :relevant], logits[:, relevant + 1 :]], dim=1)
            scores.append((logits[:, relevant] - torch.logsumexp(others, dim=1)).cpu())
    order = torch.cat(scores).view(-1, top_k).argsort(dim=1, descending=True, stable=True)
    return torch.cat([candidates.gather(1, order), ranked[:, top_k:]], dim=1)


# --------------------------------------------------------------------------------------------
# sentence-transformers
# --------------------------------------------------------------------------------------------
def write_sentence_transformers_files(folder: str | Path, config: Any, max_seq_length: int) -> list[str]:
    """Add what ``SentenceTransformer(folder, trust_remote_code=True)`` reads to a saved model folder.

    modules.json: the Transformer module (``AutoModel``: the bare encoder), a Pooling module with
    ``config.sentence_pooling`` and, with ``config.normalize_embeddings``, a Normalize module.
    Returns the files written.
    """
    folder = Path(folder)
    mode = config.sentence_pooling
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if config.normalize_embeddings:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    pooling = {
        "word_embedding_dimension": config.hidden_size,
        "pooling_mode_cls_token": mode == "cls",
        "pooling_mode_mean_tokens": mode == "mean",
        "pooling_mode_max_tokens": mode == "max",
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }
    files = {
        "modules.json": modules,
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        "config_sentence_transformers.json": {"similarity_fn_name": "cosine", "prompts": {}, "default_prompt_name": None},
        "1_Pooling/config.json": pooling,
    }
    for name, value in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    return list(files)


__all__ = [
    "RANKING_DEPTH",
    "RetrievalCollator",
    "RetrievalMetrics",
    "RetrievalTrainer",
    "embed_texts",
    "evaluate_retrieval",
    "rank_documents",
    "rerank",
    "retrieval_eval_dataset",
    "retrieval_metrics",
    "split_flat_batch",
    "tokenize_texts",
    "write_sentence_transformers_files",
]
