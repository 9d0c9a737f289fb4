"""Each feature of the jobs' Trainer on its own, without a Trainer (mlm_suite.training.features): given what the
adapter gives it at each point of the protocol, it does its one thing. Whole runs through the adapter:
tests/training/test_trainer.py, tests/conformance/test_training_semantics.py and the job tests."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mlm_suite.errors import UsageError
from mlm_suite.training.features import Progress, Run


def run_args(**overrides) -> SimpleNamespace:
    values = dict(device=torch.device("cpu"), world_size=1, process_index=0, average_tokens_across_devices=True,
                  max_steps=10, train_batch_size=4, per_device_train_batch_size=4, gradient_accumulation_steps=1,
                  parallel_mode=None)
    return SimpleNamespace(**{**values, **overrides})


def resumed_run(step: int = 0, **state) -> Run:
    return Run(run_args(), torch.nn.Linear(2, 2), checkpoint="checkpoint" if step else None,
               state={"global_step": step, **state})


# --------------------------------------------------------------------------------------------
# The losses
# --------------------------------------------------------------------------------------------
def test_nsp_counting_counts_the_step_s_next_sentence_labels_for_the_model_s_loss():
    from mlm_suite.training.loss_accounting import NspCounting

    counting = NspCounting()
    counting.start(resumed_run())
    batches = [{"next_sentence_label": torch.tensor([0, 1, -100])}, {"next_sentence_label": torch.tensor([1, 1])}]
    assert int(counting.batches(batches, torch.tensor(7))) == 4 + 7  # the step's learnable items
    inputs = counting.loss_inputs({"next_sentence_label": torch.tensor([0, 1, -100])}, torch.tensor(7))
    assert int(inputs["num_sentence_pairs_in_batch"]) == 4
    assert "num_sentence_pairs_in_batch" not in counting.loss_inputs({"labels": 1}, torch.tensor(7))
    assert counting.batches([{"labels": torch.tensor([1])}], torch.tensor(3)) == 3  # MLM alone: the Trainer's count
    assert counting.loss_inputs({"next_sentence_label": torch.tensor([1])}, torch.tensor(3)) == {
        "next_sentence_label": torch.tensor([1])}

    across = NspCounting()
    across.start(Run(run_args(world_size=2), torch.nn.Linear(2, 2), gather=lambda tensor: torch.stack([tensor, tensor])))
    assert int(across.batches(batches, None)) == 8  # both processes' labels


def test_the_loss_watch_stops_at_the_first_non_finite_step_only_where_the_host_waits():
    from mlm_suite.training.loss_accounting import LossWatch

    watch = LossWatch()
    watch.start(resumed_run(step=20))  # resumed: steps count on from the checkpoint's
    for step, loss in ((20, 1.0), (20, 2.0), (21, 0.5)):  # two micro-batches of step 21, then step 22
        watch.after_backward(None, step, torch.tensor(loss))
    watch.synchronised()  # all finite
    watch.after_backward(None, 22, torch.tensor(float("nan")))
    watch.after_backward(None, 23, torch.tensor(float("inf")))
    with pytest.raises(UsageError, match="training stopped at step 23: the loss became nan"):
        watch.synchronised()
    with pytest.raises(UsageError, match="step 23"):  # the first one is kept
        watch.end()


def test_resumed_loss_counts_out_empty_steps_and_carries_the_checkpoint_s_total():
    from mlm_suite.training.loss_accounting import TRAIN_LOSS_STATE, ResumedLoss

    record = {TRAIN_LOSS_STATE: {"args": {}, "attributes": {"loss_sum": 10.0, "counted_steps": 5}}}
    loss = ResumedLoss()
    loss.start(resumed_run(step=6, stateful_callbacks=record))  # 6 steps, one of them empty
    for items in (3, 0, 2):  # steps 7, 8 (nothing to predict), 9
        loss.batches([], torch.tensor(items))
    logs = {"loss": 1.0}
    assert loss.log_values(logs, Progress(step=9, log_window=3)) == {"loss": 1.5}  # over the 2 steps that predicted
    assert loss.log_values({"loss": 1.0}, Progress(step=9, log_window=1)) == {}  # no new empty step
    saved = loss.checkpoint("unused", Progress(step=9, loss_sum=4.0, running_loss=lambda: 2.0))
    assert saved == {TRAIN_LOSS_STATE: {"args": {}, "attributes": {"loss_sum": 16.0, "counted_steps": 7}}}
    end = loss.log_values({"train_runtime": 1.0, "train_loss": 99.0}, Progress(step=9, loss_sum=6.0))
    assert end == {"train_loss": pytest.approx((10.0 + 6.0) / 7)}

    silent = ResumedLoss()
    silent.start(resumed_run())
    silent.batches([], torch.tensor(0))
    logs = {"loss": 0.0}
    assert silent.log_values(logs, Progress(step=1, log_window=1)) == {} and "loss" not in logs  # nothing predicted


# --------------------------------------------------------------------------------------------
# What a run delivers
# --------------------------------------------------------------------------------------------
def test_throughput_reports_real_tokens_per_steady_second_and_its_card_rows():
    from mlm_suite import MlmSuiteForMaskedLM
    from mlm_suite.training.throughput import UNKNOWN, Throughput, throughput_rows
    from tests.helpers import make_tiny_config

    throughput = Throughput(mfu=True)
    assert throughput.attach(run_args()) == [throughput.step_rate]
    model = MlmSuiteForMaskedLM(make_tiny_config())
    throughput.start(Run(run_args(peak_tflops=None), model))
    batch = {"input_ids": torch.ones(2, 5, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1] * 5])}
    for _ in range(4):
        throughput.batches([batch], None)
    throughput.step_rate.steps, throughput.step_rate.seconds = 10, 2.0  # 5 steady steps per second
    values = throughput.log_values({"train_runtime": 3.0, "train_steps_per_second": 2.0}, Progress(step=4))
    assert values == {"train_samples_per_second": 8.0, "train_steady_steps_per_second": 5.0,
                      "train_steady_samples_per_second": 20.0, "train_tokens_per_second": 40.0, "train_mfu": UNKNOWN}
    assert throughput.log_values({"loss": 1.0}, Progress(step=4)) == {}
    assert throughput_rows(values, run_args(peak_tflops=None)) == {
        "real (non-pad) tokens per second, steady steps": "40",
        "model FLOPs utilisation": "unknown (no dense bf16 peak known for cpu; give --peak_tflops)"}


def test_kept_predictions_keep_the_latest_evaluation_per_prefix():
    from mlm_suite.training.job_outputs import KeptPredictions

    kept = KeptPredictions()
    kept.after_evaluation("eval", np.array([1]), np.array([0]))
    kept.after_evaluation("eval", np.array([2]), np.array([1]))
    kept.after_evaluation("test", np.array([3]), np.array([2]))
    assert kept.by_prefix["eval"].predictions.tolist() == [2] and kept.by_prefix["test"].label_ids.tolist() == [2]


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------
def test_head_warmup_drops_the_encoder_s_gradients_for_its_steps():
    from mlm_suite import MlmSuiteForMaskedLM
    from mlm_suite.training.pretraining import HeadWarmup
    from tests.helpers import make_random_batch, make_tiny_config

    model = MlmSuiteForMaskedLM(make_tiny_config())
    warmup = HeadWarmup(steps=2)
    for step, frozen in ((0, True), (1, True), (2, False)):
        model.zero_grad(set_to_none=True)
        model(**make_random_batch(), labels=make_random_batch()["input_ids"]).loss.backward()
        warmup.after_backward(model, step, torch.tensor(0.0))
        encoder = [parameter.grad is None for parameter in model.encoder.parameters()]
        assert all(encoder) == frozen and not any(encoder) == (not frozen), step
        assert model.lm_head.dense.weight.grad is not None


def test_gradient_caching_leaves_small_batches_to_the_trainer_and_refuses_what_it_cannot_average():
    from mlm_suite.training.retrieval import EmbeddingPrediction, GradientCaching

    with pytest.raises(ValueError, match="mini_batch_size must be at least 1"):
        GradientCaching(0)
    caching = GradientCaching(4)
    small = {"cu_seq_lens_q": torch.tensor([0, 3, 5, 9])}  # 3 sequences
    assert caching.training_step(None, None, small, None) is None
    learned = torch.nn.Linear(2, 2)
    learned.logit_scale = torch.nn.Parameter(torch.zeros(()))
    with pytest.raises(ValueError, match="learned temperature cannot be trained with mini_batch_size on several"):
        caching.start(Run(run_args(world_size=2), learned))
    assert EmbeddingPrediction().prediction_step(None, None, {"labels": torch.tensor([0])}) is None


# --------------------------------------------------------------------------------------------
# Loaders and checkpoints
# --------------------------------------------------------------------------------------------
class FakeLoader:
    def __init__(self) -> None:
        self.position = {"rows_read": 12}

    def state_dict(self) -> dict:
        return dict(self.position)

    def load_state_dict(self, state: dict) -> None:
        self.position = state


def test_the_stream_position_is_saved_in_each_checkpoint_and_restored_before_the_rngs(tmp_path):
    from mlm_suite.training.stream_position import StreamPosition

    position = StreamPosition()
    assert position.restore(str(tmp_path)) is False  # no stream trained on: nothing to restore
    position.attach(run_args(accelerator_config=SimpleNamespace(dispatch_batches=False), ignore_data_skip=True))
    position.loader = FakeLoader()
    folder = tmp_path / "checkpoint-3"
    assert position.checkpoint(str(folder), Progress(step=3)) == {}
    assert json.loads((folder / "data_state.json").read_text()) == {"rows_read": 12}
    position.loader = FakeLoader()
    position.loader.position = {}
    assert position.restore(str(folder)) is True  # the RNGs wait for the first step
    assert position.loader.position == {"rows_read": 12}
    with pytest.raises(ValueError, match="has no data_state.json: it was not saved by a run on this stream"):
        position.restore(str(tmp_path))
    with pytest.raises(ValueError, match="dispatch_batches"):
        position.attach(run_args(accelerator_config=SimpleNamespace(dispatch_batches=True), ignore_data_skip=True))


def test_language_shares_count_the_rows_trained_take_the_tags_out_and_carry_them_across_a_resume():
    from mlm_suite.training.device_tallies import FOLD_EVERY
    from mlm_suite.training.language_shares import LANGUAGE_ROWS_STATE, LanguageShares

    shares = LanguageShares(["en", "de", "sw"])
    shares.start(resumed_run())
    steps = FOLD_EVERY + 3  # counted in folds and at the end
    for step in range(steps):
        batches = [{"input_ids": torch.ones(2, 3), "language_id": torch.tensor([0, step % 3])},
                   {"input_ids": torch.ones(1, 3), "language_id": torch.tensor([1])}]
        assert shares.batches(batches, torch.tensor(5)) is not None
        assert all("language_id" not in batch for batch in batches)  # never a model input
    expected = [steps + -(-steps // 3), steps + (steps + 1) // 3, (steps + 0) // 3]
    assert shares.rows() == expected and sum(expected) == 3 * steps
    record = shares.checkpoint("unused", Progress(step=steps))
    assert record[LANGUAGE_ROWS_STATE]["attributes"]["rows"] == dict(zip(["en", "de", "sw"], expected))
    # A resumed run starts from the checkpoint's rows; its own are added once, whatever the processes.
    resumed = LanguageShares(["en", "de", "sw"])
    resumed.start(Run(run_args(world_size=2), torch.nn.Linear(2, 2), "checkpoint",
                      {"global_step": steps, "stateful_callbacks": record},
                      gather=lambda tensor: torch.cat([tensor, tensor])))  # two processes with the same rows
    resumed.batches([{"language_id": torch.tensor([2, 2])}], None)
    assert resumed.rows() == [expected[0], expected[1], expected[2] + 4]
    total = sum(expected) + 4
    assert resumed.shares() == {"train_language_share_en": expected[0] / total, "train_language_share_de": expected[1] / total,
                                "train_language_share_sw": (expected[2] + 4) / total}


def test_scheduled_rows_log_the_step_s_masking_rate_and_rows():
    from mlm_suite.training.schedules import RowSchedule, ScheduledRows

    rows = ScheduledRows(RowSchedule())
    assert rows.log_values({"loss": 1.0}, Progress(step=3)) == {}  # no loader built yet
    rows.sampler = SimpleNamespace(rate=lambda step: 0.3 - 0.01 * step, warmup=object(),
                                   rows_per_step=lambda step: 8 * (step + 1))
    assert rows.log_values({"loss": 1.0}, Progress(step=3)) == {"mlm_probability": 0.28, "train_rows_per_step": 24}
    assert rows.log_values({"eval_loss": 1.0}, Progress(step=3)) == {}


def test_the_checkpoint_format_saves_and_restores_optimizer_schedule_and_rngs_without_pickles(tmp_path):
    from mlm_suite.training.checkpoint_format import CheckpointFormat

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=4)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    scheduler.step()
    checkpoint_format = CheckpointFormat()
    assert checkpoint_format.save_optimizer(str(tmp_path), optimizer, scheduler, plain=True, should_save=True)
    assert not checkpoint_format.save_optimizer(str(tmp_path / "x"), optimizer, scheduler, plain=False, should_save=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["optimizer.json", "optimizer.safetensors",
                                                                  "scheduler.json"]
    fresh = torch.optim.AdamW(model.parameters(), lr=0.1)
    fresh_schedule = torch.optim.lr_scheduler.LinearLR(fresh, total_iters=4)
    assert checkpoint_format.load_optimizer(str(tmp_path), fresh, fresh_schedule)
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert fresh_schedule.state_dict() == scheduler.state_dict()
    assert not checkpoint_format.load_optimizer(str(tmp_path / "none"), fresh, fresh_schedule)  # the stock loader's

    args = run_args()
    assert checkpoint_format.save_rng(str(tmp_path), args)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    assert checkpoint_format.load_rng(str(tmp_path), args)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert checkpoint_format.save_scaler(str(tmp_path), None, should_save=True) is False  # no scaler: the stock code
    assert not any(path.suffix in (".bin", ".pt", ".pth") for path in tmp_path.iterdir())


def test_sentence_scoring_reads_the_windows_and_hands_the_trainer_the_rows_without_them():
    from datasets import Dataset

    from mlm_suite.evaluation.tagging_metrics import WINDOW_COLUMNS, SentenceScoring

    seen = []
    scoring = SentenceScoring(lambda eval_pred, windows: seen.append(windows) or {"n_sentences": 1})
    rows = Dataset.from_dict({"input_ids": [[1, 2]], "example_id": [0], "word_ids": [[None, 0]]})
    with scoring.evaluating(rows) as given:
        assert not set(WINDOW_COLUMNS) & set(given.column_names)
        assert scoring.compute_metrics(None) == {"n_sentences": 1}
    assert seen[0] is not None
    scoring.compute_metrics(None)
    assert seen[1] is None  # outside an evaluation no split's windows are kept
