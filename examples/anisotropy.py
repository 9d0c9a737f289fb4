"""Thin wrapper: the logic lives in ``mlm_suite.jobs.anisotropy`` (also ``mlm-suite anisotropy``)."""

from mlm_suite.jobs.common.running import run_job
from mlm_suite.jobs.anisotropy import main

if __name__ == "__main__":
    run_job(main)
