"""Thin wrapper around :mod:`mlm_suite.jobs.finetune_retrieval` (see its docstring for the flags).

    python examples/finetune_retrieval.py --help
    accelerate launch examples/finetune_retrieval.py [flags]
"""

from mlm_suite.jobs.common.running import run_job
from mlm_suite.jobs.finetune_retrieval import main

raise SystemExit(run_job(main))
