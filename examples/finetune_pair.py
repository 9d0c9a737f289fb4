"""Thin wrapper around :mod:`mlm_suite.jobs.finetune_pair` (see its docstring for the flags).

    python examples/finetune_pair.py --help
    accelerate launch examples/finetune_pair.py [flags]
"""

from mlm_suite.jobs.common.running import run_job
from mlm_suite.jobs.finetune_pair import main

raise SystemExit(run_job(main))
