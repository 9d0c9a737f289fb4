"""Training a bi-encoder for retrieval with ``MlmSuiteForSentenceEmbedding``: batches, gradient caching, sentence-transformers files.

* :class:`RetrievalCollator` lays a batch's queries, positive documents and hard negatives end to
  end in one flattened row (no padding; ``labels`` = each query's positive), the input of the
  model's in-batch-negatives loss; texts to embed are flattened the same way.
* :class:`GradientCaching` and :class:`EmbeddingPrediction`, features of the jobs' Trainer, train and embed with
  it. Negatives come from the batch, so
  gradient accumulation (which the loss supports: ``num_items_in_batch`` counts queries) does not
  enlarge the set of negatives; ``mini_batch_size`` does (gradient caching, Gao et al. 2021): the
  whole batch is embedded without a graph in mini-batches, the loss's gradient with respect to
  the embeddings is computed once, then each mini-batch is embedded again with a graph (same
  dropout) and back-propagates its share. The gradient equals the full batch's; memory is that
  of one mini-batch.
* :func:`write_sentence_transformers_files` makes a saved folder load with
  ``SentenceTransformer(path, trust_remote_code=True)``.

Scoring (recall@k, MRR@10, nDCG@10, reranking) is in :mod:`mlm_suite.evaluation.retrieval`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mlm_suite.data.flattening import flatten_sequences, sequence_offsets
from mlm_suite.training.features import Run, StepContext, TrainerFeature

# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------
class RetrievalCollator:
    """Examples → one flattened batch, for training and for embedding.

    Training examples ``{"query": ids, "document": ids, "negatives": [ids, ...]}``: the sequences are
    the queries, their positive documents (query ``i``'s is document ``i``), then every hard
    negative, and ``labels`` ``(num_queries,)`` = ``0 .. num_queries - 1``. Texts to embed
    ``{"input_ids": ids, "index": i}``: one sequence (one embedding) per example, and ``indices``
    (what :class:`EmbeddingPrediction` reports as label ids, to check the order).
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


class GradientCaching(TrainerFeature):
    """Gradient caching (see the module), a feature of :class:`~mlm_suite.training.trainer.JobTrainer` training
    ``MlmSuiteForSentenceEmbedding``: a batch of more than ``mini_batch_size`` sequences (queries, documents and
    negatives together) is embedded with a graph at most that many at a time; a smaller one takes the Trainer's
    own step."""

    def __init__(self, mini_batch_size: int) -> None:
        if mini_batch_size < 1:
            raise ValueError(f"mini_batch_size must be at least 1, got {mini_batch_size}")
        self.mini_batch_size = mini_batch_size

    def start(self, run: Run) -> None:
        if run.args.world_size > 1 and getattr(run.model, "logit_scale", None) is not None:
            # The learned temperature's gradient is computed outside DDP's forward, so DDP would not average it.
            raise ValueError("a learned temperature cannot be trained with mini_batch_size on several processes")

    def training_step(self, step: StepContext, model: torch.nn.Module, inputs: dict[str, Any],
                      num_items: Any) -> torch.Tensor | None:
        num_sequences = inputs["cu_seq_lens_q"].numel() - 1
        if num_sequences <= self.mini_batch_size:
            return None
        model.train()
        inputs = step.prepare_inputs(inputs)
        labels = inputs.pop("labels")
        chunks = split_flat_batch(inputs, self.mini_batch_size)
        accelerator = step.accelerator

        # 1. Every embedding, without a graph; the RNG state of each pass is kept to replay its dropout.
        states, pieces = [], []
        with torch.no_grad():
            for chunk in chunks:
                states.append(_RandomState(step.args.device))
                with step.compute_loss_context_manager():
                    pieces.append(model(**chunk).embeddings)
        embeddings = torch.cat(pieces).detach().requires_grad_()  # (num_sequences, hidden)

        # 2. The loss and its gradient with respect to the embeddings (and a learned temperature).
        with step.compute_loss_context_manager():
            loss, _ = accelerator.unwrap_model(model).contrastive_loss(embeddings, labels, num_items)
        if num_items is None:
            loss = loss / step.current_gradient_accumulation_steps  # as the Trainer scales a per-batch mean
        elif step.args.average_tokens_across_devices:
            # As compute_loss does: num_items_in_batch counts every process's queries and DDP averages the gradients.
            loss = loss * accelerator.num_processes
        accelerator.backward(loss)

        # 3. Each mini-batch again, with a graph, back-propagating its rows of that gradient; DDP
        # averages the gradients once, after the last one.
        for index, (chunk, state, gradient) in enumerate(zip(chunks, states, embeddings.grad.split([len(p) for p in pieces]))):
            last = index == len(chunks) - 1
            with contextlib.nullcontext() if last else accelerator.no_sync(model), state.replayed():
                with step.compute_loss_context_manager():
                    piece = model(**chunk).embeddings
                piece.backward(gradient.to(piece.dtype))
        return loss.detach()


class EmbeddingPrediction(TrainerFeature):
    """Evaluation batches of texts to embed (:class:`RetrievalCollator`'s, with ``indices``) → ``(None, embeddings,
    indices)``, a feature of :class:`~mlm_suite.training.trainer.JobTrainer`; a training batch is scored as the
    Trainer scores it.

    The Trainer only calls ``compute_metrics`` with label ids: the texts' positions in the evaluation set serve, and
    :class:`~mlm_suite.evaluation.retrieval.RetrievalMetrics` checks they arrive in order.
    """

    def prediction_step(self, step: StepContext, model: torch.nn.Module,
                        inputs: dict[str, Any]) -> tuple[Any, Any, Any] | None:
        if "indices" not in inputs:
            return None
        inputs = step.prepare_inputs(inputs)
        indices = inputs.pop("indices")
        with torch.no_grad(), step.compute_loss_context_manager():
            embeddings = model(**inputs).embeddings
        return None, embeddings.float(), indices


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
    "EmbeddingPrediction",
    "GradientCaching",
    "RetrievalCollator",
    "split_flat_batch",
    "write_sentence_transformers_files",
]
