"""MLM (+NSP) pretraining with the Hugging Face Trainer; see ``mlm_suite/jobs/pretrain.py`` for the options.

    python examples/pretrain_mlm.py --output_dir outputs/pretrain       # embedded default data
    python examples/pretrain_mlm.py --help
"""

from mlm_suite.jobs.common.running import run_job
from mlm_suite.jobs.pretrain import main

raise SystemExit(run_job(main))
