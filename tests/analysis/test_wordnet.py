"""Tests of mlm_suite.analysis.wordnet on the real WordNet 3.0 files, and a smoke test of examples/wsd.py."""

from __future__ import annotations

import importlib
import json
from collections import Counter

import pytest

from mlm_suite.analysis.wordnet import (
    WordNet,
    WSDInstance,
    build_wsd_instances,
    drop_unseen_test_senses,
    find_target,
    inflections,
    parse_data_line,
    parse_index_line,
    read_jsonl,
    split_instances,
    write_jsonl,
)



@pytest.fixture(scope="module")
def verbs() -> WordNet:
    return WordNet(pos=("v",))


@pytest.fixture(scope="module")
def verb_instances(verbs) -> list[WSDInstance]:
    return build_wsd_instances(verbs)


def test_parse_data_and_index_lines():
    line = (
        "08420278 14 n 04 depository_financial_institution 0 bank 0 banking_concern 0 banking_company 0 "
        "002 @ 08054721 n 0000 + 02787772 v 0102 | a financial institution that accepts deposits; "
        '"he cashed a check at the bank"; "that bank holds the mortgage on my home"  '
    )
    synset = parse_data_line(line)
    assert synset.offset == 8420278 and synset.pos == "n"
    assert synset.lemmas == ("depository_financial_institution", "bank", "banking_concern", "banking_company")
    assert synset.definition == "a financial institution that accepts deposits"
    assert synset.examples == ("he cashed a check at the bank", "that bank holds the mortgage on my home")
    assert parse_data_line("  1 This software and database is being provided") is None
    satellite = parse_data_line("00003829 00 s 01 parturient(p) 0 000 | giving birth")
    assert satellite.pos == "a" and satellite.lemmas == ("parturient",)
    assert parse_index_line("bank n 3 2 @ ~ 3 1 09213565 08420278 09213434  ") == ("bank", [9213565, 8420278, 9213434])


def test_real_wordnet_sense_order(verbs):
    run = verbs.senses("run", "v")
    assert len(run) == 41
    assert run[0].definition.startswith("move fast by using one's feet")
    assert all("run" in synset.lemmas for synset in run)
    assert verbs.sense_name("run", "v", run[2].offset) == "run.v.03"
    with pytest.raises(KeyError, match="is not a sense of 'walk'"):
        verbs.sense_name("walk", "v", run[0].offset)


def test_inflections():
    assert {"cry", "cries", "cried", "crying"} <= inflections("cry")
    assert "plaies" not in inflections("play")  # y after a vowel stays
    assert {"dance", "danced", "dancing", "dances"} <= inflections("dance")
    assert {"stopped", "stopping", "boxes"} <= inflections("stop") | inflections("box")
    assert find_target(["She", "Cried", "loudly"], "cry") == 1
    assert find_target(["no", "match"], "cry") is None


def test_instances_point_at_the_lemma(verbs, verb_instances):
    assert len(verb_instances) > 1000
    for instance in verb_instances:
        assert instance.tokens[instance.target_index].lower() in inflections(instance.lemma)
        lemma, pos, number = instance.sense.rsplit(".", 2)
        assert lemma == instance.lemma and pos == "v"
        # The sense's synset really lists the lemma, and its examples contain the sentence's words.
        synset = verbs.senses(lemma, pos)[int(number) - 1]
        assert lemma in synset.lemmas
        assert any(instance.tokens[instance.target_index] in example for example in synset.examples)
    senses_per_lemma = Counter()
    for lemma, sense in {(i.lemma, i.sense) for i in verb_instances}:
        senses_per_lemma[lemma] += 1
    assert min(senses_per_lemma.values()) >= 2


def test_split_is_deterministic_and_consistent(verb_instances):
    split = split_instances(verb_instances, test_fraction=0.3, seed=0)
    again = split_instances(list(reversed(verb_instances)), test_fraction=0.3, seed=0)
    assert sorted(map(repr, split.test)) == sorted(map(repr, again.test))
    assert split_instances(verb_instances, seed=1).test != split.test
    assert len(split.train) + len(split.test) == len(verb_instances)
    assert split.dropped_test == 0 and len(split.test) > 100
    train_senses = {(i.lemma, i.sense) for i in split.train}
    assert all((i.lemma, i.sense) in train_senses for i in split.test)
    # Every sense of the full data keeps a training instance.
    assert train_senses == {(i.lemma, i.sense) for i in verb_instances}


def test_drop_unseen_test_senses_counts():
    train = [WSDInstance(("a", "bank"), 1, "bank", "bank.n.01")]
    test = [WSDInstance(("the", "bank"), 1, "bank", "bank.n.01"), WSDInstance(("bank", "it"), 0, "bank", "bank.v.01")]
    split = drop_unseen_test_senses(train, test)
    assert split.test == test[:1] and split.dropped_test == 1


def test_jsonl_round_trip_and_errors(tmp_path):
    instances = [WSDInstance(("He", "banked", "left"), 1, "bank", "bank.v.01")]
    path = tmp_path / "data.jsonl"
    write_jsonl(instances, path)
    assert read_jsonl(path) == instances
    path.write_text('{"tokens": ["The", "Bank"], "target": 1, "sense": "bank.n.02"}\n', encoding="utf-8")
    assert read_jsonl(path)[0].lemma == "bank"
    path.write_text('\n{"tokens": ["The", "Bank"], "target": 2, "sense": "x"}\n', encoding="utf-8")
    with pytest.raises(IndexError, match=r"data.jsonl line 2: target index 2 is outside the sentence, which has 2 tokens"):
        read_jsonl(path)
    path.write_text('{"tokens": ["The"], "sense": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"missing field\(s\) \['target'\]"):
        read_jsonl(path)


def _load_example(name: str):
    return importlib.import_module(f"mlm_suite.jobs.{name}")


def test_wsd_example_smoke(tmp_path):
    wsd = _load_example("wsd")
    results = wsd.main(["--pos", "v", "--max_lemmas", "25", "--standardize", "--output_dir", str(tmp_path)])
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["accuracy"] == results["accuracy"]
    for key in ("accuracy", "baseline_accuracy", "standardized_accuracy"):
        assert 0.0 <= written[key] <= 1.0
    assert written["n_lemmas"] == 25 and written["n_test"] > 0
    assert (tmp_path / "standardizer.safetensors").exists()


def test_wsd_example_user_files(tmp_path):
    train = [
        WSDInstance(("he", "sat", "on", "the", "river", "bank"), 5, "bank", "shore"),
        WSDInstance(("the", "muddy", "bank", "of", "the", "stream"), 2, "bank", "shore"),
        WSDInstance(("she", "robbed", "the", "bank", "downtown"), 3, "bank", "money"),
        WSDInstance(("the", "bank", "lent", "us", "money"), 1, "bank", "money"),
    ]
    test = [
        WSDInstance(("fish", "swam", "near", "the", "bank", "of", "the", "lake"), 4, "bank", "shore"),
        WSDInstance(("the", "bank", "raised", "interest", "rates"), 1, "bank", "money"),
        WSDInstance(("bank", "the", "fire"), 0, "bank", "cover"),
    ]
    write_jsonl(train, tmp_path / "train.jsonl")
    write_jsonl(test, tmp_path / "test.jsonl")
    wsd = _load_example("wsd")
    results = wsd.main([
        "--train_file", str(tmp_path / "train.jsonl"), "--test_file", str(tmp_path / "test.jsonl"),
        "--output_dir", str(tmp_path / "out"), "--layers", "4,5,6",
    ])
    assert results["n_test"] == 2 and results["dropped_test"] == 1
    assert 0.0 <= results["accuracy"] <= 1.0 and results["baseline_accuracy"] == 0.5
