"""Thin wrapper around :mod:`mlm_suite.jobs.finetune_classification` (see its docstring for the flags).

    python examples/finetune_classification.py --help
    accelerate launch examples/finetune_classification.py [flags]
"""

from mlm_suite.jobs.distributed import run_job
from mlm_suite.jobs.finetune_classification import main

raise SystemExit(run_job(main))
