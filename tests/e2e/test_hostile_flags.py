"""Hostile flags and inputs for every command: one line, exit status 2, nothing written (docs/command_line.md)."""

from __future__ import annotations

from hostile import assert_refused, folder_files, run_command


def test_max_steps_zero_is_refused_before_the_folder_exists(tmp_path, data_files, tiny_model, capsys):
    output_dir = tmp_path / "out"
    outcome = run_command(["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"],
                           "--max_steps", "0", "--output_dir", output_dir], capsys)
    assert_refused(outcome, "finetune-cls", "--max_steps")
    assert folder_files(output_dir) == [] and not output_dir.exists()
