"""Smoke test of benchmarks/bench_speed.py on a tiny configuration: the equivalence checks pass (mlm_suite against HF
BERT, and each family's conversion against its own HF masked LM, --families), a failing check aborts, the tables have
the expected rows, the memory tracker counts. No timing asserts."""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from mlm_suite.conversion import REGISTRY
from tests.helpers import TINY_MODEL, load_benchmark, make_documents, write_text


@pytest.fixture(scope="module")
def bench():
    yield load_benchmark("bench_speed")
    sys.modules.pop("bench_speed", None)


def tiny_workloads(bench):
    common = dict(size="tiny", seq_len=16, reps=1, warmup=0, vocab_size=1200, min_len=4)
    return [
        bench.Workload("mlm-var", "mlm", batch=3, lengths="variable", **common),
        bench.Workload("tokcls-var", "tokcls", batch=3, lengths="variable", **common),
        bench.Workload("infer-var-bf16", "infer", batch=3, lengths="variable", dtype="bf16", **common),
    ]


@pytest.mark.slow
def test_quick_run_checks_pass_and_tables_have_every_row(bench):
    workloads = tiny_workloads(bench)
    report = bench.run(workloads, log=lambda message: None, gemm_size=128)
    assert [check["workload"] for check in report["checks"]] == [w.name for w in workloads]
    assert all(check["ok"] for check in report["checks"])
    contenders = (bench.HF, bench.OURS, bench.MODERNBERT, bench.OURS_FLAT)
    rows = {(r["workload"], r["contender"]) for r in report["results"]}
    assert rows == {(w.name, c) for w in workloads for c in contenders}
    table, targets = report["markdown"].split("\n\n")
    for workload in workloads:
        for contender in contenders:
            assert f"| {workload.name} | {contender} |" in table
        assert f"| {workload.name} |" in targets
    for result in report["results"]:
        assert result["tokens_per_s"] > 0 and result["peak_mib"] > 0 and result["gflops"] > 0
        if result["contender"] == bench.HF:
            assert result["vs_hf"] == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.compile
def test_compiled_contender_runs_on_flattened_batches(bench):
    workloads = tiny_workloads(bench)[:1]
    report = bench.run(workloads, log=lambda message: None, gemm_size=128, modernbert=False, compiled="aot_eager")
    rows = {r["contender"]: r for r in report["results"]}
    assert set(rows) == {bench.HF, bench.OURS, bench.OURS_FLAT, bench.OURS_COMPILED}
    assert rows[bench.OURS_COMPILED]["tokens_per_s"] > 0


def test_kernel_kinds_sort_gpu_kernels_and_cpu_ops_by_name(bench):
    kinds = {
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matrix multiplications",
        "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NTT": "matrix multiplications",
        "aten::addmm": "matrix multiplications",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>": "attention",
        "triton_per_fused_native_layer_norm_0": "fused elementwise and reductions (compiled)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer",
        "Memcpy HtoD (Pageable -> Device)": "copies and fills",
        "aten::gelu": bench.OTHER_KERNELS,
    }
    assert {name: bench.kernel_kind(name) for name in kinds} == kinds
    failed = bench.profile_table("mlm-var", {"contender": bench.OURS_COMPILED, "error": "RuntimeError: no CUPTI"})
    assert failed == f"Profile of mlm-var, {bench.OURS_COMPILED}: the profiler failed (RuntimeError: no CUPTI)."


@pytest.mark.slow
def test_profile_shows_where_mlm_suite_s_step_spends_its_time(bench):
    """--profile: the last mlm_suite contender's step by kind of work; its kinds add up to at most the step."""
    workloads = tiny_workloads(bench)[:1]
    report = bench.run(workloads, log=lambda message: None, gemm_size=128, modernbert=False, profile=True)
    profile = report["checks"][0]["profile"]
    assert profile["contender"] == bench.OURS_FLAT and profile["wall_ms"] > 0
    assert profile["kinds"]["matrix multiplications"] > 0 and profile["kinds"]["optimizer"] > 0
    assert sum(profile["kinds"].values()) == pytest.approx(profile["busy_ms"])
    assert f"Profile of {workloads[0].name}, {bench.OURS_FLAT}" in report["markdown"]
    assert "| matrix multiplications |" in report["markdown"] and "| device waiting for the host (wall − busy) |" in report["markdown"]


@pytest.mark.parametrize("family", [family.model_types[0] for family in REGISTRY])
def test_each_family_s_conversion_gives_its_hf_masked_lm_s_loss(bench, family):
    """--families: transformers' own masked LM of the family and mlm_suite's conversion of its saved folder give the
    same loss on a padded and a flattened batch, checked before anything is timed."""
    workload = bench.family_workloads([family], tiny_workloads(bench)[0])[0]
    if family == "modernbert":  # rows longer than its sliding window (64 tokens each side), as at the mini size
        workload = replace(workload, seq_len=96, min_len=70)
    models = bench.build_family_models(workload)
    hf = models[bench.hf_name(workload)]
    assert set(models) == {bench.hf_name(workload), bench.OURS}
    assert type(hf) is bench.NATIVE_MLM[family][2] and hf.config._attn_implementation == "sdpa"
    assert hf.config.model_type == family
    assert getattr(models[bench.OURS].config, "converted_from", None) == (None if family == "bert" else family)
    if family == "electra":  # the generator: embeddings narrower than the hidden size, projected up
        assert hf.config.embedding_size < hf.config.hidden_size
        assert models[bench.OURS].config.embedding_size == hf.config.embedding_size
    if family == "modernbert":  # the BERT workloads' ModernBERT: its sizes, its full and sliding-window layers
        sizes = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "sparse_prediction")
        expected = bench.modernbert_config(workload)
        assert [getattr(hf.config, name) for name in sizes] == [getattr(expected, name) for name in sizes]
        assert hf.config.layer_types == models[bench.OURS].config.layer_types == ["full_attention", "sliding_attention"]
        assert models[bench.OURS].config.local_attention == hf.config.local_attention == 128
    # The FLOP count's block weights are the weights of the linear layers of the HF class's blocks.
    block_linears = [module.weight.numel() for name, module in hf.named_modules()
                     if isinstance(module, torch.nn.Linear) and re.search(r"\.layers?\.\d+\.", name)]
    assert bench.parameter_counts(workload, bench.hf_name(workload))[0] == sum(block_linears)
    check = bench.check_equivalence(workload, models, bench.make_batch(workload, seed=0))
    assert check["ok"] and check["compared"] == "loss", check
    assert check["max_abs_diff"] <= 1e-5


def test_families_run_prints_one_row_per_family_against_its_own_class(bench):
    """A families run times each family's own class and its conversion (not the BERT tables' ModernBERT contender)
    and prints a row per family."""
    workloads = bench.family_workloads(["bert", "modernbert"], tiny_workloads(bench)[0])
    report = bench.run(workloads, log=lambda message: None, gemm_size=128)
    assert [check["workload"] for check in report["checks"]] == ["mlm-var-bert", "mlm-var-modernbert"]
    rows = {(r["workload"], r["contender"]) for r in report["results"]}
    assert rows == {(w.name, c) for w in workloads for c in (bench.hf_name(w), bench.OURS, bench.OURS_FLAT)}
    table = report["markdown"]
    assert "| family | HF class (sdpa) |" in table and bench.MODERNBERT not in table and "% GEMM peak" not in table
    assert "| BERT | BertForMaskedLM |" in table and "| ModernBERT | ModernBertForMaskedLM |" in table
    for result in report["results"]:
        if result["contender"].startswith("HF "):
            assert result["vs_hf"] == pytest.approx(1.0)


def test_failed_equivalence_check_aborts(bench, monkeypatch):
    monkeypatch.setattr(bench, "TOLERANCE", -1.0)
    with pytest.raises(SystemExit, match="equivalence check failed"):
        bench.run(tiny_workloads(bench)[:1], log=lambda message: None, gemm_size=128)


def test_masking_selects_only_real_non_special_tokens(bench):
    workload = bench.Workload("mlm", "mlm", "tiny", batch=8, seq_len=32, lengths="variable", vocab_size=1200, min_len=4)
    batch = bench.make_batch(workload, seed=3)
    assert batch.attention_mask.sum(1).tolist() == batch.lengths
    labelled = batch.labels != -100
    assert not (labelled & ~batch.attention_mask.bool()).any()
    assert labelled.any()
    original = batch.labels[labelled]
    assert not ((original == bench.CLS) | (original == bench.SEP) | (original == bench.PAD)).any()
    assert batch.real_tokens == sum(batch.lengths)


def test_live_tensor_tracker_counts_allocations_and_frees(bench):
    tracker = bench.LiveTensorBytes()
    with tracker:
        a = torch.ones(1024, 256)  # 1 MiB
        b = a * 2  # another MiB
        view = b[:10]  # a view: no new storage
        del a
        c = torch.ones(512, 256)  # 0.5 MiB, while b is alive
        del b, view, c
    assert tracker.peak == 2 * 2**20
    assert tracker.current == 0


@pytest.mark.slow
def test_budget_benchmark_scores_both_models_on_the_same_masks(tmp_path):
    """bench_budget.py on a tiny corpus and model with a 2-second budget: both runs train, are scored on
    the same held-out positions, and the table has every row."""

    bench_budget = load_benchmark("bench_budget")
    sys.modules.pop("bench_budget", None)
    train = write_text(tmp_path / "train.txt", make_documents(30, seed=1))
    validation = write_text(tmp_path / "validation.txt", make_documents(6, seed=2))
    job = ["--train_file", str(train), "--validation_file", str(validation), "--config_overrides", TINY_MODEL]
    # 16 rows a step: HF's collator then masks nothing in a step with odds below 1e-18 (with 4 rows, ~1e-4: a step
    # HF BERT scores as NaN, which stops its run, came within the budget on a quiet machine).
    job += ["--max_seq_length", "32", "--vocab_size", "120", "--per_device_train_batch_size", "16"]
    markdown = tmp_path / "table.md"
    argv = ["--minutes", "0.03", "--output_dir", str(tmp_path / "runs"), "--markdown", str(markdown), "--", *job]
    assert bench_budget.main(argv) == 0

    runs = json.loads((tmp_path / "runs" / "results.json").read_text())
    ours, hf = runs.values()
    for key in ("eval_mask_tokens", "eval_random_tokens", "eval_kept_tokens", "eval_mask_baseline_accuracy"):
        assert ours["results"][key] == hf["results"][key], key
    for run in (ours, hf):
        assert run["steps"] >= 1 and math.isfinite(run["results"]["eval_mlm_loss"])
    assert [item["sentence"] for item in ours["probe"]] == [item["sentence"] for item in hf["probe"]]
    table = markdown.read_text()
    for name in ("optimizer steps", "held-out MLM loss", "accuracy at `[MASK]`", "probe 1:"):
        assert name in table, name


def test_job_throughput_compares_a_job_with_a_bare_loop_over_its_own_batches(tmp_path):
    """benchmarks/bench_job_throughput.py: the pretraining job's own steady rate against a bare loop of its model."""
    throughput = load_benchmark("bench_job_throughput")
    sentences = ["the cat sat on the mat .", "a dog ran in the park .", "birds sing at dawn ."]
    (tmp_path / "train.txt").write_text("\n\n".join(" ".join(sentences[i % 3:] + sentences[: i % 3]) for i in range(40)))
    flags = ["--use_cpu", "true", "--train_file", str(tmp_path / "train.txt"), "--vocab_size", "64", "--max_seq_length", "16",
             "--per_device_train_batch_size", "4", "--fill_mask_probes", "0",
             "--config_overrides", "num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64"]  # fmt: skip
    result = throughput.job_against_bare_loop("pretrain", throughput.pretrain, flags, steps=8, warmup=1)
    assert result["job"] == "pretrain" and result["device"] == "cpu" and result["rows_per_step"] == 4
    assert result["job_steps"] > 0 and result["bare_steps"] > 0
    assert result["ratio"] == pytest.approx(result["job_steps"] / result["bare_steps"])
    table = throughput.markdown([("pretrain masking (padded)", "4 x ≤16", 123.0)], [result])
    assert "| pretrain | cpu | 4 | 0 |" in table and "| pretrain masking (padded) | 4 x ≤16 | 123 |" in table
    sys.modules.pop("bench_job_throughput", None)


@pytest.mark.slow  # over 10 s on 2 cores
@pytest.mark.multiprocess  # the loader worker
def test_job_overhead_is_the_job_ms_per_step_minus_the_bare_loops(tmp_path):
    """bench_job_throughput.py --overhead: what receiving a worker's batch costs, a job with the near-zero-compute
    model against its bare loop, and the stock Trainer's floor, measured after each job run."""
    throughput = load_benchmark("bench_job_throughput")
    transfers = throughput.worker_transfers(batches=4, shapes=[(4, 32, 3), (128, 128, 4)])  # through the pipe, one file
    assert len(transfers) == 2
    assert all(row["tensor_by_tensor"] > 0 and row["one_transfer"] > 0 for row in transfers)
    assert "| 3 x (4, 32) int64 | 3 |" in throughput.transfer_markdown(transfers)
    result, floor = throughput.overheads(["finetune-cls"], steps=20, warmup=1, repeats=1)
    assert result["job"] == "finetune-cls" and floor["job"].startswith("transformers.Trainer")
    assert floor["repeats"] == 2  # one floor run after each of the job's runs, with each loader
    table = throughput.overhead_markdown([result, floor])
    floor_timing = floor[throughput.TRAINER_FLOOR_LOADER]
    assert floor_timing["overhead_ms"] == pytest.approx(floor_timing["job_ms"] - floor_timing["bare_ms"])
    assert f"| {floor['job']} | {throughput.TRAINER_FLOOR_LOADER} | {floor_timing['job_ms']:.2f} |" in table
    for loader in ("in the process (CPU default)", "in a loader worker (as on a GPU)"):
        timing = result[loader]
        assert timing["job_ms"] > 0 and timing["bare_ms"] > 0 and 0 < timing["fetch_ms"] < timing["job_ms"]
        assert timing["overhead_ms"] == pytest.approx(timing["job_ms"] - timing["bare_ms"])
        assert f"| finetune-cls | {loader} | {timing['job_ms']:.2f} | {timing['bare_ms']:.2f} |" in table
        met = "yes" if timing["above_floor_ms"] <= 0.5 else "no"
        low, high = timing["above_floor_range"]
        assert low == high == timing["above_floor_ms"]  # one run
        assert f"| {low:.2f} ({low:.2f} to {high:.2f}) | {met} |" in table  # the target is relative to the floor
    assert "| above the floor ms/step (median, range) | ≤ floor + 0.5 ms |" in table
    sys.modules.pop("bench_job_throughput", None)


def test_interleaved_bare_loop_times_the_job_s_steps_without_the_bare_loop_s(tmp_path):
    """bench_job_throughput.py --overhead: the bare loop's chunks run between two job steps and are timed apart; a
    job step (1 s on the fake clock) never holds a bare step (5 s), nor the warm-up steps."""
    from transformers import Trainer, TrainingArguments

    from mlm_suite import MlmSuiteConfig, MlmSuiteForSequenceClassification
    from tests.helpers import AdvanceClock, FakeClock

    throughput = load_benchmark("bench_job_throughput")
    config = MlmSuiteConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    batch = {"input_ids": torch.randint(5, 64, (2, 8)), "labels": torch.tensor([0, 1])}
    clock = FakeClock()
    args = TrainingArguments(str(tmp_path), use_cpu=True, max_steps=35, per_device_train_batch_size=1, report_to="none",
                             save_strategy="no", disable_tqdm=True)  # fmt: skip
    trainer = Trainer(model=MlmSuiteForSequenceClassification(config), args=args, train_dataset=[batch] * 35,
                      data_collator=lambda rows: rows[0], callbacks=[AdvanceClock(clock, lambda step: 1.0)])  # fmt: skip
    timer = throughput.InterleavedBareLoop(trainer, warmup=5, chunk=10, clock=clock)
    bare_step = timer.bare.step
    timer.bare.step = lambda: (bare_step(), setattr(clock, "now", clock.now + 5.0))
    trainer.add_callback(timer)
    trainer.train()
    assert timer.job_steps == 30 and timer.bare_steps == 30  # chunks after steps 10, 20 and 30
    assert timer.bare.steps_taken == 40  # and one untimed chunk first, the bare loop's warm-up
    timing = timer.timing()
    assert timing["job_ms"] == pytest.approx(1000.0) and timing["bare_ms"] == pytest.approx(5000.0)
    assert timing["overhead_ms"] == pytest.approx(-4000.0) and timing["fetch_ms"] > 0
    assert timer.bare.model is not trainer.model  # a copy: the job trains as it would alone
    sys.modules.pop("bench_job_throughput", None)


def test_overhead_finetuning_rows_all_fill_the_row_so_job_and_bare_loop_compute_the_same(tmp_path, tokenizer):
    """bench_job_throughput.py --overhead: the fine-tuning jobs' files give batches of one shape (every row 32 tokens
    of ``TINY_ROWS``, a pair truncated to it), and enough rows that 200 steps of 4 stay within one epoch."""
    import csv

    throughput = load_benchmark("bench_job_throughput")
    flags = throughput.overhead_finetuning_data(tmp_path, tokenizer)
    assert sorted(flags) == ["finetune-cls", "finetune-ner", "finetune-pair"]
    cls = list(csv.DictReader(open(flags["finetune-cls"][1], encoding="utf-8")))
    pair = list(csv.DictReader(open(flags["finetune-pair"][1], encoding="utf-8")))
    sentences = Path(flags["finetune-ner"][1]).read_text(encoding="utf-8").strip().split("\n\n")
    assert min(len(cls), len(pair), len(sentences)) >= 4 * 201
    assert {len(tokenizer(row["text"])["input_ids"]) for row in cls} == {32}
    assert min(len(tokenizer(row["sentence1"], row["sentence2"])["input_ids"]) for row in pair) >= 32
    words = [[line.split()[0] for line in sentence.splitlines()] for sentence in sentences]
    assert {len(tokenizer(sentence, is_split_into_words=True)["input_ids"]) for sentence in words} == {32}
    sys.modules.pop("bench_job_throughput", None)
