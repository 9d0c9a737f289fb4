"""Speed benchmark: mlm_suite vs Hugging Face BERT (sdpa) and ModernBERT, on CPU or a CUDA GPU.

Run ``python benchmarks/bench_speed.py`` (``make bench``); ``--quick`` is a < 60 s smoke run;
``--device cuda`` runs the GPU workloads (BERT-base, bf16 autocast, fused AdamW; CUDA timings are
synchronised and the memory column is the allocator's peak); ``--compile`` adds mlm_suite under
``torch.compile``. It prints a markdown table and optionally writes ``--output results.json`` /
``--markdown table.md``. Besides HF BERT, mlm_suite on padded batches and ModernBERT, every run
times mlm_suite on flattened batches (``mlm_suite.data.flattening``, built before the timing as a
data loader would), which on CUDA uses ``varlen_attn`` and needs no host synchronisation.

``--families`` (all of bert, roberta, xlm-roberta, distilbert, electra, modernbert, or those named) runs, instead of
the BERT workloads, the variable-length MLM workload once per family: transformers' own masked LM of the family
(``RobertaForMaskedLM``, ``XLMRobertaForMaskedLM``, ``DistilBertForMaskedLM``, ``ElectraForMaskedLM``, the
generator, whose embeddings are narrower than its hidden size, and ``ModernBertForMaskedLM`` at ``modernbert_config``'s
sizes, its full and sliding-window layers alternating as by default) at the workload's size with random weights, saved
and converted by ``mlm_suite.convert_checkpoint`` as a user's folder is, against that conversion on padded and
flattened batches; it prints one row per family. BERT's row (``BertForMaskedLM``) is the BERT workload's comparison
made the same way: a reference measured under the same load as the others.

Method
------
* **Identical work.** mlm_suite and BERT get identical weights (BERT's, mapped with
  ``mlm_suite.conversion.bert.convert_bert_state_dict``), identical batches and identical labels (a seeded
  15 % BERT-style 80/10/10 masking of the real, non-special tokens). Dropout is 0 so the two compute
  the same function; before timing, the script checks that their losses (training workloads) or
  hidden states (inference) agree to 1e-4 in fp32 and aborts if they do not. ModernBERT is a
  different architecture of matched size (see ``modernbert_config``): in the BERT workloads it is only timed. A
  family's masked LM and its conversion are checked the same way, and its ratios are to its own HF class. Both get
  the same padded batches: transformers' ``ModernBertForMaskedLM`` (sdpa) runs every padded row through every layer
  under dense bidirectional masks, full or sliding-window (it unpads only inside flash-attention-2's kernel, not on
  CPU), and scores the masked positions only (``sparse_prediction``); its conversion drops the padding before the
  first layer, as for every family.
* **Timing.** One process; every repetition runs each contender once on the same batch, in an
  order rotated per repetition, so machine-load drift hits all contenders alike. Warm-up
  repetitions are discarded. Reported: the median over repetitions of real (non-pad) tokens per
  second, and the ratio to HF BERT = median over repetitions of the *paired* step-time ratio.
  A training step is forward + backward + ``AdamW(fused=True).step()`` + ``zero_grad`` (the same
  optimizer for every contender). Inference is one encoder forward under ``inference_mode``.
* **Memory.** "peak MiB" is the peak, during one extra (untimed) step, of the bytes held by live
  tensor storages that were allocated during that step: a ``TorchDispatchMode`` records every
  storage an ATen op creates (outputs that alias an input - views, in-place ops - are skipped)
  and a weakref finaliser subtracts it when the storage is freed. It is the CPU analogue of CUDA's
  ``max_memory_allocated() - memory_allocated()`` at the step's start: activations saved for
  backward, logits, gradients, temporaries. Parameters and optimizer state, allocated before the
  step, are not included; scratch buffers a kernel allocates internally (oneDNN, the flash-attention
  kernel) are not seen. It is deterministic, unlike sampling the process RSS.
* **FLOPs.** Only useful work is counted, the same way for every contender (so a model that
  computes on padding or on unmasked positions gets a lower rate):
  ``mult * (P_layers * T + 2 * h * L * sum(n_i^2)) + mult * P_head * M`` with ``mult`` = 6 for a
  training step (forward 2 + backward 4) and 2 for inference, ``P_layers`` the weight count of the
  linear layers of the L blocks (BERT/mlm_suite: ``4h^2 + 2hI`` per block; ModernBERT:
  ``4h^2 + 3hI``), ``T`` the real tokens, ``n_i`` the real length of sequence i (QK^T and PV are
  ``2 * n^2 * h`` each per layer), ``P_head`` the head's weights (MLM: ``h^2 + hV`` at the M masked
  positions; token classification: ``h * num_labels`` at every real token, M = T). Embeddings,
  norms, activations, softmax, the loss and the optimizer are not counted. GFLOP/s is divided by
  the peak of a 2048^3 GEMM measured at start-up in the same dtype (fp32, or bf16 for autocast rows).

The machine may be shared: the load average at start and end is printed; compare ratios, which
are paired per repetition, rather than absolute throughputs across runs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import weakref
from dataclasses import asdict, dataclass, field, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForTokenClassification,
    BertModel,
    DistilBertConfig,
    DistilBertForMaskedLM,
    ElectraConfig,
    ElectraForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    ModernBertForTokenClassification,
    ModernBertModel,
    PretrainedConfig,
    RobertaConfig,
    RobertaForMaskedLM,
    XLMRobertaConfig,
    XLMRobertaForMaskedLM,
)
from transformers.utils import logging as hf_logging

from mlm_suite.conversion import convert_checkpoint
from mlm_suite.conversion.bert import config_from_bert, convert_bert_state_dict
from mlm_suite.conversion.core import load_converted_weights
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.model import MlmSuiteForMaskedLM, MlmSuiteForTokenClassification, MlmSuiteModel

PAD, CLS, SEP, MASK = 0, 101, 102, 103
FIRST_WORD_ID = 1000  # random "word" ids are drawn from [FIRST_WORD_ID, vocab_size)
NUM_TAGS = 9
TOLERANCE = 1e-4

# name -> (hidden, layers, heads, intermediate); ModernBERT's GLU intermediate is chosen so its MLP
# (3 * h * I weights) matches BERT's (2 * h * I): I_mb ~ 2/3 I, rounded to a multiple of 32.
SIZES = {
    "tiny": (64, 2, 2, 256),
    "mini": (256, 4, 4, 1024),
    "base": (768, 12, 12, 3072),
}
MODERNBERT_INTERMEDIATE = {"tiny": 160, "mini": 672, "base": 2048}

HF, OURS, MODERNBERT = "HF BERT (sdpa)", "mlm_suite", "ModernBERT (sdpa)"
# mlm_suite on flattened batches (mlm_suite.data.flattening: no padding, no host synchronisation),
# eager and under torch.compile.
OURS_FLAT, OURS_COMPILED = "mlm_suite flattened", "mlm_suite flattened + compile"


@dataclass
class Workload:
    name: str
    task: str  # "mlm" | "tokcls" | "infer"
    size: str
    batch: int
    seq_len: int
    lengths: str  # "packed" (full rows) | "variable" (uniform in [min_len, seq_len], dynamic padding)
    dtype: str = "fp32"  # "fp32" | "bf16" (torch.autocast)
    reps: int = 7
    warmup: int = 1
    min_len: int = 16
    target: float | None = None  # required speed-up over HF BERT, if any
    vocab_size: int = 30522
    family: str | None = None  # a key of NATIVE_MLM: that family's HF masked LM against its conversion, alone


DEFAULT_WORKLOADS = [
    Workload("mlm-mini-packed", "mlm", "mini", 32, 128, "packed", target=2.5),
    Workload("mlm-mini-var", "mlm", "mini", 32, 128, "variable", target=3.0),
    Workload("mlm-mini-var-bf16", "mlm", "mini", 32, 128, "variable", dtype="bf16"),
    Workload("mlm-base-var", "mlm", "base", 8, 128, "variable", reps=5, target=1.6),
    Workload("tokcls-mini-var", "tokcls", "mini", 32, 128, "variable", target=1.5),
    Workload("infer-mini-var", "infer", "mini", 64, 128, "variable", reps=9, target=1.5),
    Workload("infer-mini-var-bf16", "infer", "mini", 64, 128, "variable", dtype="bf16", reps=9),
]
# Not run by default (time); select with --workloads.
EXTRA_WORKLOADS = [
    Workload("mlm-base-packed", "mlm", "base", 8, 128, "packed", reps=5),
    Workload("tokcls-mini-packed", "tokcls", "mini", 32, 128, "packed"),
    Workload("infer-mini-packed", "infer", "mini", 64, 128, "packed", reps=9),
]


# The GPU table (--device cuda): BERT-base in bf16 autocast at GPU batch sizes.
CUDA_WORKLOADS = [
    Workload("mlm-base-var", "mlm", "base", 128, 128, "variable", dtype="bf16", reps=10, warmup=3, target=4.0),
    Workload("mlm-base-packed", "mlm", "base", 128, 128, "packed", dtype="bf16", reps=10, warmup=3),
    Workload("mlm-base-var512", "mlm", "base", 32, 512, "variable", dtype="bf16", reps=10, warmup=3),
    Workload("infer-base-var", "infer", "base", 256, 128, "variable", dtype="bf16", reps=10, warmup=3, target=2.0),
]


def quick_workloads(size: str = "tiny") -> list[Workload]:
    """Small, fast versions of every kind of workload, with a 4k vocabulary (smoke test; timings meaningless)."""
    common = dict(size=size, seq_len=64, reps=2, warmup=1, vocab_size=4096)
    return [
        Workload("mlm-packed", "mlm", batch=8, lengths="packed", **common),
        Workload("mlm-var", "mlm", batch=8, lengths="variable", **common),
        Workload("mlm-var-bf16", "mlm", batch=8, lengths="variable", dtype="bf16", **common),
        Workload("tokcls-var", "tokcls", batch=8, lengths="variable", **common),
        Workload("infer-var", "infer", batch=16, lengths="variable", **common),
    ]


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
@dataclass
class Batch:
    input_ids: torch.Tensor  # (batch, max_len), masked for MLM
    attention_mask: torch.Tensor  # (batch, max_len)
    labels: torch.Tensor  # (batch, max_len), -100 where nothing is predicted
    lengths: list[int]

    @property
    def real_tokens(self) -> int:
        return sum(self.lengths)

    @property
    def labelled(self) -> int:
        return int((self.labels != -100).sum())


def make_batch(workload: Workload, seed: int) -> Batch:
    """``[CLS] random words [SEP]`` rows, padded to the longest row; MLM or tag labels."""
    generator = torch.Generator().manual_seed(seed)
    if workload.lengths == "packed":
        lengths = [workload.seq_len] * workload.batch
    else:
        lengths = torch.randint(workload.min_len, workload.seq_len + 1, (workload.batch,), generator=generator).tolist()
    width = max(lengths)
    ids = torch.randint(FIRST_WORD_ID, workload.vocab_size, (workload.batch, width), generator=generator)
    columns = torch.arange(width)[None, :]
    length = torch.tensor(lengths)[:, None]
    real = columns < length
    ids[:, 0] = CLS
    ids[columns == length - 1] = SEP
    ids[~real] = PAD
    if workload.task == "mlm":
        ids, labels = mask_tokens(ids, real & (ids != CLS) & (ids != SEP), workload.vocab_size, generator)
    else:
        labels = torch.randint(0, NUM_TAGS, ids.shape, generator=generator).masked_fill(~real, -100)
    return Batch(ids, real.long(), labels, lengths)


def mask_tokens(ids: torch.Tensor, maskable: torch.Tensor, vocab_size: int, generator: torch.Generator, rate: float = 0.15):
    """BERT masking: select ``rate`` of the maskable tokens; 80 % -> [MASK], 10 % -> random, 10 % kept."""
    selected = maskable & (torch.rand(ids.shape, generator=generator) < rate)
    labels = ids.masked_fill(~selected, -100)
    draw = torch.rand(ids.shape, generator=generator)
    corrupted = ids.masked_fill(selected & (draw < 0.8), MASK)
    random_ids = torch.randint(FIRST_WORD_ID, vocab_size, ids.shape, generator=generator)
    corrupted = torch.where(selected & (draw >= 0.8) & (draw < 0.9), random_ids, corrupted)
    return corrupted, labels


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------
def bert_config(workload: Workload) -> BertConfig:
    hidden, layers, heads, intermediate = SIZES[workload.size]
    return BertConfig(
        vocab_size=workload.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=NUM_TAGS if workload.task == "tokcls" else 2,
        attn_implementation="sdpa",
    )


def modernbert_config(workload: Workload) -> ModernBertConfig:
    """ModernBERT at BERT's width/depth/heads; GLU intermediate matched on MLP weights; its own sparse prediction on."""
    hidden, layers, heads, _ = SIZES[workload.size]
    return ModernBertConfig(
        vocab_size=workload.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=MODERNBERT_INTERMEDIATE[workload.size],
        max_position_embeddings=512,
        pad_token_id=PAD,
        bos_token_id=CLS,
        cls_token_id=CLS,
        eos_token_id=SEP,
        sep_token_id=SEP,
        num_labels=NUM_TAGS if workload.task == "tokcls" else 2,
        sparse_prediction=True,
        attn_implementation="sdpa",
    )


def build_models(workload: Workload, seed: int = 0, modernbert: bool = True) -> dict[str, torch.nn.Module]:
    """HF BERT (random init), mlm_suite with BERT's converted weights, and ModernBERT; all dropout-free."""
    torch.manual_seed(seed)
    config = bert_config(workload)
    hf_class, ours_class, mb_class = {
        "mlm": (BertForMaskedLM, MlmSuiteForMaskedLM, ModernBertForMaskedLM),
        "tokcls": (BertForTokenClassification, MlmSuiteForTokenClassification, ModernBertForTokenClassification),
        "infer": (BertModel, MlmSuiteModel, ModernBertModel),
    }[workload.task]
    extra = {"add_pooling_layer": False} if workload.task == "infer" else {}
    hf = hf_class(config, **extra)
    ours_config = config_from_bert(config.to_dict())
    ours = ours_class(ours_config, **extra)
    load_converted_weights(ours, convert_bert_state_dict(hf.state_dict(), config.num_hidden_layers), "the HF model")
    models = {HF: hf, OURS: ours}
    if modernbert:
        models[MODERNBERT] = mb_class(modernbert_config(workload))
    return models


# The families (--families): transformers' masked LM of each, as people name the family, with its config class.
# BERT's row is the BERT workloads' comparison made the families' way, as a reference measured in the same run.
NATIVE_MLM = {
    "bert": ("BERT", BertConfig, BertForMaskedLM),
    "roberta": ("RoBERTa", RobertaConfig, RobertaForMaskedLM),
    "xlm-roberta": ("XLM-R", XLMRobertaConfig, XLMRobertaForMaskedLM),
    "distilbert": ("DistilBERT", DistilBertConfig, DistilBertForMaskedLM),
    "electra": ("ELECTRA", ElectraConfig, ElectraForMaskedLM),
    "modernbert": ("ModernBERT", ModernBertConfig, ModernBertForMaskedLM),
}
# ELECTRA's generator-style embeddings, narrower than the hidden size and projected up (ELECTRA-small's generator:
# 128 for 256).
ELECTRA_EMBEDDING = {"tiny": 32, "mini": 128, "base": 384}


def hf_name(workload: Workload) -> str:
    """The contender the ratios are taken against: HF BERT, or the HF masked LM of the workload's family."""
    return HF if workload.family is None else f"HF {NATIVE_MLM[workload.family][0]} (sdpa)"


def family_workloads(families: list[str], base: Workload) -> list[Workload]:
    """``base`` (an MLM workload) once per family, named ``<base>-<family>``."""
    return [replace(base, name=f"{base.name}-{family}", family=family, target=None) for family in families]


def native_mlm_config(workload: Workload) -> PretrainedConfig:
    """The family's config at BERT's sizes of ``workload.size``: dropout-free, SDPA attention, padding id PAD (so
    RoBERTa's position table has the PAD + 1 rows before its first position too), 512 positions. ModernBERT's is
    the one the BERT workloads time (``modernbert_config``), dropout-free by default."""
    if workload.family == "modernbert":
        return modernbert_config(workload)
    hidden, layers, heads, intermediate = SIZES[workload.size]
    _, config_class, _ = NATIVE_MLM[workload.family]
    common = dict(vocab_size=workload.vocab_size, pad_token_id=PAD, attn_implementation="sdpa")
    if workload.family == "distilbert":
        return config_class(dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=intermediate, dropout=0.0,
                            attention_dropout=0.0, max_position_embeddings=512, **common)
    sizes = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                 intermediate_size=intermediate, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common)
    if workload.family in ("roberta", "xlm-roberta"):
        return config_class(type_vocab_size=1, max_position_embeddings=512 + PAD + 1, **sizes)
    if workload.family == "electra":
        sizes["embedding_size"] = ELECTRA_EMBEDDING[workload.size]
    return config_class(max_position_embeddings=512, **sizes)


def build_family_models(workload: Workload, seed: int = 0) -> dict[str, torch.nn.Module]:
    """The family's HF masked LM (random init) and mlm_suite's, converted from its saved folder by
    ``convert_checkpoint`` as a user's folder is."""
    torch.manual_seed(seed)
    native = NATIVE_MLM[workload.family][2](native_mlm_config(workload))
    with tempfile.TemporaryDirectory() as folder:
        native.save_pretrained(f"{folder}/native")
        ours = MlmSuiteForMaskedLM.from_pretrained(convert_checkpoint(f"{folder}/native", f"{folder}/mlm_suite"))
    return {hf_name(workload): native, OURS: ours}


def parameter_counts(workload: Workload, contender: str) -> tuple[int, int]:
    """(linear weights of the blocks, weights of the head per predicted position) for the FLOP count."""
    h, layers, _, intermediate = SIZES[workload.size]
    if contender == MODERNBERT or workload.family == "modernbert":
        per_layer = 4 * h * h + 3 * h * MODERNBERT_INTERMEDIATE[workload.size]
    else:
        per_layer = 4 * h * h + 2 * h * intermediate
    width = ELECTRA_EMBEDDING[workload.size] if workload.family == "electra" else h  # the MLM head's output width
    head = {"mlm": h * width + width * workload.vocab_size, "tokcls": h * NUM_TAGS, "infer": 0}[workload.task]
    return layers * per_layer, head


def useful_flops(workload: Workload, contender: str, batch: Batch) -> float:
    h, layers, _, _ = SIZES[workload.size]
    mult = 2 if workload.task == "infer" else 6
    block_weights, head_weights = parameter_counts(workload, contender)
    tokens = batch.real_tokens
    squares = sum(n * n for n in batch.lengths)
    predicted = batch.labelled if workload.task == "mlm" else tokens
    return mult * (block_weights * tokens + 2 * h * layers * squares + head_weights * predicted)


# --------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------
class Contender:
    """A model plus what it needs to run one timed step of a workload on a device.

    ``flatten``: feed flattened batches (``mlm_suite.data.flattening.flatten_batch``, made before
    timing as a data loader would); ``compile_backend``: ``torch.compile`` the model with that backend.
    """

    def __init__(
        self, name: str, model: torch.nn.Module, workload: Workload, device: str = "cpu",
        flatten: bool = False, compile_backend: str | None = None,
    ):
        self.name, self.workload, self.device, self.flatten = name, workload, torch.device(device), flatten
        self.train = workload.task != "infer"
        model.to(self.device).train(self.train)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True) if self.train else None
        self.model = torch.compile(model, backend=compile_backend) if compile_backend else model
        self._inputs: dict[int, dict] = {}

    def autocast(self):
        if self.workload.dtype == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def inputs(self, batch: Batch) -> dict:
        """The model's keyword arguments for ``batch`` on the device (cached: built once, outside the timing)."""
        if id(batch) not in self._inputs:
            padded = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            if self.train:
                padded["labels"] = batch.labels
            prepared = flatten_batch(padded, max_length_multiple=16) if self.flatten else padded
            self._inputs[id(batch)] = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in prepared.items()}
        return self._inputs[id(batch)]

    def loss_or_output(self, batch: Batch) -> torch.Tensor:
        """Training: the loss (graph attached). Inference: the last hidden state."""
        with self.autocast():
            output = self.model(**self.inputs(batch))
            return output.loss if self.train else output.last_hidden_state

    def step(self, batch: Batch) -> None:
        if self.train:
            loss = self.loss_or_output(batch)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            with torch.inference_mode():
                self.loss_or_output(batch)

    def timed_step(self, batch: Batch) -> float:
        """Seconds of one step; on CUDA the device is synchronised before and after."""
        synchronize = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        synchronize()
        start = time.perf_counter()
        self.step(batch)
        synchronize()
        return time.perf_counter() - start


# --------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------
class LiveTensorBytes(TorchDispatchMode):
    """Tracks the bytes of tensor storages created by ATen ops while active, and their peak."""

    def __init__(self):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            pointer, size = storage.data_ptr(), storage.nbytes()
            if pointer == 0 or pointer in inputs or pointer in self._live:
                continue
            self._live.add(pointer)
            self.current += size
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._release, pointer, size)
        return out

    def _release(self, pointer: int, size: int) -> None:
        self.current -= size
        self._live.discard(pointer)


def peak_step_bytes(contender: Contender, batch: Batch) -> int | None:
    """Peak bytes allocated during one step beyond what was allocated before it (CUDA: the allocator's peak)."""
    gc.collect()
    if contender.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        contender.step(batch)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    if isinstance(contender.model, torch._dynamo.eval_frame.OptimizedModule):
        return None  # the dispatch-mode tracker cannot see inside a compiled graph: not measured on CPU
    tracker = LiveTensorBytes()
    with tracker:
        contender.step(batch)
    return tracker.peak


def gemm_peak(dtype: torch.dtype, n: int = 2048, reps: int = 5, device: str = "cpu") -> float:
    """GFLOP/s of an n^3 matmul: median of ``reps`` after one warm-up (synchronised on CUDA)."""
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    a @ b
    times = []
    for _ in range(reps):
        synchronize()
        start = time.perf_counter()
        a @ b
        synchronize()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


#: Kinds of device work, by fragments of a kernel's name (cuBLAS/CUTLASS GEMMs, flash attention, inductor's triton
#: kernels, the fused optimizer) or, on CPU, of an ATen op's; the first kind that matches wins, the rest is "other".
KERNEL_KINDS = [
    ("matrix multiplications", ("gemm", "xmma", "nvjet", "cutlass", "cublas", "aten::mm", "aten::addmm", "aten::bmm")),
    ("attention", ("flash", "fmha", "attention", "varlen")),
    ("optimizer", ("adam", "multi_tensor")),
    ("copies and fills", ("memcpy", "memset", "copy", "fill", "aten::cat")),
    ("fused elementwise and reductions (compiled)", ("triton",)),
]
OTHER_KERNELS = "other (norms, activations, softmax, loss, dropout)"


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, fragments in KERNEL_KINDS if any(f in lowered for f in fragments)), OTHER_KERNELS)


def profile_step(contender: Contender, batch: Batch, steps: int = 3) -> dict:
    """Where ``steps`` training steps of ``contender`` spend the device's time (``torch.profiler``): milliseconds per
    step of each kind of kernel (:data:`KERNEL_KINDS`; on CPU, ATen ops' own time), their sum (the device busy), and
    the step's wall time; the difference is time the device waited for the host."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = contender.device.type == "cuda"
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    contender.step(batch)
    synchronize()
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as profiler:
        started = time.perf_counter()
        for _ in range(steps):
            contender.step(batch)
        synchronize()
        wall = time.perf_counter() - started
    kinds: dict[str, float] = {}
    for event in profiler.key_averages():
        if cuda and event.device_type != DeviceType.CUDA:
            continue  # a CPU op: its kernels are rows of their own
        microseconds = event.self_device_time_total if cuda else event.self_cpu_time_total
        if microseconds > 0:
            kind = kernel_kind(event.key)
            kinds[kind] = kinds.get(kind, 0.0) + microseconds / 1000 / steps
    return {"contender": contender.name, "wall_ms": 1000 * wall / steps, "busy_ms": sum(kinds.values()), "kinds": kinds}


def profile_table(workload: str, profile: dict) -> str:
    """The profile of :func:`profile_step` as a markdown table: each kind's ms/step and share of the step."""
    if "error" in profile:
        return f"Profile of {workload}, {profile['contender']}: the profiler failed ({profile['error']})."
    wall = profile["wall_ms"]
    lines = [f"Profile of {workload}, {profile['contender']} ({'device' if profile.get('cuda') else 'CPU'} time per step, "
             f"under the profiler: {wall:.1f} ms wall):", "",
             "| kind of work | ms/step | share of the step |", "|---|---:|---:|"]  # fmt: skip
    for kind, ms in sorted(profile["kinds"].items(), key=lambda item: -item[1]):
        lines.append(f"| {kind} | {ms:.2f} | {ms / wall:.0%} |")
    lines.append(f"| device waiting for the host (wall − busy) | {max(0.0, wall - profile['busy_ms']):.2f} | "
                 f"{max(0.0, wall - profile['busy_ms']) / wall:.0%} |")
    return "\n".join(lines)


def check_equivalence(workload: Workload, models: dict[str, torch.nn.Module], batch: Batch, device: str = "cpu") -> dict:
    """mlm_suite vs HF BERT (or the family's HF masked LM) on the same batch in fp32: losses (training) or hidden
    states (inference).

    The flattened form of the batch must give mlm_suite the same loss or hidden states too.
    """
    ours, hf = models[OURS], models[hf_name(workload)]
    train = workload.task != "infer"
    ours.train(train)
    hf.train(train)
    padded = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
    if train:
        padded["labels"] = batch.labels
    flat = {k: v.to(device) if torch.is_tensor(v) else v for k, v in flatten_batch(padded).items()}
    padded = {k: v.to(device) for k, v in padded.items()}
    with torch.inference_mode():
        a, b, c = hf(**padded), ours(**padded), ours(**flat)
    if train:
        reference = float(a.loss)
        difference = max(abs(reference - float(b.loss)), abs(reference - float(c.loss)))
        what, detail = "loss", f"HF {reference:.6f} vs mlm_suite {float(b.loss):.6f} (flattened {float(c.loss):.6f})"
    else:
        real = padded["attention_mask"].bool()
        x, y, z = a.last_hidden_state[real], b.last_hidden_state[real], c.last_hidden_state[0]
        reference = float(x.abs().max())
        what, detail = "hidden", f"max |h| {reference:.3f}"
        difference = max(float((x - y).abs().max()), float((x - z).abs().max()))
    ok = difference <= TOLERANCE * max(1.0, abs(reference) if train else 1.0)
    return {"workload": workload.name, "compared": what, "max_abs_diff": difference, "detail": detail, "ok": ok}


@dataclass
class Result:
    workload: str
    contender: str
    dtype: str
    real_tokens_per_step: float
    pad_fraction: float
    step_ms: float
    tokens_per_s: float
    vs_hf: float | None  # HF BERT's step time / this one's (median of pairs); a family's: its HF masked LM's
    vs_modernbert: float | None
    peak_mib: float | None  # None: not measured (a compiled model on CPU)
    gflops: float
    peak_fraction: float
    step_times: list[float] = field(default_factory=list)


def run_workload(
    workload: Workload,
    peaks: dict[str, float],
    seed: int = 0,
    log=print,
    modernbert: bool = True,
    device: str = "cpu",
    flattened: bool = True,
    compiled: str | None = None,
    profile: bool = False,
) -> tuple[dict, list[Result]]:
    if workload.family is None:
        models = build_models(workload, seed, modernbert)
    else:
        models = build_family_models(workload, seed)
    for model in models.values():
        model.to(device)
    batches = [make_batch(workload, seed * 1000 + i) for i in range(3)]
    check = check_equivalence(workload, models, batches[0], device)
    status = "OK" if check["ok"] else "FAILED"
    log(
        f"check {workload.name}: mlm_suite vs {hf_name(workload)} {check['compared']} max |diff| = "
        f"{check['max_abs_diff']:.2e} ({check['detail']}) -> {status}"
    )
    if not check["ok"]:
        return check, []
    contenders = [Contender(name, model, workload, device) for name, model in models.items()]
    if flattened:
        contenders.append(Contender(OURS_FLAT, copy.deepcopy(models[OURS]), workload, device, flatten=True))
    if compiled:
        contenders.append(Contender(OURS_COMPILED, copy.deepcopy(models[OURS]), workload, device, True, compiled))
    # Warm-up covers every batch once when compiling, so no (re)compilation is timed.
    warmup = max(workload.warmup, len(batches)) if compiled else workload.warmup
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    used: list[Batch] = []
    for rep in range(warmup + workload.reps):
        batch = batches[rep % len(batches)]
        shift = rep % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            elapsed = contender.timed_step(batch)
            if rep >= warmup:
                times[contender.name].append(elapsed)
        if rep >= warmup:
            used.append(batch)
    peak_bytes = {c.name: peak_step_bytes(c, batches[0]) for c in contenders}
    gemm = peaks[workload.dtype]
    results = []
    for contender in contenders:
        name = contender.name
        step_times = times[name]
        tokens = [b.real_tokens for b in used]
        padded = sum(b.input_ids.numel() for b in used)

        def paired_ratio(other: str) -> float | None:
            if other not in times:
                return None
            return statistics.median(t_other / t for t_other, t in zip(times[other], step_times))

        results.append(
            Result(
                workload=workload.name,
                contender=name,
                dtype=workload.dtype,
                real_tokens_per_step=statistics.mean(tokens),
                pad_fraction=1 - sum(tokens) / padded,
                step_ms=1000 * statistics.median(step_times),
                tokens_per_s=statistics.median(n / t for n, t in zip(tokens, step_times)),
                vs_hf=paired_ratio(hf_name(workload)),
                vs_modernbert=paired_ratio(MODERNBERT),
                peak_mib=None if peak_bytes[name] is None else peak_bytes[name] / 2**20,
                gflops=statistics.median(useful_flops(workload, name, b) / t / 1e9 for b, t in zip(used, step_times)),
                peak_fraction=0.0,
                step_times=step_times,
            )
        )
        results[-1].peak_fraction = results[-1].gflops / gemm
    if profile:  # mlm_suite's last contender: compiled if asked for, else flattened
        try:  # the profile is a reading of the step, not a check: a profiler that fails leaves the timings standing
            check["profile"] = {**profile_step(contenders[-1], batches[0]), "cuda": device == "cuda"}
        except Exception as error:  # noqa: BLE001 - reported in the table instead
            check["profile"] = {"contender": contenders[-1].name, "error": f"{type(error).__name__}: {error}"}
    del contenders, models
    gc.collect()
    return check, results


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def markdown_table(results: list[Result]) -> str:
    lines = [
        "| workload | model | real tok/step | pad % | step ms | real tok/s | × HF BERT | × ModernBERT | peak MiB | GFLOP/s | % GEMM peak |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.workload} | {r.contender} | {r.real_tokens_per_step:.0f} | {100 * r.pad_fraction:.0f} | {r.step_ms:.0f} | "
            f"{r.tokens_per_s:,.0f} | {r.vs_hf:.2f} | {_ratio(r.vs_modernbert)} | {_mib(r.peak_mib)} | {r.gflops:.1f} | "
            f"{100 * r.peak_fraction:.0f} |"
        )
    return "\n".join(lines)


def targets_table(workloads: list[Workload], results: list[Result]) -> str:
    lines = ["| workload | target (× HF BERT) | mlm_suite × HF BERT | met | peak MiB mlm_suite / HF | memory ≤ HF |", "|---|---:|---:|---|---:|---|"]
    for workload in workloads:
        rows = {r.contender: r for r in results if r.workload == workload.name}
        if OURS not in rows:
            continue
        ours, hf = rows[OURS], rows[HF]
        target = f"{workload.target:.1f}" if workload.target else "-"
        met = "-" if workload.target is None else ("yes" if ours.vs_hf >= workload.target else "NO")
        memory_ok = "yes" if ours.peak_mib <= hf.peak_mib else "NO"
        lines.append(
            f"| {workload.name} | {target} | {ours.vs_hf:.2f} | {met} | {ours.peak_mib:.0f} / {hf.peak_mib:.0f} | {memory_ok} |"
        )
    return "\n".join(lines)


def families_table(workloads: list[Workload], checks: list[dict], results: list[Result]) -> str:
    """One row per family: its HF masked LM, the loss check, that model's step time and each mlm_suite contender's
    paired ratio to it, and the peak memory of the two on padded batches."""
    ours = [name for name in (OURS, OURS_FLAT, OURS_COMPILED) if any(r.contender == name for r in results)]
    lines = [
        "| family | HF class (sdpa) | loss diff | HF step ms | " + " | ".join(f"{name} × HF" for name in ours)
        + " | peak MiB HF / mlm_suite |",
        "|---|---|---:|---:|" + "---:|" * len(ours) + "---:|",
    ]
    differences = {check["workload"]: check["max_abs_diff"] for check in checks}
    for workload in workloads:
        rows = {r.contender: r for r in results if r.workload == workload.name}
        label, _, model_class = NATIVE_MLM[workload.family]
        hf = rows[hf_name(workload)]
        ratios = " | ".join(f"{rows[name].vs_hf:.2f}" for name in ours)
        lines.append(
            f"| {label} | {model_class.__name__} | {differences[workload.name]:.1e} | {hf.step_ms:.0f} | {ratios} | "
            f"{_mib(hf.peak_mib)} / {_mib(rows[OURS].peak_mib)} |"
        )
    return "\n".join(lines)


def environment(peaks: dict[str, float], device: str = "cpu") -> dict:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name() if device == "cuda" else (platform.processor() or platform.machine()),
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gemm_peak_gflops": peaks,
        "load_average_start": os.getloadavg(),
    }


def run(
    workloads: list[Workload],
    seed: int = 0,
    log=print,
    modernbert: bool = True,
    gemm_size: int = 2048,
    device: str = "cpu",
    flattened: bool = True,
    compiled: str | None = None,
    profile: bool = False,
) -> dict:
    """Run the workloads; return ``{"environment", "checks", "results", "markdown"}`` (raises on a failed check).

    The markdown holds the BERT tables for the BERT workloads and :func:`families_table` for the families'.

    ``flattened`` adds mlm_suite on flattened batches; ``compiled`` (a ``torch.compile`` backend
    name, e.g. ``"inductor"``) adds it compiled; ``profile`` profiles mlm_suite's last contender on each workload
    (:func:`profile_step`) and adds the tables.
    """
    peaks = {name: gemm_peak(dtype, gemm_size, device=device) for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    env = environment(peaks, device)
    log(
        f"torch {env['torch']} on {env['device']}, {env['threads']} threads; GEMM peak "
        f"({gemm_size}^3) fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s; load average {env['load_average_start'][0]:.1f}"
    )
    checks, results = [], []
    for workload in workloads:
        start = time.perf_counter()
        check, rows = run_workload(workload, peaks, seed, log, modernbert, device, flattened, compiled, profile)
        checks.append(check)
        if not check["ok"]:
            raise SystemExit(f"equivalence check failed for {workload.name}: {check}")
        results.extend(rows)
        log(markdown_table(rows).split("\n", 2)[2])
        log(f"  {workload.name}: {time.perf_counter() - start:.0f} s")
    env["load_average_end"] = os.getloadavg()
    bert = [w for w in workloads if w.family is None]
    families = [w for w in workloads if w.family is not None]
    tables = []
    if bert:
        names = {w.name for w in bert}
        tables += [markdown_table([r for r in results if r.workload in names]), targets_table(bert, results)]
    if families:
        tables.append(families_table(families, checks, results))
    tables += [profile_table(check["workload"], check["profile"]) for check in checks if "profile" in check]
    markdown = "\n\n".join(tables)
    return {"environment": env, "workloads": [asdict(w) for w in workloads], "checks": checks,
            "results": [asdict(r) for r in results], "markdown": markdown}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny, short workloads (smoke test, < 60 s)")
    parser.add_argument("--workloads", nargs="+", metavar="NAME", help="run only these (full names, else prefixes), e.g. mlm-mini infer")
    parser.add_argument("--reps", type=int, help="timed repetitions per workload (default: per workload, ≥ 5)")
    parser.add_argument("--warmup", type=int, help="warm-up repetitions per workload")
    parser.add_argument("--batch_size", type=int, help="rows per batch of every workload run (default: the workload's)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-modernbert", action="store_true", help="time only HF BERT and mlm_suite")
    parser.add_argument(
        "--families", nargs="*", choices=list(NATIVE_MLM), metavar="FAMILY",
        help="instead of the BERT workloads: each family's HF masked LM against mlm_suite's conversion of it, on the "
        f"variable-length MLM workload (no name: all of {', '.join(NATIVE_MLM)})",
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cuda: the GPU workloads (bf16)")
    parser.add_argument(
        "--compile", nargs="?", const="inductor", metavar="BACKEND",
        help="also time mlm_suite flattened under torch.compile (backend: inductor by default)",
    )
    parser.add_argument("--profile", action="store_true",
                        help="profile mlm_suite's last contender (compiled if --compile) per workload: device time by kind of kernel")
    parser.add_argument("--output", help="write all results as JSON here")
    parser.add_argument("--markdown", help="write the markdown tables here")
    args = parser.parse_args(argv)
    hf_logging.set_verbosity_error()  # here, not in run(): a caller's logging stays as it was
    hf_logging.disable_progress_bar()  # saving and loading the families' folders
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    defaults = CUDA_WORKLOADS if args.device == "cuda" else DEFAULT_WORKLOADS
    workloads = quick_workloads() if args.quick else list(defaults)
    if args.families is not None:
        if args.workloads:
            parser.error("--families runs the variable-length MLM workload; --workloads chooses among the BERT ones")
        base = next(w for w in workloads if w.task == "mlm" and w.lengths == "variable")
        workloads = family_workloads(args.families or list(NATIVE_MLM), base)
    if args.workloads:
        candidates = workloads if args.quick else workloads + EXTRA_WORKLOADS + [w for w in CUDA_WORKLOADS if w not in workloads]
        exact = [w for w in candidates if w.name in args.workloads]  # a full name selects that workload alone
        workloads = exact or [w for w in candidates if any(w.name.startswith(prefix) for prefix in args.workloads)]
        if not workloads:
            parser.error(f"no workload matches {args.workloads}")
    for w in workloads:
        if args.reps:
            w.reps = args.reps
        if args.warmup is not None:
            w.warmup = args.warmup
        if args.batch_size:
            w.batch = args.batch_size
    report = run(
        workloads,
        args.seed,
        log=lambda message: print(message, file=sys.stderr, flush=True),
        modernbert=not args.no_modernbert,
        gemm_size=1024 if args.quick else (8192 if args.device == "cuda" else 2048),
        device=args.device,
        compiled=args.compile,
        profile=args.profile,
    )
    e = report["environment"]
    print(
        f"torch {e['torch']} · {e['device']} · {e['threads']} threads · GEMM peak fp32 "
        f"{e['gemm_peak_gflops']['fp32']:.0f} / bf16 {e['gemm_peak_gflops']['bf16']:.0f} GFLOP/s · "
        f"load average {e['load_average_start'][0]:.1f} → {e['load_average_end'][0]:.1f}\n"
    )
    print(report["markdown"])
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(report, handle, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(report["markdown"] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
