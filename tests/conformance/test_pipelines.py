"""The "Stock pipelines" section of docs/models.md: ``transformers.pipeline`` runs on saved mlm_suite checkpoints
in a Python process without mlm_suite (``trust_remote_code=True``): fill-mask, token classification
with ``aggregation_strategy="simple"``, text classification (single texts and sentence pairs) and
feature extraction (the encoder of an MLM checkpoint). Tiny random checkpoints with the MiniLM
tokenizer: the test checks the output structure, not the answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import mlm_suite
from mlm_suite import MlmSuiteConfig

BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
CHECKPOINTS = {
    "mlm": ("MlmSuiteForMaskedLM", {}),
    "ner": ("MlmSuiteForTokenClassification", {"id2label": BIO}),
    "sentiment": ("MlmSuiteForSequenceClassification", {"id2label": {0: "negative", 1: "positive"}}),
    "coherence": ("MlmSuiteForPairClassification", {"id2label": {0: "follows", 1: "random"}}),
}

# The calls of docs/models.md's section, as written there, with the folders made here.
CHILD = r"""
import json, sys
sys.modules["mlm_suite"] = None  # as if mlm_suite were not installed
try:
    import mlm_suite  # noqa: F401
    importable = True
except ImportError:
    importable = False
from transformers import pipeline

fill_mask = pipeline("fill-mask", model="mlm", trust_remote_code=True)
ner = pipeline("token-classification", model="ner", aggregation_strategy="simple", trust_remote_code=True)
sentiment = pipeline("text-classification", model="sentiment", trust_remote_code=True)
coherence = pipeline("text-classification", model="coherence", trust_remote_code=True)
features = pipeline("feature-extraction", model="mlm", trust_remote_code=True)  # the encoder of the MLM checkpoint

vectors = features("the film was good", return_tensors=True)
result = {
    "importable": importable,
    "modules": [type(p.model).__module__ for p in (fill_mask, ner, sentiment, coherence, features)],
    "coherence_class": type(coherence.model).__name__,
    "fill_mask": fill_mask("the movie was [MASK] good .", top_k=3),
    "ner": [{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in ner("john smith lives in new york")],
    "sentiment": sentiment(["a fine film", "a dull film"]),
    "coherence": coherence({"text": "the film starts .", "text_pair": "then it ends ."}),
    "features_shape": list(vectors.shape),
    "features_nested": [len(x) for x in features("the film was good")[0][:1]],
    "n_tokens": len(features.tokenizer("the film was good")["input_ids"]),
    "hidden_size": features.model.config.hidden_size,
}
json.dump(result, open("result.json", "w"))
"""


@pytest.mark.multiprocess
@pytest.mark.slow  # over 10 s on 2 cores
def test_stock_pipelines_on_saved_checkpoints_without_mlm_suite(tmp_path, tokenizer):
    sizes = dict(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=48, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id)
    for index, (name, (class_name, overrides)) in enumerate(CHECKPOINTS.items()):
        config = MlmSuiteConfig(**sizes, **overrides)
        if "id2label" in overrides:
            config.label2id = {label: i for i, label in overrides["id2label"].items()}
        torch.manual_seed(index)
        getattr(mlm_suite, class_name)(config).save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)

    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Do you wish to run the custom code" not in done.stdout + done.stderr
    result = json.loads((tmp_path / "result.json").read_text())

    assert result["importable"] is False
    assert all(module.startswith("transformers_modules.") for module in result["modules"]), result["modules"]
    assert result["coherence_class"] == "MlmSuiteForPairClassification"

    answers = result["fill_mask"]
    assert len(answers) == 3 and all({"score", "token", "token_str", "sequence"} <= set(a) for a in answers)
    assert all("[MASK]" not in a["sequence"] for a in answers)

    entities = result["ner"]
    text = "john smith lives in new york"
    for entity in entities:
        assert {"entity_group", "score", "word", "start", "end"} <= set(entity)
        assert entity["entity_group"] in {"PER", "LOC"}  # B-/I- prefixes merged by the aggregation
        assert text[entity["start"] : entity["end"]] == entity["word"]

    assert [set(r) for r in result["sentiment"]] == [{"label", "score"}] * 2
    assert all(r["label"] in {"negative", "positive"} and 0.0 <= r["score"] <= 1.0 for r in result["sentiment"])
    coherence = result["coherence"]
    coherence = coherence[0] if isinstance(coherence, list) else coherence
    assert coherence["label"] in {"follows", "random"}

    assert result["features_shape"] == [1, result["n_tokens"], result["hidden_size"]]
    assert result["features_nested"] == [result["hidden_size"]]
