"""Thin wrapper: the logic lives in ``mlm_suite.jobs.wsd`` (also ``mlm-suite wsd``)."""

from mlm_suite.jobs.common.running import run_job
from mlm_suite.jobs.wsd import main

if __name__ == "__main__":
    run_job(main)
