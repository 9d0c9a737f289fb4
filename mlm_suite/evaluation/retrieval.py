"""Scoring retrieval with sentence embeddings (recall@k, MRR@10, nDCG@10) during training, standalone or from
a ranking, and reranking a ranking with a cross-encoder. Training a bi-encoder is in
:mod:`mlm_suite.training.retrieval`. See docs/metrics.md#retrieval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mlm_suite.data.flattening import flatten_sequences

RANKING_DEPTH = 10  # MRR and nDCG are computed over the top 10


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
