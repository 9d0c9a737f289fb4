"""Token-budget batches (``mlm-suite pretrain --max_tokens_per_batch N``): whole rows packed into micro-batches of at
most N tokens, flattened and padded to exactly N; the sampler's epochs, processes and resume; the loss over the
padding; the number of graphs ``torch.compile`` makes over an epoch; the flag's refusals.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import torch._dynamo

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM, cli
from mlm_suite.data.pretraining.masking import DataCollatorForMaskedLM
from mlm_suite.data.pretraining.schedules import ScheduledBatchSampler, permutation
from mlm_suite.data.pretraining.token_budget import row_lengths, token_budget_batches
from mlm_suite.jobs import pretrain
from tests.helpers import TINY_MODEL, job_args, make_documents, max_difference, read_json, weights, write_text

BUDGET = 96
# Graphs torch.compile makes over an epoch of token-budget batches: the first, then one with the number of sequences
# and of masked positions symbolic (automatic dynamic shapes); the (1, N) token dimension never changes.
MAX_GRAPHS = 3


def random_lengths(count: int, seed: int, longest: int = 32) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(3, longest) for _ in range(count)]


# ------------------------------------------------------------------------------------------------
# Packing and the sampler
# ------------------------------------------------------------------------------------------------
def test_packing_puts_every_row_once_in_batches_within_the_budget():
    lengths = random_lengths(200, seed=0)
    counts = set()
    for epoch in range(3):
        batches = token_budget_batches(lengths, permutation(len(lengths), 7, epoch), BUDGET)
        assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
        assert all(sum(lengths[index] for index in batch) <= BUDGET for batch in batches)
        counts.add(len(batches))
    assert counts == {len(batches)}  # the same number of batches every epoch, whatever the order
    assert len(batches) <= -(-sum(lengths) // BUDGET) + 1  # hardly any room left unused
    with pytest.raises(ValueError, match="more than the budget of 16"):
        token_budget_batches([8, 17], [0, 1], 16)


def test_sampler_epochs_are_seeded_shuffles_of_all_rows_and_processes_share_them_evenly():
    lengths = random_lengths(101, seed=1)

    def sampler(process: int = 0, processes: int = 1, seed: int = 5) -> ScheduledBatchSampler:
        return ScheduledBatchSampler(
            len(lengths), 4, num_processes=processes, process_index=process, seed=seed, max_tokens=BUDGET, lengths=lengths
        )

    one = sampler()
    epochs = []
    for epoch in range(2):
        one.set_epoch(epoch)
        batches = [[tag[0] for tag in batch] for batch in one]
        assert len(batches) == len(one)
        assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
        assert {tag[1] for batch in one for tag in batch} == {epoch}  # each row carries its data epoch
        epochs.append(batches)
    assert epochs[0] != epochs[1]
    again = sampler()
    again.set_epoch(1)
    assert [[tag[0] for tag in batch] for batch in again] == epochs[1]  # a resumed run draws the same batches

    shares = [list(sampler(process, 3)) for process in range(3)]
    assert len({len(share) for share in shares}) == 1 and len(shares[0]) == -(-len(one) // 3)
    dealt = {tag[0] for share in shares for batch in share for tag in batch}
    assert dealt == set(range(len(lengths)))


def test_row_lengths_reads_the_arrow_column_and_plain_rows():
    from datasets import Dataset

    rows = Dataset.from_dict({"input_ids": [[1, 2, 3], [4], [5, 6]]}).select([2, 0])
    assert row_lengths(rows) == [2, 3]
    assert row_lengths([{"input_ids": [1, 2]}, {"input_ids": [3]}]) == [2, 1]


# ------------------------------------------------------------------------------------------------
# The collator's padded batches
# ------------------------------------------------------------------------------------------------
def test_padded_batches_have_exactly_the_budget_and_the_same_loss(tokenizer):
    texts = ["the film was a delight from start to end", "dull", "a quiet story about a city and a family"]
    features = [{"input_ids": ids, "example_index": index} for index, ids in enumerate(tokenizer(texts)["input_ids"])]
    common = dict(mlm_probability=0.4, seed=3, flatten=True, pad_to_multiple_of=16)
    padded = DataCollatorForMaskedLM(tokenizer, pad_to_tokens=BUDGET, **common)(features)
    flat = DataCollatorForMaskedLM(tokenizer, **common)(features)
    real = flat["input_ids"].shape[1]
    assert padded["input_ids"].shape == padded["labels"].shape == padded["position_ids"].shape == (1, BUDGET)
    assert padded["max_length_q"] == 16 and int(padded["cu_seq_lens_q"][-1]) == BUDGET
    assert (padded["cu_seq_lens_q"].diff() <= padded["max_length_q"]).all()  # the bound holds for the padding too
    assert (padded["input_ids"][0, real:] == tokenizer.pad_token_id).all()
    assert (padded["labels"][0, real:] == -100).all()  # padding is never labelled
    for key in ("input_ids", "labels", "position_ids"):
        assert torch.equal(padded[key][:, :real], flat[key])
    assert torch.equal(padded["masked_lm_positions"], flat["masked_lm_positions"])

    config = MlmSuiteConfig.preset("tiny", vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = MlmSuiteForMaskedLM(config).eval()
    with torch.no_grad():
        losses = [model(**batch).loss for batch in (padded, flat)]
    torch.testing.assert_close(losses[0], losses[1])


# ------------------------------------------------------------------------------------------------
# The pretraining job
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_text(tmp_path_factory.mktemp("budget_corpus") / "train.txt", make_documents(60, sentences=2, seed=1))


def budget_run(output_dir: Path, corpus: Path, *extra: str) -> Path:
    common = ["--train_file", str(corpus), "--validation_split_percentage", "20", "--train_tokenizer", "false"]
    common += ["--max_eval_samples", "4", "--eval_strategy", "no", "--fill_mask_probes", "0"]
    assert pretrain.main(job_args(output_dir, *common, *extra)) == 0
    return output_dir


@pytest.mark.compile
@pytest.mark.slow  # over 10 s on 2 cores
def test_compiled_token_budget_epoch_makes_a_handful_of_graphs(tmp_path, corpus, monkeypatch):
    graphs = {}
    train = pretrain.JobTrainer.train

    def counted_train(self, *args, **kwargs):  # the graphs of training alone, not of the final evaluation
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        result = train(self, *args, **kwargs)
        graphs["training"] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        return result

    monkeypatch.setattr(pretrain.JobTrainer, "train", counted_train)
    output = budget_run(tmp_path / "budget", corpus, "--max_tokens_per_batch", str(BUDGET), "--max_steps", "-1",
                        "--num_train_epochs", "1", "--torch_compile", "--torch_compile_backend", "eager")  # fmt: skip
    steps = read_json(output / "trainer_state.json")["global_step"]
    assert steps >= 8  # enough batches of different make-up for a recompilation to show
    assert 1 <= graphs["training"] <= MAX_GRAPHS
    card = (output / "README.md").read_text(encoding="utf-8")
    assert f"1 x {BUDGET} tokens (token budget)" in card


def test_token_budget_run_resumes_to_the_uninterrupted_weights(tmp_path, corpus):
    common = ["--max_tokens_per_batch", str(BUDGET), "--max_steps", "12"]  # past the end of the first epoch
    full = budget_run(tmp_path / "full", corpus, *common, "--save_strategy", "steps", "--save_steps", "5")
    resumed = budget_run(tmp_path / "resumed", corpus, *common, "--resume_from_checkpoint", str(full / "checkpoint-5"))
    losses = [{entry["step"]: entry["loss"] for entry in read_json(run / "trainer_state.json")["log_history"]
               if "loss" in entry} for run in (full, resumed)]  # fmt: skip
    for step in range(6, 13):
        assert losses[1][step] == pytest.approx(losses[0][step], rel=1e-5), step
    assert max_difference(weights(full), weights(resumed)) < 1e-6


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max_tokens_per_batch", "32", "--max_seq_length", "64"], "--max_tokens_per_batch 32 is below --max_seq_length 64"),
        (["--max_tokens_per_batch", "256", "--objective", "mlm_nsp"], "cannot be combined with --objective mlm_nsp"),
        (["--max_tokens_per_batch", "256", "--flatten_batches", "false"], "drop --flatten_batches false"),
        (["--max_tokens_per_batch", "256", "--batch_size_warmup_tokens", "100", "--max_steps", "5"],
         "cannot be combined with --batch_size_warmup_tokens"),
    ],
)
def test_token_budget_refusals_are_one_line(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["pretrain", "--output_dir", str(tmp_path / "out"), *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "out").exists()
