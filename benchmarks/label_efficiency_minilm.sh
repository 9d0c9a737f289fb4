#!/usr/bin/env bash
# Issue 25's MiniLM curves and the continued-pretraining (DAPT) recipe search, in one command.
#
#   JOBS=6 bash benchmarks/label_efficiency_minilm.sh      # on one GPU: a few minutes (several runs share it)
#   JOBS=1 bash benchmarks/label_efficiency_minilm.sh      # on CPU: many hours
#
# 1. The curves of (c) all-MiniLM-L6-v2 and (d) MiniLM + DAPT with the benchmark's default --dapt_flags, all
#    sizes, into outputs/label_efficiency (next to the small encoders' runs; the full table is the merge run,
#    `python benchmarks/bench_label_efficiency.py --markdown outputs/label_efficiency/table.md`).
# 2. The search: each recipe in RECIPES below continues MiniLM and is fine-tuned at 32 to 256 labels (the same
#    subsets, learning-rate sweep and seeds), each in outputs/label_efficiency_dapt/NAME.
# 3. The recipe with the best mean validation accuracy over those sizes (the default's included) gets the rest
#    of the curve (512, 1024, all), so that it can replace the default in the table.
# 4. The search's table: benchmarks/dapt_search_table.py, into outputs/label_efficiency_dapt/table.md.
# Settings (environment): ROOT, the outputs folder (default outputs); PYTHON, the interpreter (default python);
# JOBS, fine-tuning runs at a time for the curves (the recipes run 2 each, all at once); EXTRA, flags added to
# every benchmark call (--quick for a smoke run); DAPT_EXTRA, flags added to every recipe (a few steps for a smoke
# run); FINETUNE_FLAGS, the benchmark's --finetune_flags (e.g. --dataloader_num_workers 0 where many runs share a
# machine's cores); LOW_SIZES, the search's sizes (default 32 64 128 256).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-1}
extra=${EXTRA:-}
dapt_extra=${DAPT_EXTRA:-}
finetune_flags=${FINETUNE_FLAGS:-}
python=${PYTHON:-python}
# shellcheck disable=SC2206  # EXTRA is split into flags on purpose
bench=("$python" benchmarks/bench_label_efficiency.py --jobs "$jobs" --threads 1 $extra ${finetune_flags:+--finetune_flags "$finetune_flags"})
root=${ROOT:-outputs}
curves=$root/label_efficiency
search=$root/label_efficiency_dapt
low_sizes=${LOW_SIZES:-32 64 128 256}

# The recipes, all on the embedded Pang & Lee reviews unless they name --train_file. MiniLM (a sentence-embedding
# model) has no MLM head: --head_warmup_steps trains the new head alone first, so that its random gradients do
# not reach the encoder.
declare -A RECIPES=(
    [long_head_warmup]="--max_seq_length 128 --per_device_train_batch_size 32 --learning_rate 1e-4 --mlm_probability 0.15 --max_steps 2000 --head_warmup_steps 200 --eval_steps 500"
    [whole_word_low_lr]="--max_seq_length 128 --per_device_train_batch_size 32 --learning_rate 5e-5 --mlm_probability 0.15 --masking whole_word --max_steps 2000 --head_warmup_steps 200 --eval_steps 500"
    [job_defaults]="--max_seq_length 128"
    [tapt_sentences]="--train_file $search/tapt_sentences/data/tapt_corpus.jsonl --max_seq_length 64 --per_device_train_batch_size 32 --learning_rate 1e-4 --mlm_probability 0.15 --max_steps 1000 --head_warmup_steps 100 --eval_steps 250"
)

# 1 and 2 at once: the curves, and one benchmark per recipe (2 workers each; each pretrains first).
pids=()
mkdir -p "$search"
"${bench[@]}" --starts minilm minilm_dapt --output_dir "$curves" >"$root/label_efficiency_minilm.log" 2>&1 &
pids+=($!)
for name in "${!RECIPES[@]}"; do
    "${bench[@]}" --starts minilm_dapt --sizes $low_sizes --jobs 2 --output_dir "$search/$name" \
        --dapt_flags "${RECIPES[$name]}${dapt_extra:+ $dapt_extra}" >"$search/$name.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ "$status" -eq 0 ] || { echo "a benchmark failed: see $root/label_efficiency_minilm.log and $search/*.log" >&2; exit 1; }

# 3. The best recipe on validation at 32-256 labels.
table=("$python" benchmarks/dapt_search_table.py --curves "$curves" --search "$search" --sizes $low_sizes
       --markdown "$search/table.md")
best=$("${table[@]}")
echo "best recipe on validation: $best"
if [ "$best" != default ]; then
    "${bench[@]}" --starts minilm_dapt --jobs "$jobs" --output_dir "$search/$best" \
        --dapt_flags "${RECIPES[$best]}${dapt_extra:+ $dapt_extra}" >"$search/$best.all_sizes.log" 2>&1
fi
"${table[@]}" >/dev/null  # the table again, with the best recipe's whole curve
echo "done: $curves (curves), $search (search, table.md; best: $best)"
