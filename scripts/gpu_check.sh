#!/usr/bin/env bash
# GPU acceptance check: the CUDA tests, the model step's speed, and the jobs as a user runs them, in one report.
#
#   scripts/gpu_check.sh [REPORT.md]          # default outputs/gpu_check/report.md; at most 9 minutes on an H100/H200
#
# GPU_CHECK_SECONDS (default 540) bounds the whole check: a stage gets at most what is left. GPU_CHECK_WORK
# (default the report's folder) receives each stage's log and the trained models. GPU_CHECK_STAGES names the
# stages to run (default all: tests pretrain finetune feed bench_512 bench_128); GPU_CHECK_PRETRAIN_MINUTES
# the pretraining budget (default 1.5).
#
# Needs python with a CUDA build of torch, transformers and accelerate, and no network: the other dependencies
# come as wheels from $MLM_SUITE_WHEELS and the data from $MLM_SUITE_CACHE (default .gpu/wheels and .gpu/cache,
# which scripts/gpu_bundle.sh fills on a machine with network). The wheels go into a scratch folder on
# PYTHONPATH and mlm_suite is installed editable without dependencies, so the machine's own torch stays.
#
# Stages (each has a time limit; a failed stage is reported and the next one still runs):
#   1. tests      the CUDA tests (varlen vs the padded grid and HF BERT, no host synchronisation, packed
#                 documents kept apart) and the device tests
#   2. pretrain   mlm-suite pretrain for 90 s with the job's GPU defaults (mini preset, 128 rows of 128 tokens,
#                 bf16): training rows (the whole corpus?), steady rows/s, held-out [MASK] accuracy
#   3. finetune   mlm-suite finetune-cls from that model: test accuracy and steady rows/s
#   4. feed       benchmarks/bench_job_throughput.py --device cuda: collator rows/s on this machine's CPU, and
#                 each job's steady step rate against a bare loop over pre-collated batches
#   5. bench      benchmarks/bench_speed.py --device cuda --compile: BERT-base MLM step, lengths 16..128, at
#                 batch 512 and 128 (HF BERT vs mlm_suite padded, flattened, flattened + compiled)
set -uo pipefail
cd "$(dirname "$0")/.."
report=${1:-outputs/gpu_check/report.md}
work=${GPU_CHECK_WORK:-$(dirname "$report")}  # logs and the trained models
deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-540}))  # stages are cut short to end by then
stages=${GPU_CHECK_STAGES:-tests pretrain finetune feed bench_512 bench_128}  # a rerun can pick some
pretrain_minutes=${GPU_CHECK_PRETRAIN_MINUTES:-1.5}
mkdir -p "$work" "$(dirname "$report")"
wheels=${MLM_SUITE_WHEELS:-.gpu/wheels}
export MLM_SUITE_CACHE=${MLM_SUITE_CACHE:-$PWD/.gpu/cache}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python=${PYTHON:-python3}

# ---- set-up ---------------------------------------------------------------------------------------------
if ! $python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu_check: $python's torch sees no CUDA device" >&2
    exit 2
fi
if ! $python -c "import datasets, evaluate, seqeval, torchdata, pytest" 2>/dev/null; then
    scratch=$(mktemp -d)
    $python -m pip install -q --no-index --no-deps --target "$scratch" "$wheels"/*.whl || exit 1
    export PYTHONPATH="$scratch${PYTHONPATH:+:$PYTHONPATH}"
fi
# Installed, not run from the source tree: the model-card templates are package data of the installed package.
$python -m pip install -q --no-deps --no-build-isolation -e . || exit 1

failures=0
: >"$work/stages.txt"
section() { printf '\n## %s\n\n' "$1" >>"$report"; }
# run NAME SECONDS COMMAND...: the command's output goes to $work/NAME.log; a failure is counted and shown.
run() {
    local name=$1 limit=$2
    shift 2
    local started=$SECONDS
    case " $stages " in *" $name "*) ;; *) return 1 ;; esac
    if [ $((deadline - SECONDS)) -lt "$limit" ]; then
        limit=$((deadline - SECONDS))
    fi
    if [ "$limit" -lt 20 ]; then
        echo "$name: skipped, the time is used up" | tee -a "$work/stages.txt"
        printf '**%s skipped**: the time (GPU_CHECK_SECONDS) is used up.\n' "$name" >>"$report"
        failures=$((failures + 1))
        return 1
    fi
    timeout "$limit" "$@" >"$work/$name.log" 2>&1
    local status=$?
    echo "$name: exit $status in $((SECONDS - started)) s" | tee -a "$work/stages.txt"
    if [ "$status" -ne 0 ]; then
        failures=$((failures + 1))
        printf '**%s failed** (exit %s after %s s; %s):\n\n```\n%s\n```\n' "$name" "$status" "$((SECONDS - started))" \
            "$([ "$status" -eq 124 ] && echo "time limit $limit s" || echo "error")" "$(tail -n 25 "$work/$name.log")" >>"$report"
    fi
    return "$status"
}

{
    echo "# mlm_suite GPU check"
    echo
    $python - <<'EOF'
import platform, subprocess, torch, transformers, accelerate
import mlm_suite
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} (CUDA {torch.version.cuda}) · transformers "
      f"{transformers.__version__} · accelerate {accelerate.__version__} · Python {platform.python_version()} · "
      f"mlm_suite at {commit or 'an uncommitted tree'}")
EOF
} >"$report"

# ---- 1. tests -----------------------------------------------------------------------------------------------
section "CUDA tests"
if run tests 120 $python -m pytest -q -p no:cacheprovider tests/model/test_layout.py tests/model/test_devices.py -k "cuda or test_devices"; then
    echo "\`pytest tests/model/test_layout.py tests/model/test_devices.py -k 'cuda or test_devices'\`: $(tail -n 1 "$work/tests.log")" >>"$report"
fi

# ---- 2. pretraining with the job's GPU defaults ---------------------------------------------------------------
section "pretrain: $pretrain_minutes min, mini preset, 128 rows x 128 tokens, bf16, the job's GPU defaults"
if run pretrain 150 $python -m mlm_suite.jobs.pretrain --output_dir "$work/pretrain" --config_preset mini \
    --per_device_train_batch_size 128 --max_seq_length 128 --bf16 true --max_train_minutes "$pretrain_minutes" \
    --max_eval_samples 1024 --fill_mask_probes 4 --disable_tqdm true; then
    $python - "$work/pretrain" >>"$report" <<'EOF'
import json, sys
folder = sys.argv[1]
results = json.load(open(f"{folder}/all_results.json"))
print(f"- {results['train_samples']:,} training rows (the embedded corpus at 128 tokens gives about 13,500)")
print(f"- steady {results['train_steady_samples_per_second']:,.0f} rows/s ({results['train_steady_steps_per_second']:.1f} "
      f"steps/s); {results['train_steps']} steps in {results['train_runtime']:.0f} s")
print(f"- held-out [MASK] accuracy {results['eval_mask_accuracy']:.4f} (most-frequent-token baseline "
      f"{results['eval_mask_baseline_accuracy']:.4f})")
EOF
fi

# ---- 3. fine-tuning ------------------------------------------------------------------------------------------
section "finetune-cls: sentiment, from that model, bf16"
if run finetune 100 $python -m mlm_suite.jobs.finetune_cls --model_name_or_path "$work/pretrain" \
    --output_dir "$work/finetune_cls" --bf16 true --disable_tqdm true; then
    $python - "$work/finetune_cls" >>"$report" <<'EOF'
import json, sys
results = json.load(open(f"{sys.argv[1]}/all_results.json"))
print(f"- test accuracy {results.get('test_accuracy', float('nan')):.4f}, validation {results.get('eval_accuracy', float('nan')):.4f}")
print(f"- steady {results.get('train_steady_samples_per_second', 0):,.0f} rows/s; {results.get('train_runtime', 0):.0f} s of training")
EOF
fi

# ---- 4. feeding the GPU ----------------------------------------------------------------------------------------
section "Feeding the GPU (bench_job_throughput.py --device cuda)"
if run feed 170 $python benchmarks/bench_job_throughput.py --device cuda --steps 200 \
    --finetune_model "$work/pretrain" --markdown "$work/feed.md"; then
    cat "$work/feed.md" >>"$report"
fi

# ---- 5. the model step --------------------------------------------------------------------------------------
section "Model step: BERT-base MLM, bf16, lengths 16..128 (bench_speed.py --device cuda --compile)"
for batch in 512 128; do
    if run "bench_$batch" 100 $python benchmarks/bench_speed.py --device cuda --compile --no-modernbert \
        --workloads mlm-base-var --batch_size "$batch" --reps 5 --warmup 2 --markdown "$work/bench_$batch.md"; then
        printf 'Batch %s:\n\n' "$batch" >>"$report"
        sed -n '1,/^$/p' "$work/bench_$batch.md" >>"$report"
    fi
done

printf '\nStages: %s\n' "$(paste -sd ';' "$work/stages.txt" | sed 's/;/; /g')" >>"$report"
rm -f "$work/stages.txt"
echo "report: $report ($failures failed stage(s))"
exit $((failures > 0))
