"""The one opener of the jobs' text files (mlm_suite.data.inputs.text_files) and the CSV rows read through it."""

from __future__ import annotations

import pytest

from mlm_suite.data.inputs.readers import read_conll, read_numbered_records
from mlm_suite.data.inputs.text_files import open_text
from mlm_suite.errors import UsageError


def test_a_bom_is_dropped_and_crlf_files_read_as_before(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbftext,label\r\n\"a, quoted\r\ncell\",1\r\n\r\nplain,0\r\n")
    assert read_numbered_records(path) == [(3, {"text": "a, quoted\r\ncell", "label": "1"}),
                                           (5, {"text": "plain", "label": "0"})]
    with open_text(path) as handle:
        assert handle.readline() == "text,label\n"


@pytest.mark.parametrize("content, line, byte, value", [
    (b"ok\nline two caf\xe9\n", 2, 15, "0xe9"),
    (b"\xff\xfej\x00o\x00", 1, 0, "0xff"),  # UTF-16
    (b"x" * 70000 + b"\xe2\x82" + b"\n", 1, 70000, "0xe2"),  # a broken character across the scan's chunks
])
def test_a_file_that_is_not_utf8_is_named_with_line_and_byte(tmp_path, content, line, byte, value):
    path = tmp_path / "data.conll"
    path.write_bytes(content)
    with pytest.raises(UsageError) as error:
        read_conll(path)
    assert str(error.value) == f"{path} line {line} (byte {byte}): not UTF-8 text (byte {value}); save the file as UTF-8"


def test_a_file_ending_inside_a_character(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_bytes(b"caf\xc3")
    with pytest.raises(UsageError, match="cut.txt: not UTF-8 text"):
        with open_text(path) as handle:
            handle.read()


@pytest.mark.parametrize("row, fields", [("a, b,1", 3), ("alone", 1)])
def test_a_csv_row_must_match_its_header(tmp_path, row, fields):
    path = tmp_path / "d.csv"
    path.write_text(f"text,label\nfine,0\n{row}\n", encoding="utf-8")
    with pytest.raises(UsageError, match=rf"d.csv line 3: {fields} fields but the header has 2 \(text, label\)"):
        read_numbered_records(path)


def test_a_quote_left_open_or_a_huge_field_in_a_csv_is_one_line(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('text,label\nfine,0\n"never closed,1\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"d.csv line 3: 1 fields but the header has 2"):
        read_numbered_records(path)
    path.write_text("text,label\nfine,0\n" + "x" * 200_000 + ",1\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"d.csv line 3: not valid CSV \(field larger than field limit"):
        read_numbered_records(path)
