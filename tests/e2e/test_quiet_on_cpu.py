"""A CPU run prints no warning the user cannot act on: the loader flags that serve an accelerator (pinned memory)
are set per device, so torch's "'pin_memory' argument is set as true but no accelerator is found" never appears."""

from __future__ import annotations

import warnings

from mlm_suite.jobs import pretrain
from tests.helpers import TINY_MODEL, make_documents, write_text


def test_pretraining_on_cpu_warns_nothing_about_pinned_memory(tmp_path):
    corpus = write_text(tmp_path / "train.txt", make_documents(20, seed=2))
    argv = [
        "--output_dir", str(tmp_path / "out"), "--train_file", str(corpus), "--validation_split_percentage", "20",
        "--config_overrides", TINY_MODEL, "--max_seq_length", "32", "--max_steps", "2", "--eval_steps", "2",
        "--max_eval_samples", "4", "--fill_mask_probes", "0", "--train_tokenizer", "false", "--report_to", "none", "--use_cpu", "true",
    ]  # fmt: skip  (no --dataloader_pin_memory: the job's default is what is checked)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert pretrain.main(argv) == 0
    assert not [str(warning.message) for warning in caught if "pin_memory" in str(warning.message)]
    assert (tmp_path / "out" / "model.safetensors").is_file()
