"""Corpora larger than memory: ``mlm-suite prepare-data`` / ``pretrain --prepared_data`` and ``pretrain --streaming``.

Single-process tests (the multi-process ones are in ``tests/e2e/test_distributed.py``): prepared rows equal the rows
the job builds in memory; the readers, the split across processes and the endless per-process stream; a resumed
run (stream or prepared rows) continues exactly where the interrupted run stopped; bad input is refused in one
line before anything is written.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from datasets import Dataset
from torch.utils.data import DataLoader

from mlm_suite import cli
from mlm_suite.data.pretraining import DataCollatorForMaskedLM
from mlm_suite.data.pretraining.documents import document_stream, iter_documents
from mlm_suite.data.pretraining.prepared import load_prepared, tokenizer_fingerprint
from mlm_suite.data.pretraining.streaming import ProcessStream, split_for_processes, stream_rows
from mlm_suite.data.pretraining.rows import EVAL_SEED, most_frequent_row_token, pretraining_rows_function
from mlm_suite.jobs.pretrain import main, open_corpus, plan_run
from mlm_suite.jobs.common.output_folder import output_folders_released
from mlm_suite.training import pretraining
from mlm_suite.data.pretraining.vocabulary import train_wordpiece_tokenizer
from mlm_suite.training.stream_position import StreamPosition
from mlm_suite.training.trainer import JobTrainer, standard_features
from tests.helpers import (
    TINY_MODEL,
    job_args,
    make_documents,
    make_tiny_config,
    max_difference,
    read_json,
    weights,
    write_text,
)

MAX_LENGTH = 32
WITH_DROPOUT = TINY_MODEL.replace("hidden_dropout_prob=0", "hidden_dropout_prob=0.1")


def long_and_short_documents(count: int, seed: int) -> list[str]:
    """Short documents, and every seventh one long enough to make several rows of 32 tokens."""
    documents = make_documents(count, seed=seed)
    return [document * 4 if index % 7 == 0 else document for index, document in enumerate(documents)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("large_corpora")
    return {
        "train": write_text(folder / "train.txt", long_and_short_documents(30, seed=11)),
        "validation": write_text(folder / "validation.txt", make_documents(6, seed=12)),
    }


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """``mlm-suite <argv>`` in this process: (exit status, stderr)."""
    capsys.readouterr()
    try:
        status = cli.main(argv)
    except SystemExit as exit_:
        status = exit_.code
    return status, capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------
def test_documents_are_read_line_by_line_as_the_blank_line_split_reads_them(tmp_path):
    content = "First doc\nline two  \n\n \t \nsecond\n\n\n\nthird  \n  with indent\n   \n"
    path = tmp_path / "docs.txt"
    path.write_text(content, encoding="utf-8")
    reference = [block.strip() for block in re.split(r"\n\s*\n", content) if block.strip()]
    assert list(iter_documents(path)) == reference == ["First doc\nline two", "second", "third  \n  with indent"]


def test_json_lines_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "one"}\n\n{"text": "  "}\n{"body": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"docs.jsonl line 4 has no string field 'text'"):
        list(iter_documents(path))
    path.write_text('{"text": "one"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"docs.jsonl line 2: not valid JSON"):
        list(iter_documents(path))


# --------------------------------------------------------------------------------------------
# Prepared rows
# --------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.parametrize("packing", [False, True])
@pytest.mark.slow  # over 10 s on 2 cores
def test_prepared_shards_hold_the_rows_the_job_builds_in_memory(tmp_path, tokenizer, minilm_dir, packing, capsys):
    """prepare-data on 2 processes into 3 shards, read back memory-mapped, equals the in-memory rows value for value.

    2,400 documents: the 5 % held out and the packing groups of 1,000 documents cross the boundary between
    the two processes' halves, so packing must not depend on ``--num_proc``.
    """
    train = write_text(tmp_path / "train.txt", long_and_short_documents(2400, seed=21))
    output = tmp_path / "prepared"
    argv = ["prepare-data", "--train_file", str(train), "--tokenizer_name", str(minilm_dir), "--output_dir", str(output)]
    argv += ["--max_seq_length", str(MAX_LENGTH), "--preprocessing_num_workers", "2", "--num_shards", "3"]
    argv += ["--packing"] if packing else []
    status, err = run_cli(argv, capsys)
    assert status == 0, err
    prepared = load_prepared(output)
    assert len(list((output / "train").glob("*.arrow"))) == 3

    corpus = open_corpus(plan_run(["--train_file", str(train), "--max_seq_length", str(MAX_LENGTH), "--output_dir", "x"]
                                  + (["--packing"] if packing else [])))
    in_memory = corpus.train_rows(tokenizer, 0)
    assert prepared.train.column_names == in_memory.column_names
    assert prepared.train.num_rows == in_memory.num_rows > 2000
    for column in in_memory.column_names:
        assert prepared.train[column] == in_memory[column], column
    assert prepared.validation["text"] == corpus.validation["text"]
    metadata = prepared.metadata
    assert metadata["train_tokens"] == sum(map(len, in_memory["input_ids"]))
    assert metadata["baseline_token_id"] == most_frequent_row_token(in_memory, tokenizer)
    assert metadata["tokenizer"]["fingerprint"] == tokenizer_fingerprint(tokenizer)


def test_tokenizer_fingerprint_ignores_truncation_state_but_not_the_vocabulary(tokenizer):
    before = tokenizer_fingerprint(tokenizer)
    tokenizer(["a long sentence " * 20], truncation=True, max_length=8)  # leaves truncation set on the backend
    assert tokenizer_fingerprint(tokenizer) == before
    other = train_wordpiece_tokenizer(make_documents(50), vocab_size=200)
    assert tokenizer_fingerprint(other) != before


@pytest.fixture(scope="module")
def prepared_folder(tmp_path_factory, corpus, minilm_dir) -> Path:
    output = tmp_path_factory.mktemp("prepared") / "data"
    argv = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"])]
    argv += ["--tokenizer_name", str(minilm_dir), "--output_dir", str(output), "--max_seq_length", str(MAX_LENGTH)]
    from mlm_suite.jobs.prepare_data import main as prepare_main

    assert prepare_main(argv) == 0
    return output


@pytest.fixture(scope="module")
def packed_folder_without_word_ids(tmp_path_factory, corpus, minilm_dir) -> Path:
    """A packed prepared folder as mlm-suite wrote them before packed rows carried word ids."""
    output = tmp_path_factory.mktemp("packed_without_word_ids") / "data"
    argv = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"]), "--packing"]
    argv += ["--tokenizer_name", str(minilm_dir), "--output_dir", str(output), "--max_seq_length", str(MAX_LENGTH)]
    from mlm_suite.jobs.prepare_data import main as prepare_main

    assert prepare_main(argv) == 0
    Dataset.load_from_disk(str(output / "train")).remove_columns("word_ids").save_to_disk(str(output / "old_train"))
    shutil.rmtree(output / "train")
    (output / "old_train").rename(output / "train")
    return output


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("other_tokenizer")
    train_wordpiece_tokenizer(make_documents(50), vocab_size=300).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--streaming", "--train_file", "{train}", "--train_tokenizer", "false"], ["--streaming needs --max_steps N"]),
        (["--streaming", "--train_file", "{train}", "--max_steps", "3"], ["--streaming", "needs a fixed tokenizer"]),
        (
            ["--streaming", "--train_file", "{train}", "--max_steps", "3", "--train_tokenizer", "false", "--objective", "mlm_nsp"],
            ["--streaming trains --objective mlm only"],
        ),
        (["--prepared_data", "{prepared}", "--tokenizer_name", "{other}"], ["was tokenised with", "--tokenizer_name", "differs"]),
        (["--prepared_data", "{prepared}", "--max_seq_length", "48"], ["--max_seq_length 48 differs", "32"]),
        (["--prepared_data", "{prepared}", "--streaming", "--max_steps", "2"], ["give --prepared_data or --streaming"]),
        (["--prepared_data", "{train}"], ["not a folder written by mlm-suite prepare-data"]),
        (["--prepared_data", "{old_packed}", "--masking", "span"], ["without word ids", "--masking span", "prepare the data again"]),
    ],
)
def test_bad_input_is_one_line_exit_2_before_anything_is_written(
    flags, fragments, tmp_path, corpus, prepared_folder, packed_folder_without_word_ids, other_tokenizer, capsys
):
    paths = {"train": corpus["train"], "prepared": prepared_folder, "other": other_tokenizer}
    paths["old_packed"] = packed_folder_without_word_ids
    output_dir = tmp_path / "out"
    status, err = run_cli(["pretrain", *[flag.format(**paths) for flag in flags], "--output_dir", str(output_dir)], capsys)
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("mlm-suite pretrain: error: "), err
    for fragment in fragments:
        assert fragment in err
    assert not output_dir.exists()


def test_prepare_data_refuses_a_folder_in_use_and_missing_files(tmp_path, corpus, minilm_dir, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    base = ["prepare-data", "--tokenizer_name", str(minilm_dir)]
    status, err = run_cli([*base, "--train_file", str(corpus["train"]), "--output_dir", str(used)], capsys)
    assert status == 2 and f"--output_dir {used} already holds an earlier run's files (keep.txt)" in err
    assert [path.name for path in used.iterdir()] == ["keep.txt"]
    status, err = run_cli([*base, "--train_file", str(tmp_path / "none.txt"), "--output_dir", str(tmp_path / "o")], capsys)
    assert status == 2 and "none.txt: no such file" in err and not (tmp_path / "o").exists()
    assert not list(tmp_path.glob(".*partial*"))


# --------------------------------------------------------------------------------------------
# Streams: split across processes, endless per process, resumable
# --------------------------------------------------------------------------------------------
def test_split_across_processes_is_disjoint_and_complete(tmp_path):
    files = [write_text(tmp_path / f"part{index}.txt", make_documents(5, seed=index)) for index in range(4)]

    def parts(paths, world_size):
        stream = document_stream(paths)
        return [[(row["shard"], row["document"]) for row in split_for_processes(stream, rank, world_size)] for rank in range(world_size)]

    everything = {(shard, document) for shard in range(4) for document in range(5)}
    by_shard = parts(files, 2)  # 4 files, 2 processes: 2 whole files each
    assert {shard for shard, _ in by_shard[0]}.isdisjoint({shard for shard, _ in by_shard[1]})
    by_example = parts(files[:1], 2)  # 1 file, 2 processes: every other document each
    assert [document for _, document in by_example[0]] == [0, 2, 4] and [document for _, document in by_example[1]] == [1, 3]
    for split, expected in ((by_shard, everything), (by_example, {(0, document) for document in range(5)})):
        assert len(split[0]) + len(split[1]) == len(expected) and set(split[0]) | set(split[1]) == expected
    with pytest.raises(ValueError, match="3 shards \\(files\\) cannot be split evenly across 2 processes"):
        split_for_processes(document_stream(files[:3]), 0, 2)


def test_held_out_documents_are_left_out_of_the_stream(tmp_path):
    path = write_text(tmp_path / "docs.txt", make_documents(6, seed=3))
    texts = [row["text"] for row in document_stream([path], held_out=2)]
    assert texts == list(iter_documents(path))[2:]


def test_process_stream_repeats_its_part_with_the_pass_and_resumes_from_its_json_state(tmp_path, tokenizer):
    """Every pass holds each row of the part exactly once, tagged with the pass; a position saved as JSON mid-pass
    (by torchdata's StatefulDataLoader) resumes with the very next batch, across the end of the pass."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    path = write_text(tmp_path / "docs.txt", long_and_short_documents(9, seed=5))
    rows = pretraining_rows_function(tokenizer, MAX_LENGTH)
    one_pass = [tuple(row["input_ids"]) for row in stream_rows(document_stream([path]), rows)]

    def loader() -> StatefulDataLoader:
        return StatefulDataLoader(ProcessStream(stream_rows(document_stream([path]), rows)), batch_size=3, collate_fn=list)

    full = loader()
    batches = iter(full)
    seen = []
    while len(seen) < 2 * len(one_pass) + 3:
        seen += next(batches)
        if len(seen) == 9:
            state = json.loads(json.dumps(full.state_dict()))  # plain JSON data
            expected = [next(batches) for _ in range(6)]  # crosses into the second pass
            seen += [row for batch in expected for row in batch]
    for epoch in (0, 1):
        assert [tuple(row["input_ids"]) for row in seen if row["epoch"] == epoch] == one_pass
    assert len({row["example_index"] for row in seen if row["epoch"] == 0}) == len(one_pass) > 9

    resumed = loader()
    resumed.load_state_dict(state)
    again = iter(resumed)
    assert [next(again) for _ in range(6)] == expected


def test_the_example_pass_replaces_the_collators_epoch(tokenizer):
    collator = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.3, seed=7)
    feature = {"input_ids": tokenizer("the movie was good and the actors were great too")["input_ids"], "example_index": 3}
    masks = {epoch: collator([{**feature, "epoch": epoch}])["labels"] for epoch in (0, 1)}
    assert not masks[0].equal(masks[1])
    collator.set_epoch(1)
    assert collator([feature])["labels"].equal(masks[1])
    assert collator([{**feature, "epoch": 0}])["labels"].equal(masks[0])


def test_a_stream_is_refused_with_rank_0_dispatch_or_batch_skipping(tmp_path, tokenizer):
    """A ProcessStream is each process's own part and restores its own position: accelerate's dispatch from rank 0
    and the Trainer's skipping of batches on resume would both be wrong, and are refused."""
    from transformers import TrainingArguments

    from mlm_suite import MlmSuiteForMaskedLM

    stream = ProcessStream(stream_rows(document_stream([write_text(tmp_path / "d.txt", ["one doc"])]), pretraining_rows_function(tokenizer, 16)))
    model = MlmSuiteForMaskedLM(make_tiny_config())
    for dispatch_batches, ignore_data_skip in ((True, True), (False, False)):
        args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, report_to="none", use_cpu=True,
                                 accelerator_config={"dispatch_batches": dispatch_batches}, ignore_data_skip=ignore_data_skip)  # fmt: skip
        with pytest.raises(ValueError, match='accelerator_config {"dispatch_batches": false} and ignore_data_skip=True'):
            JobTrainer(model=model, args=args, train_dataset=stream, features=(*standard_features(), StreamPosition()))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, report_to="none", use_cpu=True,
                             accelerator_config={"dispatch_batches": False}, ignore_data_skip=True)  # fmt: skip
    trainer = JobTrainer(model=model, args=args, train_dataset=stream, data_collator=list,
                         features=(*standard_features(), StreamPosition()))
    loader = trainer.get_train_dataloader()
    assert type(loader.base_dataloader).__name__ == "StatefulDataLoader" and loader.state_dict()["_num_yielded"] == 0
    assert [row["input_ids"] for row in next(iter(loader))] == [tokenizer("one doc")["input_ids"]] * 8


# --------------------------------------------------------------------------------------------
# Resuming mid-epoch
# --------------------------------------------------------------------------------------------
class RecordingCollator(DataCollatorForMaskedLM):
    """The training collator, noting the (pass, example) of every row it masks; evaluation (its own seed) is not noted."""

    batches: list[list[tuple[int, int]]] = []

    def __call__(self, features):
        if self.seed != EVAL_SEED:
            RecordingCollator.batches.append([(int(f.get("epoch", self.epoch)), int(f["example_index"])) for f in features])
        return super().__call__(features)


def record_run(monkeypatch, argv: list[str]) -> list[list[tuple[int, int]]]:
    """Run the job in this process; the batches its training collator masked (one more than trained: accelerate
    reads a batch ahead)."""
    RecordingCollator.batches = []
    monkeypatch.setattr(pretraining, "DataCollatorForMaskedLM", RecordingCollator)  # the training collator's class
    assert main(argv) == 0
    return RecordingCollator.batches


def losses(run: Path) -> dict[int, float]:
    return {entry["step"]: entry["loss"] for entry in read_json(run / "trainer_state.json")["log_history"] if "loss" in entry}


@pytest.mark.parametrize("data", ["streaming", "prepared"])
def test_resume_mid_epoch_continues_exactly_where_the_run_stopped(tmp_path, corpus, prepared_folder, monkeypatch, data):
    """Stopped at step 5 (mid-epoch: an epoch is 10 batches of 4 rows), resumed to step 13: the resumed run trains
    on the batches the uninterrupted run trained on from step 6, across the end of the epoch (same rows, same
    pass, so same masks; same dropout draws), with the same losses to 1e-5 and the same weights."""
    stream = ["--streaming", "--train_file", str(corpus["train"]), "--train_tokenizer", "false"]
    stream += ["--validation_file", str(corpus["validation"]), "--max_seq_length", str(MAX_LENGTH)]
    source = stream if data == "streaming" else ["--prepared_data", str(prepared_folder)]  # the same documents
    common = [*source, "--max_steps", "13", "--eval_strategy", "no", "--max_eval_samples", "4", "--fill_mask_probes", "0"]
    common += ["--config_overrides", WITH_DROPOUT]  # the resumed run must draw the same dropout masks too
    full = tmp_path / "full"
    trained = record_run(monkeypatch, job_args(full, *common, "--save_strategy", "steps", "--save_steps", "5"))
    checkpoint = full / "checkpoint-5"
    resumed = tmp_path / "resumed"
    again = record_run(monkeypatch, job_args(resumed, *common, "--resume_from_checkpoint", str(checkpoint)))

    assert len(trained) == 14 and trained[5:] == again  # 13 trained + the one read ahead
    rows = [row for batch in trained[:10] for row in batch]
    assert len(set(rows)) == 40 and {epoch for epoch, _ in rows} == {0}  # the first epoch: 40 distinct rows
    if data == "streaming":
        assert {epoch for epoch, _ in trained[10][:1]} == {1}  # the stream's own pass count moved on
        assert json.loads((checkpoint / "data_state.json").read_text())["dataset_state"]["epoch"] == 0
    assert not [path.name for path in checkpoint.iterdir() if path.suffix in (".bin", ".pt", ".pth", ".pkl")]
    full_losses, resumed_losses = losses(full), losses(resumed)
    assert sorted(resumed_losses) == list(range(1, 14))  # steps 1-5 come with the checkpoint's state
    assert [resumed_losses[step] for step in range(6, 14)] == pytest.approx([full_losses[step] for step in range(6, 14)], rel=1e-5)
    assert max_difference(weights(full), weights(resumed)) < 1e-6
    states = [read_json(run / "trainer_state.json") for run in (full, resumed)]
    assert states[0]["global_step"] == states[1]["global_step"] == 13 and states[1]["epoch"] == pytest.approx(states[0]["epoch"])


def test_training_on_prepared_rows_is_training_on_the_in_memory_rows(tmp_path, corpus, minilm_dir):
    """Packed rows with whole-word masking (the tokenizer's word ids stored with the rows): the same losses and
    weights as the in-memory job on the same documents."""
    prepared = tmp_path / "packed"
    from mlm_suite.jobs.prepare_data import main as prepare_main

    documents = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"])]
    assert prepare_main([*documents, "--tokenizer_name", str(minilm_dir), "--output_dir", str(prepared), "--packing",
                         "--max_seq_length", str(MAX_LENGTH)]) == 0  # fmt: skip
    common = ["--masking", "whole_word", "--max_steps", "3", "--eval_strategy", "no", "--fill_mask_probes", "0"]
    in_memory, from_disk = tmp_path / "in_memory", tmp_path / "prepared_run"
    assert main(job_args(in_memory, *documents, *common, "--packing", "--train_tokenizer", "false",
                         "--max_seq_length", str(MAX_LENGTH))) == 0  # fmt: skip
    assert main(job_args(from_disk, "--prepared_data", str(prepared), *common)) == 0
    assert losses(from_disk) == losses(in_memory) and len(losses(in_memory)) == 3
    assert max_difference(weights(in_memory), weights(from_disk)) == 0.0
    cards = [(run / "README.md").read_text().splitlines() for run in (in_memory, from_disk)]
    for row in ("| training documents |", "| training rows |"):
        assert [line for line in cards[0] if line.startswith(row)] == [line for line in cards[1] if line.startswith(row)]


@pytest.mark.multiprocess
def test_dataloader_workers_read_every_shard_of_a_loaded_dataset(tmp_path):
    """A streamed ``load_dataset`` folder read by 2 dataloader workers: every document of both files, once."""
    from datasets import load_dataset

    from mlm_suite.data.pretraining.documents import hub_document_stream

    for index in range(2):
        lines = "".join(json.dumps({"text": f"file {index} document {position}"}) + "\n" for position in range(7))
        (tmp_path / f"train-{index}.jsonl").write_text(lines)
    stream = hub_document_stream(load_dataset(str(tmp_path), streaming=True)["train"])
    read = [(record["shard"], record["document"], record["text"]) for record in DataLoader(stream, batch_size=None, num_workers=2)]
    assert sorted(read) == [(shard, position, f"file {shard} document {position}") for shard in range(2) for position in range(7)]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_resume_with_dataloader_workers_reading_a_shard_each(tmp_path, corpus, monkeypatch):
    """2 dataloader workers on a 2-file dataset (a shard each): the resumed run repeats the uninterrupted one.
    More workers than shards is refused (a worker left without shards could not be restored reliably)."""
    folder = tmp_path / "dataset"
    folder.mkdir()
    for index in range(2):
        documents = long_and_short_documents(15, seed=60 + index)
        (folder / f"train-{index}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
    common = ["--streaming", "--dataset_name", str(folder), "--validation_file", str(corpus["validation"])]
    common += ["--train_tokenizer", "false", "--max_seq_length", str(MAX_LENGTH), "--max_steps", "9", "--eval_strategy", "no"]
    common += ["--max_eval_samples", "4", "--fill_mask_probes", "0", "--dataloader_num_workers", "2"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert main(job_args(full, *common, "--save_strategy", "steps", "--save_steps", "4")) == 0
    assert main(job_args(resumed, *common, "--resume_from_checkpoint", str(full / "checkpoint-4"))) == 0
    assert [losses(resumed)[step] for step in range(5, 10)] == pytest.approx([losses(full)[step] for step in range(5, 10)], rel=1e-5)
    assert max_difference(weights(full), weights(resumed)) < 1e-6
    with pytest.raises(ValueError, match="--dataloader_num_workers 2 exceeds the 1 shard\\(s\\) each process reads"), \
            output_folders_released():  # as run_job releases it
        main(job_args(tmp_path / "refused", "--streaming", "--train_file", str(corpus["train"]), *common[3:]))
    assert not (tmp_path / "refused").exists()
