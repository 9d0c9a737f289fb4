"""Why a pretrained encoder does or does not help sentiment: diagnostics that fine-tune nothing (issue 13 §2).

    python benchmarks/diagnose_transfer.py --model outputs/pretrain --markdown outputs/diagnose_transfer/table.md
    make diagnose-transfer        # the same, on the main job's output (run `mlm-suite pretrain` first)

For an MLM checkpoint and the same architecture freshly initialised (``--init random`` in the fine-tuning jobs),
on the embedded sentiment task (``finetune-cls``'s default: Pang & Lee sentence polarity, split 80/10/10 by seed):

1. **Weight scale.** RMS of the encoder's weight matrices, pretrained against fresh. AdamW moves a weight by about
   the learning rate per step whatever its size, so at one learning rate a checkpoint whose weights are k times
   larger changes k times less, relatively, than a fresh model.
2. **Polarity in the word embeddings.** Cosine similarity of single-token word pairs of opposite sentiment
   (good/bad) and of the same sentiment (good/great). Distributional training puts words that fill the same slots
   close together; when opposite pairs sit as close as same-sentiment pairs, the embeddings have folded the
   sentiment axis away.
3. **Linear probes of frozen features**, per seed: a logistic regression (L2 chosen on validation) on the mean of
   the input embeddings, the mean of the final states and the final ``[CLS]`` state, for both starts; and on the
   bag of the tokenizer's pieces (log counts), the reference a model without pretraining can reach.
4. **Zero-shot prompt.** ``<sentence> it was [MASK] .``: the MLM head's log-probability of positive words minus
   negative words, split at its median (label-free; the classes are balanced). Chance is 0.5.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from mlm_suite.data.inputs.builtin import sentence_polarity_splits
from mlm_suite.model import MlmSuiteConfig, MlmSuiteForMaskedLM

OPPOSITE_PAIRS = [("good", "bad"), ("best", "worst"), ("great", "terrible"), ("funny", "boring"), ("love", "hate"),
                  ("better", "worse"), ("beautiful", "ugly"), ("brilliant", "awful"), ("interesting", "dull"),
                  ("perfect", "stupid")]
SAME_PAIRS = [("good", "great"), ("bad", "awful"), ("best", "greatest"), ("funny", "hilarious"), ("boring", "dull"),
              ("great", "excellent"), ("bad", "terrible"), ("love", "enjoy"), ("beautiful", "wonderful"),
              ("stupid", "silly")]
POSITIVE_WORDS = ["good", "great", "excellent", "wonderful"]
NEGATIVE_WORDS = ["bad", "awful", "terrible", "boring"]
PROMPT = " it was {mask} ."
L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1)
FEATURES = ("embedding mean", "final mean", "final [CLS]")


def weight_rms(model: torch.nn.Module) -> dict[str, float]:
    """RMS of the encoder's weight matrices by group: word embeddings, attention, feed-forward."""
    groups: dict[str, list[torch.Tensor]] = {"word embeddings": [], "attention matrices": [], "feed-forward matrices": []}
    for name, weight in model.encoder.named_parameters():
        if name == "embeddings.word_embeddings.weight":
            groups["word embeddings"].append(weight)
        elif weight.dim() == 2 and ".attention." in name:
            groups["attention matrices"].append(weight)
        elif weight.dim() == 2 and ".ffn." in name:
            groups["feed-forward matrices"].append(weight)
    return {group: torch.cat([w.detach().flatten() for w in ws]).pow(2).mean().sqrt().item() for group, ws in groups.items()}


def pair_cosines(model: torch.nn.Module, tokenizer, pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Cosine similarity of the input embeddings of each pair whose two words are single tokens of the vocabulary."""
    vocab = tokenizer.get_vocab()
    table = model.encoder.embeddings.word_embeddings.weight.detach()
    return {f"{a}/{b}": F.cosine_similarity(table[vocab[a]], table[vocab[b]], dim=0).item()
            for a, b in pairs if a in vocab and b in vocab}


@torch.no_grad()
def frozen_features(model: torch.nn.Module, tokenizer, texts: list[str], batch_size: int = 128) -> dict[str, torch.Tensor]:
    """``(n, hidden)`` features per kind in FEATURES, from the frozen encoder in eval mode."""
    model.eval()
    parts: dict[str, list[torch.Tensor]] = {kind: [] for kind in FEATURES}
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, max_length=128, return_tensors="pt")
        states = model.encoder(**batch, output_hidden_states=True).hidden_states  # each (batch, seq, hidden)
        real = batch["attention_mask"][..., None].float()
        parts["embedding mean"].append((states[0] * real).sum(1) / real.sum(1))
        parts["final mean"].append((states[-1] * real).sum(1) / real.sum(1))
        parts["final [CLS]"].append(states[-1][:, 0])
    return {kind: torch.cat(chunks) for kind, chunks in parts.items()}


def bag_of_pieces(tokenizer, texts: list[str]) -> torch.Tensor:
    """``(n, vocab)`` log(1 + count) of each of the tokenizer's pieces in each text (special tokens left out)."""
    counts = torch.zeros(len(texts), len(tokenizer))
    for row, ids in enumerate(tokenizer(texts, add_special_tokens=False)["input_ids"]):
        counts[row].index_add_(0, torch.tensor(ids, dtype=torch.long), torch.ones(len(ids)))
    return counts.log1p()


def probe(features: dict[str, torch.Tensor], labels: dict[str, torch.Tensor]) -> tuple[float, float]:
    """(validation, test) accuracy of an L2-regularised logistic regression, its L2 weight chosen on validation."""
    mean, std = features["train"].mean(0), features["train"].std(0).clamp_min(1e-6)
    scaled = {split: (values - mean) / std for split, values in features.items()}
    with_bias = {split: F.pad(values, (0, 1), value=1.0) for split, values in scaled.items()}
    best = None
    for l2 in L2_GRID:
        weights = torch.zeros(with_bias["train"].shape[1], requires_grad=True)
        optimizer = torch.optim.LBFGS([weights], max_iter=200, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = F.binary_cross_entropy_with_logits(with_bias["train"] @ weights, labels["train"])
            loss = loss + l2 * weights[:-1].pow(2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        accuracy = {split: ((with_bias[split] @ weights.detach() > 0).float() == labels[split]).float().mean().item()
                    for split in ("validation", "test")}
        if best is None or accuracy["validation"] > best["validation"]:
            best = accuracy
    return best["validation"], best["test"]


@torch.no_grad()
def prompt_scores(model: torch.nn.Module, tokenizer, texts: list[str]) -> torch.Tensor | None:
    """``(n,)`` log-probability of the positive words minus the negative words at the prompt's mask; None without them."""
    vocab = tokenizer.get_vocab()
    positive = [vocab[word] for word in POSITIVE_WORDS if word in vocab]
    negative = [vocab[word] for word in NEGATIVE_WORDS if word in vocab]
    if not positive or not negative:
        return None
    model.eval()
    scores = []
    prompted = [text + PROMPT.format(mask=tokenizer.mask_token) for text in texts]
    for start in range(0, len(prompted), 128):
        batch = tokenizer(prompted[start:start + 128], padding=True, truncation=True, max_length=128, return_tensors="pt")
        logits = model(**batch).logits  # (batch, seq, vocab)
        at_mask = logits[batch["input_ids"] == tokenizer.mask_token_id].log_softmax(-1)  # (batch, vocab): one mask a row
        scores.append(at_mask[:, positive].logsumexp(-1) - at_mask[:, negative].logsumexp(-1))
    return torch.cat(scores)


def median_split_accuracy(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Accuracy of calling the scores above their median positive: label-free, for balanced classes."""
    return ((scores > scores.median()).float() == labels).float().mean().item()


def mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4f} ± {sd:.4f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="outputs/pretrain", help="an mlm_suite MLM checkpoint folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 42])
    parser.add_argument("--markdown", help="also write the tables to this file")
    args = parser.parse_args(argv)
    if not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json (run `mlm-suite pretrain --output_dir {args.model}` first)")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    pretrained = MlmSuiteForMaskedLM.from_pretrained(args.model)
    torch.manual_seed(0)
    fresh = MlmSuiteForMaskedLM(MlmSuiteConfig.from_pretrained(args.model))
    starts = {"pretrained": pretrained, "random": fresh}

    lines = [f"Checkpoint `{args.model}`; sentiment splits of seeds {args.seeds}.", "",
             "| weights (RMS) | pretrained | fresh initialisation | ratio |", "|---|---|---|---|"]
    scales = {start: weight_rms(model) for start, model in starts.items()}
    for group, value in scales["pretrained"].items():
        lines.append(f"| {group} | {value:.4f} | {scales['random'][group]:.4f} | {value / scales['random'][group]:.1f}× |")

    lines += ["", "| word pairs (single tokens) | pairs | mean cosine of the pretrained embeddings | per pair |",
              "|---|---|---|---|"]
    for kind, pairs in (("opposite sentiment", OPPOSITE_PAIRS), ("same sentiment", SAME_PAIRS)):
        cosines = pair_cosines(pretrained, tokenizer, pairs)
        shown = ", ".join(f"{pair} {value:.2f}" for pair, value in cosines.items())
        average = f"{statistics.fmean(cosines.values()):.3f}" if cosines else "–"
        lines.append(f"| {kind} | {len(cosines)} | {average} | {shown} |")

    probes: dict[str, dict[str, list[float]]] = {}

    def record(name: str, validation: float, test: float) -> None:
        scores = probes.setdefault(name, {"validation": [], "test": []})
        scores["validation"].append(validation)
        scores["test"].append(test)

    prompts: list[float] = []
    for seed in args.seeds:
        splits = sentence_polarity_splits(seed)
        texts = {split: [example["text"] for example in examples] for split, examples in splits.items()}
        labels = {split: torch.tensor([float(example["label"] == "positive") for example in examples])
                  for split, examples in splits.items()}
        for start, model in starts.items():
            features = {split: frozen_features(model, tokenizer, split_texts) for split, split_texts in texts.items()}
            for kind in FEATURES:
                record(f"{start}: {kind}", *probe({split: values[kind] for split, values in features.items()}, labels))
        pieces = {split: bag_of_pieces(tokenizer, split_texts) for split, split_texts in texts.items()}
        record("bag of the tokenizer's pieces (no encoder)", *probe(pieces, labels))
        prompt_score = prompt_scores(pretrained, tokenizer, texts["test"])
        if prompt_score is not None:
            prompts.append(median_split_accuracy(prompt_score, labels["test"]))

    lines += ["", f"Linear probes of frozen features, accuracy, mean ± sd over seeds {args.seeds}:", "",
              "| features | validation | test |", "|---|---|---|"]
    for name, scores in probes.items():
        lines.append(f"| {name} | {mean_sd(scores['validation'])} | {mean_sd(scores['test'])} |")
    prompt = PROMPT.format(mask="[MASK]").strip()
    lines += ["", f"Zero-shot prompt `<sentence> {prompt}` ({'/'.join(POSITIVE_WORDS)} against "
              f"{'/'.join(NEGATIVE_WORDS)}), test accuracy: " + (mean_sd(prompts) if prompts else "– (words not in the vocabulary)")]

    table = "\n".join(lines)
    print("\n" + table)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
