"""Thin wrapper around :mod:`mlm_suite.jobs.finetune_cls` (see its docstring for the flags).

    python examples/finetune_cls.py --help
    accelerate launch examples/finetune_cls.py [flags]
"""

from mlm_suite.jobs.common.running import run_job
from mlm_suite.jobs.finetune_cls import main

raise SystemExit(run_job(main))
