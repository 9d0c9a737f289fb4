#!/usr/bin/env bash
# Re-create the docs' example figures (docs/*.png): short real runs of the jobs on the embedded data
# (the pictures show what the jobs write; the scores are those of short runs, not of the default recipes).
#
#   scripts/docs_figures.sh [OUTPUT_DIR]      # = make docs-figures; OUTPUT_DIR defaults to outputs/docs
#
# About 6 minutes on 2 idle CPU cores. Each job's full output, model card included, stays in OUTPUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-outputs/docs}

mlm-suite finetune-cls --max_steps 100 --output_dir "$out/sentiment"
cp "$out/sentiment/confusion_matrix_test.png" docs/confusion_matrix.png

mlm-suite finetune-ner --max_steps 150 --compare_hf false --output_dir "$out/ner"
cp "$out/ner/per_type_scores_test.png" docs/per_type_scores.png

mlm-suite seeds finetune-cls --seeds 0 1 2 --output_dir "$out/sentiment_seeds" -- --max_steps 100
cp "$out/sentiment_seeds/seed_scores.png" docs/seed_scores.png

mlm-suite pretrain --max_steps 1000 --eval_steps 125 --output_dir "$out/pretrain"
cp "$out/pretrain/training_curves.png" docs/pretraining_curves.png

ls -l docs/pretraining_curves.png docs/confusion_matrix.png docs/per_type_scores.png docs/seed_scores.png
