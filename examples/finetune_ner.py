"""Thin wrapper around :mod:`mlm_suite.jobs.finetune_ner` (see its docstring for the flags).

    python examples/finetune_ner.py --help
    accelerate launch examples/finetune_ner.py [flags]
"""

from mlm_suite.jobs.common.running import run_job
from mlm_suite.jobs.finetune_ner import main

raise SystemExit(run_job(main))
