"""Modern pretraining controls (issue 27): masking-rate schedules and the replacement split, batch-size warmup,
warmup-stable-decay learning rates (with a time budget and from a stable-phase checkpoint) and context extension.

Schedules are checked as values at given steps, through the samplers of two processes, in dataloader workers and
across a resume; the batch-size warmup against one large batch (the loss normalisation); context extension by
loading and running the extended model and filling masks at the old length. Jobs run a 2-layer, hidden-64 model.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, Trainer, TrainingArguments

from mlm_suite import cli
from mlm_suite.data.pretraining.chunking import tokenize_for_mlm
from mlm_suite.data.pretraining.masking import DataCollatorForMaskedLM
from mlm_suite.data.pretraining.schedules import (
    BatchSizeWarmup, MaskRateSchedule, ScheduledBatchSampler, TaggedRows, permutation,
)  # fmt: skip
from mlm_suite.errors import UsageError
from mlm_suite.jobs.pretrain import main
from mlm_suite.jobs.common.output_folder import output_folders_released
from mlm_suite.data.pretraining.vocabulary import train_wordpiece_tokenizer
from mlm_suite.jobs.common.model_loading import position_changes
from mlm_suite.training.controls import WsdTimeBudgetCallback, time_budget_callback
from tests.helpers import (
    AdvanceClock,
    BERT_ARCHITECTURE,
    FakeClock,
    TINY_MODEL,
    ToyRegression,
    job_args,
    load_benchmark,
    make_documents,
    max_difference,
    read_json,
    repetitive_documents,
    toy_data,
    weights,
    write_text,
)


def history(output_dir: Path) -> dict[int, dict]:
    """The training-log entries of a run by step."""
    return {entry["step"]: entry for entry in read_json(output_dir / "trainer_state.json")["log_history"] if "loss" in entry}


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> dict[str, Path]:
    """18 training rows with a 120-token vocabulary (5 optimizer steps of at most 4 rows per epoch), a few held out.

    The vocabulary is trained once: runs compared weight for weight must share it (the tokenizers library may
    order tied merges differently in another process).
    """
    folder = tmp_path_factory.mktemp("schedules_corpus")
    documents = make_documents(12, seed=3)
    train_wordpiece_tokenizer(documents, vocab_size=120).save_pretrained(folder / "tokenizer")
    return {
        "train": write_text(folder / "train.txt", documents),
        "validation": write_text(folder / "validation.txt", make_documents(4, seed=4)),
        "tokenizer": folder / "tokenizer",
    }


def small_run(output_dir: Path, corpus: dict[str, Path], *extra: str) -> Path:
    common = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"])]
    common += ["--max_eval_samples", "4", "--eval_strategy", "no", "--fill_mask_probes", "0", "--tokenizer_name", str(corpus["tokenizer"])]
    assert main(job_args(output_dir, *common, *extra)) == 0
    return output_dir


# ------------------------------------------------------------------------------------------------
# Masking-rate schedules: values
# ------------------------------------------------------------------------------------------------
def test_masking_rate_schedules_at_given_steps():
    linear = MaskRateSchedule.parse("linear", 0.3, 0.1)
    assert [linear.rate(step, 10) for step in (0, 5, 10, 20)] == pytest.approx([0.3, 0.2, 0.1, 0.1])
    cosine = MaskRateSchedule.parse("cosine", 0.3, 0.1)
    assert [cosine.rate(step, 100) for step in (0, 25, 50, 100)] == pytest.approx(
        [0.3, 0.1 + 0.2 * (1 + math.cos(math.pi / 4)) / 2, 0.2, 0.1]
    )
    step = MaskRateSchedule.parse("step", 0.3, 0.15)
    assert [step.rate(s, 10) for s in (0, 4, 5, 9)] == [0.3, 0.3, 0.15, 0.15]
    inverse = MaskRateSchedule.parse("0.3,0.15@0.6,0.05@0.9", 0.3)  # mmBERT's inverse masking, in fractions of the run
    assert [inverse.rate(s, 100) for s in (0, 59, 60, 89, 90, 99)] == [0.3, 0.3, 0.15, 0.15, 0.05, 0.05]
    assert inverse.start == 0.3 and inverse.varies and "15% from 60% of the steps" in inverse.describe()
    in_steps = MaskRateSchedule.parse("0.4,0.2@3", 0.3)  # a step number, whatever the length of the run
    assert [in_steps.rate(s, total) for s, total in ((2, 10), (3, 10), (3, 1000))] == [0.4, 0.2, 0.2]
    constant = MaskRateSchedule.parse("constant", 0.3)
    assert not constant.varies and constant.rate(7, 10) == 0.3


@pytest.mark.parametrize(
    ("spec", "end", "message"),
    [
        ("linear", None, "needs --mlm_probability_end"),
        ("constant", 0.1, "needs --mlm_probability_schedule linear"),
        ("0.3,0.2@0.5,0.1@0.4", None, "increasing order"),
        ("0.3,0.2@0.5,0.1@7", None, "every @ as a fraction"),
        ("0.3@0.2,0.1@0.5", None, "starts at step 0"),
        ("0.3,0.2@2.5", None, "give constant, linear"),
        ("fast", None, "give constant, linear"),
        ("0.3,1.2@0.5", None, "must lie in"),
    ],
)
def test_bad_schedules_are_usage_errors(spec, end, message):
    with pytest.raises(UsageError, match=message) as error:
        MaskRateSchedule.parse(spec, 0.3, end)
    assert "\n" not in str(error.value)


def test_the_rates_of_a_schedule_are_checked_with_the_other_flags(tmp_path):
    from mlm_suite.jobs.pretrain import parse_arguments

    for flag in ("--mlm_probability", "--mlm_probability_end"):
        with pytest.raises(UsageError, match=f"{flag} must lie in \\(0, 1\\), got 1.5"):
            parse_arguments(["--output_dir", str(tmp_path), "--mlm_probability_schedule", "cosine", flag, "1.5"])


def test_collator_masks_each_row_at_its_own_rate(tmp_path):
    """A row's ``mlm_probability`` replaces the collator's rate: the budget of selected tokens follows it exactly
    (token masking selects floor or ceil of rate × maskable tokens), and the field never reaches the model."""
    tokenizer = train_wordpiece_tokenizer(make_documents(40), vocab_size=120)
    word = tokenizer.convert_tokens_to_ids("film")
    row = [tokenizer.cls_token_id, *[word] * 20, tokenizer.sep_token_id]  # 20 maskable tokens
    collator = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.3, seed=0, mask_replace_prob=1.0, random_replace_prob=0.0)
    features = [{"input_ids": row, "example_index": index, "mlm_probability": rate} for index, rate in enumerate((0.5, 0.1))]
    features.append({"input_ids": row, "example_index": 2})  # no rate of its own: the collator's 30 %
    batch = collator(features)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert (batch["labels"] != -100).sum(1).tolist() == [10, 2, 6]
    assert ((batch["input_ids"] == tokenizer.mask_token_id) == (batch["labels"] != -100)).all()  # 100/0/0 split
    whole_word = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.3, seed=0, masking="whole_word")
    word_features = [{**feature, "word_ids": [-1, *range(20), -1]} for feature in features[:2]]
    assert (whole_word(word_features)["labels"] != -100).sum(1).tolist() == [10, 2]


# ------------------------------------------------------------------------------------------------
# Samplers: the Trainer's order, every process, batch-size warmup
# ------------------------------------------------------------------------------------------------
def test_per_epoch_sampler_draws_the_trainers_batches_and_tags_their_step_rates(tmp_path):
    """Without a warmup the sampler yields the very micro-batches the Trainer's own loader yields (so a constant
    schedule trains exactly like no schedule), each row tagged with its data epoch and its optimizer step's rate."""
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2,
                             report_to="none", use_cpu=True, seed=7)  # fmt: skip
    loader = Trainer(model=ToyRegression(), args=args, train_dataset=toy_data(23)).get_train_dataloader()
    schedule = MaskRateSchedule.parse("linear", 0.4, 0.1)
    sampler = ScheduledBatchSampler(23, 4, gradient_accumulation_steps=2, seed=torch.random.initial_seed(),
                                    mask_schedule=schedule, total_steps=lambda: 9)  # fmt: skip
    assert len(sampler) == len(loader) == 6 and sampler.steps_per_epoch == 3
    orders = []
    for epoch in (0, 1, 2):
        loader.set_epoch(epoch)
        sampler.set_epoch(epoch)
        expected = list(loader.batch_sampler)
        batches = list(sampler)
        assert [[index for index, _, _ in batch] for batch in batches] == expected
        for number, batch in enumerate(batches):
            assert {tag[1:] for tag in batch} == {(epoch, schedule.rate(3 * epoch + number // 2, 9))}
        orders.append(expected)
    assert orders[0] != orders[1] != orders[2]  # a new order every epoch


def test_two_processes_tag_each_step_alike_and_share_its_rows():
    """Each process's sampler gives the same step the same rate; the processes' rows are disjoint and together make
    the step's rows: a whole data epoch per epoch (per-epoch layout), a slice of the stream (batch-size warmup)."""
    schedule = MaskRateSchedule.parse("cosine", 0.4, 0.1)
    per_epoch = [ScheduledBatchSampler(32, 4, 2, num_processes=2, process_index=rank, seed=3, mask_schedule=schedule,
                                       total_steps=lambda: 8) for rank in (0, 1)]  # fmt: skip
    for sampler in per_epoch:
        sampler.set_epoch(1)
    ranks = [list(sampler) for sampler in per_epoch]
    assert len(ranks[0]) == len(ranks[1]) == 4  # 32 rows: 2 steps of 2 processes x 2 micro-batches of 4 rows
    assert [batch[0][2] for batch in ranks[0]] == [batch[0][2] for batch in ranks[1]] == [schedule.rate(s, 8) for s in (2, 2, 3, 3)]
    rows = [index for rank in ranks for batch in rank for index, epoch, _ in batch]
    assert sorted(rows) == list(range(32)) and {tag[1] for rank in ranks for batch in rank for tag in batch} == {1}

    warmup = BatchSizeWarmup(tokens=160, min_rows=1, max_rows=4, row_tokens=10, rows_multiplier=2 * 2)
    stream = [ScheduledBatchSampler(10, 4, 2, num_processes=2, process_index=rank, seed=3, mask_schedule=schedule,
                                    warmup=warmup, max_steps=6) for rank in (0, 1)]  # fmt: skip
    ranks = [list(sampler) for sampler in stream]
    assert len(ranks[0]) == len(ranks[1]) == len(stream[0]) == 12
    sizes = [len(batch) for batch in ranks[0][::2]]
    assert sizes == [warmup.rows(step) for step in range(6)] == [1, 1, 2, 4, 4, 4]
    assert [len(batch) for batch in ranks[1][::2]] == sizes
    # Step s is the stream slice [rows_before(s), rows_before(s + 1)): micro-batch m of process p is its block m*2 + p.
    order = [index for epoch in range(7) for index in permutation(10, 3, epoch)]
    for step in range(6):
        blocks = [ranks[rank][2 * step + micro] for micro in (0, 1) for rank in (0, 1)]
        start = warmup.rows_before(step)
        assert [tag[0] for block in blocks for tag in block] == order[start : warmup.rows_before(step + 1)]
        assert [tag[1] for block in blocks for tag in block] == [p // 10 for p in range(start, warmup.rows_before(step + 1))]
        assert {tag[2] for block in blocks for tag in block} == {schedule.rate(step, 6)}


def test_rows_drawn_in_training_order_are_read_in_order_step_by_step():
    """``shuffle=False`` (a phased language mix, drawn ahead for each step): step s trains rows [s·R, (s+1)·R) of every
    process together, in both layouts, every epoch alike."""
    per_epoch = [ScheduledBatchSampler(16, 2, 2, num_processes=2, process_index=rank, shuffle=False) for rank in (0, 1)]
    for epoch in (0, 1):
        ranks = []
        for sampler in per_epoch:
            sampler.set_epoch(epoch)
            ranks.append([[tag[0] for tag in batch] for batch in sampler])
        for step in range(2):  # 2 processes x 2 micro-batches x 2 rows = 8 rows a step
            rows = [index for micro in (0, 1) for rank in (0, 1) for index in ranks[rank][2 * step + micro]]
            assert sorted(rows) == list(range(8 * step, 8 * step + 8))
    warmup = BatchSizeWarmup(tokens=40, min_rows=1, max_rows=2, row_tokens=10, rows_multiplier=2)
    stream = [ScheduledBatchSampler(12, 2, 1, num_processes=2, process_index=rank, warmup=warmup, max_steps=5,
                                    shuffle=False) for rank in (0, 1)]  # fmt: skip
    ranks = [[[tag[0] for tag in batch] for batch in sampler] for sampler in stream]
    positions = [index for step in range(5) for rank in (0, 1) for index in ranks[rank][step]]
    assert positions == [position % 12 for position in range(warmup.rows_before(5))]


def test_batch_size_warmup_grows_linearly_in_tokens():
    warmup = BatchSizeWarmup(tokens=10_000, min_rows=2, max_rows=16, row_tokens=64, rows_multiplier=3)
    rows = [warmup.rows(step) for step in range(warmup.warmup_steps + 3)]
    assert rows[0] == 2 and rows[-3:] == [16, 16, 16] and rows == sorted(rows)
    for step in range(warmup.warmup_steps):
        tokens = warmup.rows_before(step) * 64
        assert tokens < 10_000 and rows[step] == 2 + 14 * tokens // 10_000
        assert warmup.rows_before(step + 1) == warmup.rows_before(step) + 3 * rows[step]
    assert warmup.rows_before(warmup.warmup_steps) * 64 >= 10_000  # full rows once the warmup's tokens are trained on
    with pytest.raises(UsageError, match="batch_size_warmup_min_rows"):
        BatchSizeWarmup(tokens=100, min_rows=20, max_rows=16, row_tokens=64)


def test_tagged_rows_carry_epoch_and_rate():
    rows = TaggedRows([{"input_ids": [1, 2]}, {"input_ids": [3]}])
    assert rows.__getitems__([(1, 4, 0.2), (0, 5, None)]) == [
        {"input_ids": [3], "epoch": 4, "mlm_probability": 0.2},
        {"input_ids": [1, 2], "epoch": 5},
    ]


# ------------------------------------------------------------------------------------------------
# Masking-rate schedules and batch-size warmup in the job
# ------------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.slow  # over 10 s on 2 cores
def test_schedule_reaches_loader_workers_is_logged_and_a_constant_one_changes_nothing(tmp_path, small_corpus):
    """A linear 45 % -> 5 % schedule over 8 steps (crossing two epochs) trains the same in the main process and in
    2 loader workers (the rate travels with the rows); the logged rates are the schedule's; a schedule that stays
    at 30 % trains exactly like the job without one."""
    common = ["--max_steps", "8", *BERT_ARCHITECTURE]
    varying = ["--mlm_probability", "0.45", "--mlm_probability_schedule", "linear", "--mlm_probability_end", "0.05"]
    main_process = small_run(tmp_path / "main", small_corpus, *common, *varying)
    workers = small_run(tmp_path / "workers", small_corpus, *common, *varying, "--dataloader_num_workers", "2")
    assert max_difference(weights(main_process), weights(workers)) == 0.0
    schedule = MaskRateSchedule.parse("linear", 0.45, 0.05)
    logged = history(main_process)
    assert [logged[step]["mlm_probability"] for step in range(1, 9)] == pytest.approx([schedule.rate(s, 8) for s in range(8)])
    assert read_json(main_process / "train_results.json")["train_samples"] == 18
    assert logged[6]["epoch"] == pytest.approx(1.2)  # the per-epoch layout keeps the Trainer's epochs (5 steps each)
    card = (main_process / "README.md").read_text(encoding="utf-8")
    assert "| masking-rate schedule | linear 45% → 5% over the run" in card

    default = small_run(tmp_path / "default", small_corpus, *common, "--mlm_probability", "0.3")
    flat = small_run(tmp_path / "flat", small_corpus, *common, "--mlm_probability", "0.3", "--mlm_probability_schedule",
                     "linear", "--mlm_probability_end", "0.3")  # fmt: skip
    assert max_difference(weights(default), weights(flat)) == 0.0
    assert max_difference(weights(default), weights(main_process)) > 0  # the rate changed what was trained


def test_resume_with_schedule_and_batch_size_warmup_matches_an_uninterrupted_run(tmp_path, small_corpus):
    """A run with a masking-rate schedule and a batch-size warmup (1, 1, 1, 2, 3, then 4 rows per step; 28 rows in
    10 steps, more than the packed corpus holds, so the stream crosses into the second pass), resumed at step 4, ends
    where the uninterrupted run ends: same rows, rates, masks and weights.

    Packed (full) rows, so that even a step of one row has selected tokens."""
    common = ["--max_steps", "10", "--mlm_probability", "0.4", "--mlm_probability_schedule", "cosine", "--packing"]
    common += ["--mlm_probability_end", "0.1", "--batch_size_warmup_tokens", "200", "--batch_size_warmup_min_rows", "1"]
    full = small_run(tmp_path / "full", small_corpus, *common, "--save_strategy", "steps", "--save_steps", "4")
    resumed = small_run(tmp_path / "resumed", small_corpus, *common, "--resume_from_checkpoint", str(full / "checkpoint-4"))
    logs = [history(full), history(resumed)]
    assert [logs[0][step]["train_rows_per_step"] for step in range(1, 11)] == [1, 1, 1, 2, 3, 4, 4, 4, 4, 4]
    rows = read_json(full / "train_results.json")["train_samples"]
    assert rows < 28 and logs[0][10]["epoch"] == pytest.approx(28 / rows)  # passes over the data, not Trainer epochs
    assert read_json(resumed / "trainer_state.json")["global_step"] == 10
    for step in range(5, 11):
        for key in ("loss", "mlm_probability", "train_rows_per_step", "learning_rate"):
            assert math.isfinite(logs[0][step][key]), (step, key)
            assert logs[1][step][key] == pytest.approx(logs[0][step][key], rel=1e-5), (step, key)
    assert max_difference(weights(full), weights(resumed)) < 1e-6
    assert "batch-size warmup | 1 → 4 rows per step" in (full / "README.md").read_text(encoding="utf-8")


def test_batch_size_warmup_keeps_the_loss_a_mean_over_the_step_tokens(tmp_path, small_corpus):
    """The first warmup step (2 micro-batches of 2 rows) makes the same optimizer step as one batch of the same 4
    rows: the Trainer divides by the labelled tokens of the whole step, however its rows are split."""
    common = ["--max_steps", "1", "--adam_epsilon", "1e-6", *BERT_ARCHITECTURE]
    warm = small_run(tmp_path / "warm", small_corpus, *common, "--per_device_train_batch_size", "8",
                     "--gradient_accumulation_steps", "2", "--batch_size_warmup_tokens", "100000",
                     "--batch_size_warmup_min_rows", "2")  # fmt: skip
    plain = small_run(tmp_path / "plain", small_corpus, *common, "--per_device_train_batch_size", "4")
    first = [history(run)[1] for run in (warm, plain)]
    assert first[0]["train_rows_per_step"] == 4
    assert first[0]["loss"] == pytest.approx(first[1]["loss"], rel=1e-5)
    assert first[0]["grad_norm"] == pytest.approx(first[1]["grad_norm"], rel=1e-4)
    assert max_difference(weights(warm), weights(plain)) < 1e-5


# ------------------------------------------------------------------------------------------------
# Warmup-stable-decay learning rates
# ------------------------------------------------------------------------------------------------
def test_wsd_under_a_time_budget_decays_to_zero_at_the_budget(tmp_path):
    """2 s per step in a 100 s budget: 50 planned steps, warmup 5, constant, 1-sqrt decay over the last 10."""
    clock = FakeClock()
    advance = AdvanceClock(clock, lambda step: 2.0)
    budget = WsdTimeBudgetCallback(100.0, decay=0.2, decay_type="1-sqrt", clock=clock)
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=10_000, per_device_train_batch_size=4, learning_rate=0.1, warmup_steps=0.1,
        lr_scheduler_type="warmup_stable_decay", lr_scheduler_kwargs={"num_decay_steps": 1}, report_to="none",
        save_strategy="no", disable_tqdm=True, use_cpu=True,
    )  # fmt: skip
    trainer = Trainer(model=ToyRegression(), args=args, train_dataset=toy_data(), callbacks=[advance, budget])
    trainer.train()
    rates = advance.learning_rates  # the rate of the step after each step
    assert trainer.state.global_step == 50 == budget.planned_steps and budget.decay_steps() == 10
    assert rates[2] == pytest.approx(0.04) and rates[5] == rates[39] == rates[40] == pytest.approx(0.1)
    assert rates[45] == pytest.approx(0.1 * (1 - math.sqrt(0.5)))
    assert rates[50] == 0.0
    with pytest.raises(ValueError, match="warmup_stable_decay"):
        Trainer(model=ToyRegression(), args=TrainingArguments(output_dir=str(tmp_path), max_steps=2, report_to="none",
                use_cpu=True), train_dataset=toy_data(), callbacks=[WsdTimeBudgetCallback(10.0)]).train()  # fmt: skip


def test_decay_phase_from_a_stable_checkpoint(tmp_path, small_corpus):
    """A WSD run (6 steps, the last 2 decaying) saves checkpoints; the decay run from its stable checkpoint-2 loads
    its weights, optimizer, tokenizer and step, and decays over 3 steps: its first two losses are the stable run's
    (same weights, same peak rate), its rates follow 1-sqrt from the peak. A checkpoint in the decay is refused."""
    stable = small_run(tmp_path / "stable", small_corpus, "--max_steps", "6", "--lr_scheduler_type", "warmup_stable_decay",
                       "--lr_decay_steps", "2", "--save_strategy", "steps", "--save_steps", "2")  # fmt: skip
    stable_logs = history(stable)
    assert [stable_logs[step]["learning_rate"] for step in (1, 4, 5, 6)] == pytest.approx([1e-3, 1e-3, 1e-3, 1e-3 * (1 - 0.5**0.5)])
    argv_decay = ["--decay_from_checkpoint", str(stable / "checkpoint-2"), "--lr_decay_steps", "3", "--learning_rate", "1e-3"]
    common = ["--train_file", str(small_corpus["train"]), "--validation_file", str(small_corpus["validation"])]
    common += ["--max_eval_samples", "4", "--eval_strategy", "no", "--fill_mask_probes", "0"]
    decayed = tmp_path / "decayed"
    assert main(job_args(decayed, *common, *argv_decay)) == 0
    logs = history(decayed)
    assert max(logs) == 5 and read_json(decayed / "trainer_state.json")["global_step"] == 5  # steps 1-2: the checkpoint's
    assert [logs[step]["learning_rate"] for step in (3, 4, 5)] == pytest.approx([1e-3, 1e-3 * (1 - (1 / 3) ** 0.5), 1e-3 * (1 - (2 / 3) ** 0.5)])
    assert [logs[step]["loss"] for step in (3, 4)] == pytest.approx([stable_logs[step]["loss"] for step in (3, 4)], rel=1e-5)
    assert len(AutoTokenizer.from_pretrained(decayed)) == 120  # the stable run's vocabulary
    assert "decay phase only" in (decayed / "README.md").read_text(encoding="utf-8")
    for extra, message in (
        (["--decay_from_checkpoint", str(stable / "checkpoint-6"), "--lr_decay_steps", "3"], "below its peak"),
        ([*argv_decay, "--max_steps", "9"], "drop --max_steps"),
        (["--decay_from_checkpoint", str(stable / "checkpoint-2")], "needs --lr_decay_steps"),
        (["--decay_from_checkpoint", str(stable / "checkpoint-2"), "--lr_decay_steps", "3", "--learning_rate", "5e-4"], "drop --learning_rate"),
    ):
        with pytest.raises(UsageError, match=message), output_folders_released():  # as run_job releases it
            main(job_args(tmp_path / "refused", *common, *extra))
    assert not (tmp_path / "refused").exists()


# ------------------------------------------------------------------------------------------------
# Context extension
# ------------------------------------------------------------------------------------------------
def mask_accuracy(folder: Path, length: int, documents: list[str]) -> tuple[float, int]:
    """Accuracy at [MASK] positions (15 % of the tokens, all [MASK], fixed seed) on rows of ``length`` tokens."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForMaskedLM.from_pretrained(folder).eval()
    rows = tokenize_for_mlm({"text": documents}, tokenizer, max_length=length)
    features = [{"input_ids": ids, "example_index": index} for index, ids in enumerate(rows["input_ids"])]
    collator = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.15, mask_replace_prob=1.0, random_replace_prob=0.0, seed=1234)
    batch = collator(features)
    with torch.inference_mode():
        predicted = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.argmax(-1)
    selected = batch["labels"] != -100
    return float((predicted[selected] == batch["labels"][selected]).float().mean()), int(batch["input_ids"].shape[1])


@pytest.mark.slow  # over 10 s on 2 cores
def test_context_extension_continues_a_rotary_checkpoint_at_longer_rows(tmp_path):
    """A rotary model trained on 32-token rows (max_position_embeddings 32) continues on 64-token rows with a 4x RoPE
    base: the saved config has both, the model loads and runs on rows longer than its old limit, and it still fills
    masks at the old length (the most frequent token, '.', is 8 % of the tokens)."""
    train = write_text(tmp_path / "train.txt", repetitive_documents(200, seed=0))
    validation = write_text(tmp_path / "validation.txt", repetitive_documents(20, seed=1))
    common = ["--train_file", str(train), "--validation_file", str(validation), "--eval_strategy", "no", "--fill_mask_probes", "0"]
    base = tmp_path / "base"
    overrides = TINY_MODEL.replace("max_position_embeddings=64", "max_position_embeddings=32")
    assert main(job_args(base, *common, "--vocab_size", "120", "--max_steps", "300", "--learning_rate", "3e-3",
                         "--per_device_train_batch_size", "16", "--config_overrides", overrides)) == 0  # fmt: skip
    extended = tmp_path / "extended"
    argv = job_args(extended, *common, "--model_name_or_path", str(base), "--max_seq_length", "64", "--rope_theta", "40000")
    argv = argv[: argv.index("--config_overrides")] + argv[argv.index("--config_overrides") + 2 :]
    argv += ["--max_steps", "30", "--learning_rate", "1e-3", "--mlm_probability", "0.3", "--per_device_train_batch_size", "8"]
    assert main(argv) == 0

    config = read_json(extended / "config.json")
    assert (config["rope_theta"], config["max_position_embeddings"]) == (40000.0, 64)
    assert read_json(base / "config.json")["max_position_embeddings"] == 32
    assert "context extension | RoPE base 10000 → 40000, max_position_embeddings 32 → 64" in (
        extended / "README.md"
    ).read_text(encoding="utf-8")
    held_out = repetitive_documents(60, seed=5)
    (before, _), (after, _), (long, width) = (
        mask_accuracy(base, 32, held_out), mask_accuracy(extended, 32, held_out), mask_accuracy(extended, 64, held_out)
    )
    assert width == 64 and long > 0.4
    assert before > 0.4 and after > before - 0.05


def test_position_changes_check_and_leave_the_config_as_it_is():
    from mlm_suite import MlmSuiteConfig

    config = MlmSuiteConfig(position_embedding_type="rotary", max_position_embeddings=32)
    fields, change = position_changes(config, 80000.0, 128, continued=True)
    assert fields == {"rope_theta": 80000.0, "max_position_embeddings": 128}
    assert (config.rope_theta, config.max_position_embeddings) == (10000.0, 32)  # not changed in place
    assert "max_position_embeddings 32 → 128" in change and change.endswith("(rows of 128 tokens)")
    fields, _ = position_changes(config, 80000.0, 128, continued=False)
    assert fields == {"rope_theta": 80000.0}  # a new model's positions stand
    assert position_changes(config, None, 32, continued=False) == ({}, None)
    with pytest.raises(UsageError, match="rotary positions"):
        position_changes(MlmSuiteConfig(position_embedding_type="absolute"), 80000.0, 128, continued=False)


def test_a_context_extension_gives_the_model_and_a_copy_of_the_tokenizer_the_longer_rows(tmp_path):
    """The plan decides the change (a control row, printed and in the card); building the config applies it to a new
    config and a copy of the tokenizer, whose ``model_max_length`` follows the rows."""
    from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM
    from mlm_suite.jobs.pretrain import build_config, plan_run

    tokenizer = train_wordpiece_tokenizer(["one two three four five six"] * 20, vocab_size=60)
    tokenizer.model_max_length = 32
    folder = tmp_path / "rotary"
    config = MlmSuiteConfig.preset("tiny", vocab_size=len(tokenizer), max_position_embeddings=32,
                                   position_embedding_type="rotary")
    MlmSuiteForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    plan = plan_run(["--output_dir", str(tmp_path / "out"), "--model_name_or_path", str(folder), "--max_seq_length",
                     "64", "--rope_theta", "40000"])
    assert dict(plan.position_changes) == {"rope_theta": 40000.0, "max_position_embeddings": 64}
    assert plan.controls["context extension"].startswith("RoPE base 10000 → 40000, max_position_embeddings 32 → 64")
    built, longer = build_config(plan, tokenizer)
    assert (built.rope_theta, built.max_position_embeddings, longer.model_max_length) == (40000.0, 64, 64)
    assert longer is not tokenizer and tokenizer.model_max_length == 32


def test_time_budget_callback_follows_the_learning_rate_schedule_and_the_clock():
    """The job's time budget: warmup-stable-decay's callback for a WSD run (its decay length and shape), the linear
    one otherwise; both timed on the clock given (benchmarks time on CPU seconds)."""
    from mlm_suite.training.controls import TimeBudgetCallback

    def clock() -> float:
        return 5.0

    wsd = time_budget_callback(60.0, "warmup_stable_decay", {"decay_type": "cosine"}, decay=0.3, clock=clock)
    assert isinstance(wsd, WsdTimeBudgetCallback) and (wsd.decay, wsd.decay_type, wsd.clock) == (0.3, "cosine", clock)
    linear = time_budget_callback(90.0, "linear", clock=clock)
    assert type(linear) is TimeBudgetCallback and (linear.budget_seconds, linear.clock) == (90.0, clock)


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mlm_probability_schedule", "linear"], "needs --mlm_probability_end"),
        (["--mask_replace_prob", "0.95", "--random_replace_prob", "0.1"], "must not exceed 1"),
        (["--batch_size_warmup_min_rows", "2"], "needs --batch_size_warmup_tokens"),
        (["--batch_size_warmup_tokens", "100", "--batch_size_warmup_min_rows", "9"], "batch_size_warmup_min_rows must lie"),
        (["--lr_decay_steps", "0.2"], "shape a --lr_scheduler_type warmup_stable_decay"),
        (["--lr_scheduler_type", "warmup_stable_decay", "--lr_decay_steps", "5"], "do not fit"),
        (["--decay_from_checkpoint", "{missing}", "--lr_decay_steps", "3"], "no trainer_state.json"),
        (["--rope_theta", "-1"], "must be positive"),
        (["--rope_theta", "20000", "--position_embedding_type", "absolute"], "rotary positions"),
    ],
)
def test_bad_control_flags_fail_before_writing_anything(tmp_path, small_corpus, extra, message):
    output_dir = tmp_path / "out"
    extra = [value.format(missing=tmp_path / "missing") for value in extra]
    with pytest.raises(UsageError, match=message), output_folders_released():  # as run_job releases it
        small_run(output_dir, small_corpus, "--max_steps", "4", *extra)
    assert not output_dir.exists()


def test_bad_control_flag_is_one_line_exit_2(tmp_path, small_corpus, capsys):
    argv = ["pretrain", "--output_dir", str(tmp_path / "out"), "--train_file", str(small_corpus["train"])]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--mlm_probability_schedule", "0.3,0.1@0.5,0.2@0.4"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("mlm-suite pretrain: error: --mlm_probability_schedule")
    assert "increasing order" in err[0] and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------
# The fixed-budget benchmark
# ------------------------------------------------------------------------------------------------
def test_controls_benchmark_scores_every_run_on_the_same_rows(tmp_path):
    """benchmarks/bench_pretrain_controls.py on a tiny corpus and budget: one vocabulary for every run, today's
    recipe and the controls (context extension included, scored on the job's rows) on the same masks."""
    import json
    import sys


    corpus = write_text(tmp_path / "train.txt", make_documents(40, seed=3))
    bench = load_benchmark("bench_pretrain_controls")
    argv = [
        "--minutes", "0.005", "--seeds", "0", "--controls", "mask_inverse", "context_extension", "--no_combination",
        "--output_dir", str(tmp_path / "bench"), "--markdown", str(tmp_path / "table.md"),
        "--", "--train_file", str(corpus), "--validation_split_percentage", "20", "--vocab_size", "150",
        "--max_seq_length", "32", "--per_device_train_batch_size", "8", "--fill_mask_probes", "0",
        "--config_overrides", "hidden_size=32,intermediate_size=64", "--dataloader_pin_memory", "false",
    ]  # fmt: skip
    try:
        assert bench.main(argv) == 0  # the budget on CPU time (--clock cpu, the default)
    finally:
        sys.modules.pop("bench_pretrain_controls", None)
    runs = json.loads((tmp_path / "bench" / "results.json").read_text())["runs"]
    assert list(runs) == ["today's recipe", "mask_inverse", "context_extension"]
    assert len({run[0]["eval_mask_tokens"] for run in runs.values()}) == 1  # the same rows and masks
    assert len({run[0]["eval_mask_baseline_accuracy"] for run in runs.values()}) == 1
    assert read_json(tmp_path / "bench" / "context_extension" / "seed0" / "stage2" / "config.json")["rope_theta"] == 40000.0
    table = (tmp_path / "table.md").read_text(encoding="utf-8")
    assert "| mask_inverse | `--mlm_probability_schedule 0.3,0.15@0.6,0.05@0.9` |" in table
