"""The job runs of ``test_distributed.py`` that must succeed on 2 processes, in one ``accelerate launch``.

Starting the 2 processes costs about as much CPU as a tiny job (each imports torch and transformers), so the runs
share one launch: ``two_process_jobs.py PLAN ENDED`` runs each job of the JSON file ``PLAN`` in turn, as
``accelerate launch <job script>`` would, with a barrier between jobs. The process group is the one the first job's
Trainer joined: a job's ``main`` leaves it for the next, only ``run_job`` ends it.

Each entry of the plan is ``{"job": <module of mlm_suite.jobs>, "argv": [...], "record": <folder> or null}``. With a
``record`` folder, each process appends every training row its masking collator sees, with its pass, to
``<folder>/rank<r>.jsonl``.

The whole run is itself a job under ``run_job``: after the last job the main process alone works on for 2 s (as it
saves the model and writes the card at the end of a job), then every process writes ``ENDED/process_<rank>.json``
once ``run_job`` returned, for the test to check that none left the group before the last one finished.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

import torch.distributed as dist

from mlm_suite.data.pretraining.masking import DataCollatorForMaskedLM
from mlm_suite.data.pretraining.rows import EVAL_SEED
from mlm_suite.jobs.common.running import run_job

record_folder: str | None = None  # the running job's ``record`` folder
collate = DataCollatorForMaskedLM.__call__


def recording(self, features):
    if record_folder is not None and self.seed != EVAL_SEED:  # training batches only
        with open(f"{record_folder}/rank{dist.get_rank()}.jsonl", "a") as out:
            for feature in features:
                out.write(json.dumps([feature["epoch"], feature["input_ids"]]) + "\n")
    return collate(self, features)


def run_every_job(argv: list[str]) -> int:
    global record_folder
    plan_file, ended = map(Path, argv)
    for entry in json.loads(plan_file.read_text()):
        record_folder = entry["record"]
        importlib.import_module(f"mlm_suite.jobs.{entry['job']}").main(entry["argv"])
        dist.barrier()
    if dist.get_rank() == 0:
        time.sleep(2)
        (ended / "main_finished").write_text(str(time.time()))
    return dist.get_rank()


if __name__ == "__main__":
    DataCollatorForMaskedLM.__call__ = recording
    plan, ended = sys.argv[1:3]  # accelerate launch passes the test's --use_cpu true too: each job has its own
    rank = run_job(run_every_job, [plan, ended])
    left = {"left": time.time(), "in_group": dist.is_initialized()}
    (Path(ended) / f"process_{rank}.json").write_text(json.dumps(left))
