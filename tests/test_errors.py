"""mlm_suite.errors' staging folders (staging_folder): removed however their block ends, even when SIGTERM (raised
as an exception in the job's main thread) comes just after the folder was made; a folder of the same name that
another process made is never removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlm_suite.jobs.common.running import Terminated
from mlm_suite.errors import staging_folder


def test_the_folder_is_removed_with_its_files_and_what_moved_out_stays(tmp_path):
    with staging_folder(tmp_path, ".out.partial-") as staging:
        assert staging.parent == tmp_path and staging.name.startswith(".out.partial-") and staging.is_dir()
        (staging / "kept").write_text("moved out")
        (staging / "sub").mkdir()
        (staging / "sub" / "dropped").write_text("left inside")
        os.replace(staging / "kept", tmp_path / "kept")
    assert sorted(os.listdir(tmp_path)) == ["kept"]


@pytest.mark.parametrize("interruption", [Terminated, KeyboardInterrupt, OSError])
def test_an_interruption_inside_the_block_removes_the_folder(tmp_path, interruption):
    with pytest.raises(interruption), staging_folder(tmp_path, "x-") as staging:
        (staging / "half").write_text("half-written")
        raise interruption()
    assert os.listdir(tmp_path) == []


def test_a_sigterm_just_after_the_mkdir_still_removes_the_folder(tmp_path, monkeypatch):
    """The signal's handler runs at the next bytecode after the mkdir returns, before any code could record the
    folder (tempfile.mkdtemp's window): the name is known before, and the mkdir is inside the clean-up's block."""
    real_mkdir = Path.mkdir

    def mkdir_then_signal(self, *args, **kwargs):
        real_mkdir(self, *args, **kwargs)
        raise Terminated()

    monkeypatch.setattr(Path, "mkdir", mkdir_then_signal)
    with pytest.raises(Terminated), staging_folder(tmp_path, "x-"):
        pytest.fail("the block ran")  # pragma: no cover
    assert os.listdir(tmp_path) == []


def test_a_folder_another_process_made_under_the_same_name_is_left_alone(tmp_path, monkeypatch):
    import secrets

    monkeypatch.setattr(secrets, "token_hex", lambda nbytes: "0" * 2 * nbytes)
    theirs = tmp_path / f"x-{'0' * 16}"
    theirs.mkdir()
    (theirs / "their file").write_text("theirs")
    with pytest.raises(FileExistsError), staging_folder(tmp_path, "x-"):
        pytest.fail("the block ran")  # pragma: no cover
    assert (theirs / "their file").read_text() == "theirs"
