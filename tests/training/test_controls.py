"""Training controls (``mlm_suite.training.controls``) on a real ``Trainer`` with a toy model: the wall-clock
budget (a fake clock, so nothing is timed) and early stopping with the best model restored."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import Trainer, TrainerCallback, TrainingArguments

from mlm_suite.training.controls import (
    StepRateCallback, TimeBudgetCallback, early_stopping_arguments, early_stopping_callback,
)  # fmt: skip
from tests.helpers import AdvanceClock, FakeClock, ToyRegression, toy_data


def budget_run(tmp_path, budget, step_seconds, eval_seconds=0.0, **extra) -> tuple[Trainer, TimeBudgetCallback, AdvanceClock]:
    clock = FakeClock()
    advance = AdvanceClock(clock, step_seconds, eval_seconds)
    budget_callback = TimeBudgetCallback(budget, clock=clock)
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=10_000, per_device_train_batch_size=4, learning_rate=0.1,
        warmup_steps=0.1, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True,
        **{"lr_scheduler_type": "linear", **extra},
    )  # fmt: skip
    data = toy_data()
    trainer = Trainer(model=ToyRegression(), args=args, train_dataset=data, eval_dataset=data[:8],
                      callbacks=[advance, budget_callback])  # fmt: skip
    trainer.train()
    return trainer, budget_callback, advance


def test_budget_stops_training_where_the_linear_schedule_ends(tmp_path):
    trainer, budget, advance = budget_run(tmp_path, budget=100.0, step_seconds=lambda step: 2.0)
    assert trainer.state.global_step == 50 == budget.planned_steps  # 100 s / 2 s per step
    assert budget.training_seconds == pytest.approx(100.0)
    assert budget.warmup_steps == 5  # warmup_steps=0.1 is a fraction of the planned steps
    rates = advance.learning_rates
    assert rates[5] == pytest.approx(0.1)  # peak at the end of warmup
    assert rates[27] == pytest.approx(0.1 * (50 - 27) / 45)  # linear decay
    assert rates[50] == 0.0  # the schedule has ended at the budget
    assert [entry for entry in trainer.state.log_history if "time_budget_planned_steps" in entry][0][
        "time_budget_planned_steps"
    ] == 50


def test_budget_adapts_to_a_change_of_speed_and_excludes_evaluation(tmp_path):
    # 1 s per step for 30 steps, then 3 s per step; an evaluation every 10 steps costs 50 s (not counted).
    trainer, budget, advance = budget_run(
        tmp_path, budget=120.0, step_seconds=lambda step: 1.0 if step <= 30 else 3.0, eval_seconds=50.0,
        eval_strategy="steps", eval_steps=10,
    )  # fmt: skip
    assert trainer.state.global_step == 60  # 30 steps in 30 s, then 90 s / 3 s = 30 steps
    assert budget.training_seconds == pytest.approx(120.0)
    assert advance.learning_rates[60] == 0.0
    assert all(rate >= 0 for rate in advance.learning_rates.values())
    assert sum("eval_loss" in entry for entry in trainer.state.log_history) >= 5


def test_step_rate_leaves_out_warm_up_evaluation_and_saving(tmp_path):
    """Steps take 5 s for the first three (warm-up), then 0.5 s; evaluations (every 4 steps) take 30 s."""
    clock = FakeClock()
    advance = AdvanceClock(clock, lambda step: 5.0 if step <= 3 else 0.5, eval_seconds=30.0)
    rate = StepRateCallback(warmup_steps=3, clock=clock)
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=20, per_device_train_batch_size=4, eval_strategy="steps", eval_steps=4,
        save_strategy="steps", save_steps=5, report_to="none", disable_tqdm=True, use_cpu=True,
    )  # fmt: skip
    data = toy_data()
    Trainer(model=ToyRegression(), args=args, train_dataset=data, eval_dataset=data[:8], callbacks=[advance, rate]).train()
    assert rate.steps_per_second() == pytest.approx(2.0)
    assert 0 < rate.steps < 20 - 3  # warm-up and the intervals after each evaluation and save are not counted
    assert StepRateCallback().steps_per_second() is None  # nothing measured


def test_step_rate_waits_for_a_gpu_where_the_counted_steps_start_and_where_training_stops(monkeypatch):
    """On a GPU the host runs ahead of the device: the rate's window waits for the device at its two ends (and
    nowhere else), so that a short run's rate is the device's."""
    from types import SimpleNamespace

    from transformers import TrainerControl

    waits = []
    monkeypatch.setattr("torch.cuda.synchronize", lambda device=None: waits.append(clock()))
    clock = FakeClock()
    rate = StepRateCallback(warmup_steps=2, clock=clock)
    args, control = SimpleNamespace(device=torch.device("cuda")), TrainerControl()
    rate.on_train_begin(args, None, control)
    for step in range(1, 9):
        clock.now += 1.0
        control.should_training_stop = step == 8
        rate.on_step_end(args, None, control)
    assert waits == [1003.0, 1008.0]  # the end of the 2 warm-up intervals (steps 1-3), and the last step
    assert rate.steps == 5 and rate.steps_per_second() == pytest.approx(1.0)


def test_budget_needs_a_linear_schedule(tmp_path):
    with pytest.raises(ValueError, match="linear"):
        budget_run(tmp_path, budget=10.0, step_seconds=lambda step: 1.0, lr_scheduler_type="cosine")
    with pytest.raises(ValueError, match="positive"):
        TimeBudgetCallback(0)


class ScriptedMetric:
    """``compute_metrics`` returning scripted scores, one per evaluation."""

    def __init__(self, scores: list[float]) -> None:
        self.scores = iter(scores)

    def __call__(self, prediction) -> dict[str, float]:
        return {"accuracy": next(self.scores)}


class LastWeights(TrainerCallback):
    """Keeps a copy of the weights after every step (the Trainer swaps in the best ones at the end)."""

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.weights = {name: value.detach().clone() for name, value in model.state_dict().items()}


def test_early_stopping_stops_and_restores_the_best_model(tmp_path):
    needed = early_stopping_arguments("steps", 2)
    assert needed["load_best_model_at_end"] and needed["save_strategy"] == "steps" and needed["save_steps"] == 2
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=100, per_device_train_batch_size=4, learning_rate=0.05,
        eval_strategy="steps", eval_steps=2, report_to="none", disable_tqdm=True, use_cpu=True,
        metric_for_best_model="accuracy", greater_is_better=True, **needed,
    )  # fmt: skip
    callbacks = early_stopping_callback(args, patience=2, threshold=0.0)
    data, last = toy_data(), LastWeights()
    # Best at the second evaluation (step 4); two evaluations without improvement then stop at step 8.
    trainer = Trainer(model=ToyRegression(), args=args, train_dataset=data, eval_dataset=data[:8],
                      compute_metrics=ScriptedMetric([0.5, 0.7, 0.6, 0.65, 0.9]), callbacks=[*callbacks, last])  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 8
    assert trainer.state.best_metric == 0.7
    best = load_file(tmp_path / "checkpoint-4" / "model.safetensors")
    for name, value in trainer.model.state_dict().items():
        torch.testing.assert_close(value, best[name], rtol=0, atol=0)
    assert not torch.equal(last.weights["linear.weight"], best["linear.weight"])  # the model moved after step 4


def test_early_stopping_arguments_are_checked(tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert early_stopping_callback(args, None, 0.0) == []
    with pytest.raises(ValueError, match="eval_strategy"):
        early_stopping_arguments("no", None)
    with pytest.raises(ValueError, match="at least 1"):
        early_stopping_callback(args, 0, 0.0)
    evaluated = TrainingArguments(output_dir=str(tmp_path), report_to="none", eval_strategy="epoch")
    with pytest.raises(ValueError, match="built with early_stopping_arguments"):
        early_stopping_callback(evaluated, 2, 0.0)
