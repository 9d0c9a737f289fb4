"""The readers of the jobs' input files (mlm_suite.data.inputs.readers)."""

from __future__ import annotations

from mlm_suite.data.inputs.readers import read_conll


def test_a_conll_token_with_no_break_spaces_is_one_token(tmp_path):
    path = tmp_path / "train.conll"
    path.write_text("New\u00a0York NNP B-LOC\nis\tVBZ\tO\n5\u202f000 CD O\n\u00a0\nParis NNP B-LOC\n", encoding="utf-8")
    sentences, lines = read_conll(path, with_lines=True)
    # No-break spaces stay inside their token; spaces and tabs separate columns; a line of them alone is blank.
    assert sentences == [(["New\u00a0York", "is", "5\u202f000"], ["B-LOC", "O", "O"]), (["Paris"], ["B-LOC"])]
    assert lines == [[1, 2, 3], [5]]
