"""Remote code: every head saved by mlm_suite reloads with ``AutoModelFor*.from_pretrained(dir,
trust_remote_code=True)`` (and ``AutoModel``) in a Python process where ``import mlm_suite`` fails,
computes the same outputs, comes from ``transformers_modules``; a pair head reloads as the pair
class through ``AutoModelForSequenceClassification``; the CRF constraints survive; the saved
tokenizer loads with ``AutoTokenizer``. All heads are checked in one subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

import mlm_suite
from tests.helpers import make_tiny_config

BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
FIRST = ["The cat sat on the mat.", "Hello"]
SECOND = ["It was tired.", "world, how are you doing?"]

# name: (class, config overrides, Auto class used to reload it)
HEADS = {
    "model": ("MlmSuiteModel", {}, "AutoModel"),
    "mlm": ("MlmSuiteForMaskedLM", {}, "AutoModelForMaskedLM"),
    "pretraining": ("MlmSuiteForPreTraining", {}, "AutoModelForPreTraining"),
    "nsp": ("MlmSuiteForNextSentencePrediction", {}, "AutoModelForNextSentencePrediction"),
    "seqcls": ("MlmSuiteForSequenceClassification", {"num_labels": 3}, "AutoModelForSequenceClassification"),
    "pair": ("MlmSuiteForPairClassification", {"num_labels": 3}, "AutoModelForSequenceClassification"),
    "tokcls": ("MlmSuiteForTokenClassification", {"id2label": BIO}, "AutoModelForTokenClassification"),
    "crf": (
        "MlmSuiteForTokenClassification",
        {"use_crf": True, "tagging_scheme": "BIO", "id2label": BIO},
        "AutoModelForTokenClassification",
    ),
    "qa": ("MlmSuiteForQuestionAnswering", {}, "AutoModelForQuestionAnswering"),
}
POOLED = {"model", "pretraining", "nsp", "seqcls", "pair"}

CHILD = r"""
import sys
sys.modules["mlm_suite"] = None  # the package must not be needed
import json, os
try:
    import mlm_suite  # noqa: F401
    importable = True
except ImportError:
    importable = False
import torch
import transformers
from safetensors.torch import load_file, save_file

root = sys.argv[1]
spec = json.load(open(os.path.join(root, "spec.json")))
inputs = load_file(os.path.join(root, "inputs.safetensors"))
outputs, classes = {}, {}
for name, auto_name in spec["heads"].items():
    folder = os.path.join(root, name)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    encoded = tokenizer(spec["first"], spec["second"], padding=True, return_tensors="pt")
    for key, value in encoded.items():
        outputs[f"{name}.tokenizer.{key}"] = value
    for auto in sorted({auto_name, "AutoModel"}):
        model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
        classes[f"{name}.{auto}"] = [type(model).__module__, type(model).__name__]
        with torch.no_grad():
            out = model(**inputs)
        for key, value in out.items():
            if isinstance(value, torch.Tensor):
                outputs[f"{name}.{auto}.{key}"] = value.contiguous()
        if getattr(model.config, "use_crf", False) and auto != "AutoModel":
            paths = model.decode(out.logits, inputs["attention_mask"])
            width = max(len(p) for p in paths)
            outputs[f"{name}.{auto}.decoded"] = torch.tensor([p + [-1] * (width - len(p)) for p in paths])
save_file(outputs, os.path.join(root, "outputs.safetensors"))
json.dump({"importable": importable, "classes": classes}, open(os.path.join(root, "result.json"), "w"))
"""


def _save_heads(root, tokenizer, inputs):
    originals = {}
    config_sizes = dict(
        vocab_size=len(tokenizer), hidden_size=16, num_attention_heads=2, intermediate_size=24, max_position_embeddings=64
    )
    for index, (name, (class_name, overrides, _)) in enumerate(HEADS.items()):
        torch.manual_seed(index)
        model = getattr(mlm_suite, class_name)(make_tiny_config(**config_sizes, **overrides)).eval()
        with torch.no_grad():
            for param_name, param in model.named_parameters():
                if "norm" in param_name or param_name.endswith("bias"):
                    param.add_(0.1 * torch.randn_like(param))
            if name == "crf":  # emissions favour I-PER, which BIO forbids after O / at the start
                model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 4.0, 0.0, 2.0]))
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        originals[name] = model
    return originals


def _expected(name, model, inputs):
    with torch.no_grad():
        out = model(**inputs)
        base = model.base_model(**inputs)
    expected = {f"{name}.{HEADS[name][2]}.{k}": v for k, v in out.items() if isinstance(v, torch.Tensor)}
    expected[f"{name}.AutoModel.last_hidden_state"] = base.last_hidden_state
    if name in POOLED:
        expected[f"{name}.AutoModel.pooler_output"] = base.pooler_output
    if name == "crf":
        paths = model.decode(out.logits, inputs["attention_mask"])
        expected["crf.decoded"] = paths
    return expected


@pytest.mark.multiprocess
@pytest.mark.slow
def test_every_head_reloads_as_remote_code_without_mlm_suite(tmp_path, tokenizer):
    encoded = tokenizer(FIRST, SECOND, padding=True, return_tensors="pt")
    inputs = {k: v.contiguous() for k, v in encoded.items()}
    assert (inputs["attention_mask"] == 0).any() and inputs["token_type_ids"].max() == 1
    originals = _save_heads(tmp_path, tokenizer, inputs)
    save_file(inputs, str(tmp_path / "inputs.safetensors"))
    spec = {"heads": {name: auto for name, (_, _, auto) in HEADS.items()}, "first": FIRST, "second": SECOND}
    (tmp_path / "spec.json").write_text(json.dumps(spec))

    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    outputs = load_file(str(tmp_path / "outputs.safetensors"))

    assert result["importable"] is False
    assert (tmp_path / "modules" / "transformers_modules").is_dir()
    for name, (class_name, _, auto) in HEADS.items():
        module, loaded_class = result["classes"][f"{name}.{auto}"]
        assert loaded_class == class_name, name
        assert module.startswith("transformers_modules."), module
        base_module, base_class = result["classes"][f"{name}.AutoModel"]
        assert base_class == "MlmSuiteModel" and base_module.startswith("transformers_modules.")

        for key, value in encoded.items():
            torch.testing.assert_close(outputs[f"{name}.tokenizer.{key}"], value)

        expected = _expected(name, originals[name], inputs)
        decoded = expected.pop("crf.decoded", None)
        for key, value in expected.items():
            assert key in outputs, key
            torch.testing.assert_close(outputs[key], value, atol=1e-5, rtol=0, msg=key)
        if decoded is not None:
            remote = [[t for t in row if t >= 0] for row in outputs[f"{name}.{auto}.decoded"].tolist()]
            assert remote == decoded
            assert all(path[0] != 2 for path in decoded)  # the BIO constraint is active after reloading
            logits = outputs[f"{name}.{auto}.logits"]
            assert logits.argmax(-1)[inputs["attention_mask"].bool()].eq(2).all()
