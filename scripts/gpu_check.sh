#!/usr/bin/env bash
# GPU acceptance check: the CUDA tests, BERT-base pretraining as a user runs it, and the jobs, in one report.
#
#   scripts/gpu_check.sh [REPORT.md]              # default outputs/gpu_check/report.md; at most 9.5 minutes on an H100/H200
#   scripts/gpu_check.sh --dry-run [REPORT.md]    # every stage on CPU with tiny models and a few steps (no GPU needed)
#
# GPU_CHECK_SECONDS (default 570; a dry run 5 times that) bounds the whole check: a stage gets at most what is left. GPU_CHECK_WORK
# (default the report's folder) receives each stage's log and the trained models. GPU_CHECK_STAGES names the
# stages to run (default: tests base pretrain feed bench families; finetune on request);
# GPU_CHECK_PRETRAIN_MINUTES the mini job's pretraining budget (default 0.75).
#
# Needs python with a CUDA build of torch, transformers and accelerate, and no network: the other dependencies
# come as wheels from $MLM_SUITE_WHEELS, the data from $MLM_SUITE_CACHE and bert-base-uncased's vocabulary from
# $MLM_SUITE_TOKENIZER (default .gpu/wheels, .gpu/cache and .gpu/tokenizer, which scripts/gpu_bundle.sh fills on a
# machine with network). The wheels go into a scratch folder on PYTHONPATH and mlm_suite is installed editable
# without dependencies, so the machine's own torch stays. A dry run uses the current environment as it is.
#
# Stages (each has a time limit; a failed stage is reported and the next one still runs):
#   1. tests      the CUDA tests (varlen vs the padded grid and HF BERT, no host synchronisation, packed
#                 documents kept apart, sliding-window layers) and the device tests
#   2. base       benchmarks/bench_pretrain_base.py: BERT-base pretraining, rows of 16..128 tokens, bf16, batch 512:
#                 the job with --torch_compile, with token-budget batches, and with them under CUDA graphs
#                 (reduce-overhead); each job's tokens/s against the bare step on the same batches and against a
#                 run_mlm-style HF BertForMaskedLM Trainer job on the same rows, and the tokens/s and MFU the job
#                 reports against the benchmark's own measurement
#   3. pretrain   the mini job: mlm-suite pretrain for 45 s with the job's GPU defaults (mini preset, 128 rows of
#                 128 tokens, bf16): training rows, steady rows/s, held-out [MASK] accuracy
#   4. finetune   (on request) mlm-suite finetune-cls from that model: test accuracy and steady rows/s
#   5. feed       benchmarks/bench_job_throughput.py --device cuda: collator rows/s on this machine's CPU, and
#                 the mini pretraining, finetune-cls and finetune-ner jobs' steady step rate against a bare loop
#   6. bench      benchmarks/bench_speed.py --device cuda --compile --profile: the BERT-base MLM model step, lengths
#                 16..128, batch 512 (HF BERT vs mlm_suite padded, flattened, flattened + compiled), its share of the
#                 measured bf16 GEMM peak, and where the compiled step's device time goes
#   7. families   benchmarks/bench_speed.py --device cuda --families: each converted family's step against
#                 transformers' own masked LM of it (RoBERTa, DistilBERT, ELECTRA, ModernBERT)
set -uo pipefail
cd "$(dirname "$0")/.."
dry_run=0 slowdown=1
if [ "${1:-}" = "--dry-run" ]; then
    dry_run=1
    slowdown=5  # time limits are sized for the GPU machine; a shared CPU runs the stages far slower
    shift
fi
report=${1:-outputs/gpu_check/report.md}
work=${GPU_CHECK_WORK:-$(dirname "$report")}  # logs and the trained models
deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-$((570 * slowdown))}))  # stages are cut short to end by then
stages=${GPU_CHECK_STAGES:-tests base pretrain feed bench families}  # a rerun can pick some
pretrain_minutes=${GPU_CHECK_PRETRAIN_MINUTES:-0.75}
mkdir -p "$work" "$(dirname "$report")"
wheels=${MLM_SUITE_WHEELS:-.gpu/wheels}
tokenizer=${MLM_SUITE_TOKENIZER:-.gpu/tokenizer}
export MLM_SUITE_CACHE=${MLM_SUITE_CACHE:-$PWD/.gpu/cache}
# No network there: the tests must not fetch the registry material the full suite reads (tests/conftest.py).
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false MLM_SUITE_TEST_PREFETCH=0
python=${PYTHON:-python3}

# ---- set-up ---------------------------------------------------------------------------------------------
# What differs in a dry run: the device, the model sizes and the number of steps.
if [ "$dry_run" -eq 1 ]; then
    device_flags=(--use_cpu true)
    mini_job=(--config_overrides num_hidden_layers=2,hidden_size=64,num_attention_heads=2,intermediate_size=128
              --per_device_train_batch_size 16 --max_seq_length 64)
    finetune_flags=(--max_steps 5 --max_predict_samples 64)
    base_flags=(--quick --tokenizer "$tokenizer")
    feed_flags=(--device cpu --quick)
    bench_flags=(--quick --no-modernbert --workloads mlm-var --compile eager)
    families_flags=(--quick --families roberta modernbert)
    pretrain_minutes=0.1
else
    device_flags=(--bf16 true)
    mini_job=(--config_preset mini --per_device_train_batch_size 128 --max_seq_length 128)
    finetune_flags=()
    base_flags=(--batch_sizes 512 --runs compile budget graphs --steps 40 --warmup 8 --tokenizer "$tokenizer")
    feed_flags=(--device cuda --steps 100)
    bench_flags=(--device cuda --compile --no-modernbert --workloads mlm-base-var --batch_size 512 --reps 5 --warmup 2)
    families_flags=(--device cuda --families roberta distilbert electra modernbert --reps 5 --warmup 2)
    if ! $python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
        echo "gpu_check: $python's torch sees no CUDA device (scripts/gpu_check.sh --dry-run runs on CPU)" >&2
        exit 2
    fi
    if ! $python -c "import datasets, evaluate, seqeval, torchdata, pytest" 2>/dev/null; then
        scratch=$(mktemp -d)
        $python -m pip install -q --no-index --no-deps --target "$scratch" "$wheels"/*.whl || exit 1
        export PYTHONPATH="$scratch${PYTHONPATH:+:$PYTHONPATH}"
    fi
    # Installed, not run from the source tree: the model-card templates are package data of the installed package.
    $python -m pip install -q --no-deps --no-build-isolation -e . || exit 1
fi

failures=0
: >"$work/stages.txt"
selected() { case " $stages " in *" $1 "*) return 0 ;; esac; return 1; }
# section STAGE TITLE: the report's heading of a stage that runs
section() { if selected "$1"; then printf '\n## %s\n\n' "$2" >>"$report"; fi; }
# run NAME SECONDS COMMAND...: the command's output goes to $work/NAME.log; a failure is counted and shown.
run() {
    local name=$1 limit=$2
    shift 2
    local started=$SECONDS
    selected "$name" || return 1
    limit=$((limit * slowdown))
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
device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (dry run)"
print(f"{device} · torch {torch.__version__} (CUDA {torch.version.cuda}) · transformers "
      f"{transformers.__version__} · accelerate {accelerate.__version__} · Python {platform.python_version()} · "
      f"mlm_suite at {commit or 'an uncommitted tree'}")
EOF
} >"$report"

# ---- 1. tests -----------------------------------------------------------------------------------------------
section tests "CUDA tests"
if run tests 60 $python -m pytest -q -p no:cacheprovider tests/model/test_layout.py tests/model/test_attention.py tests/model/test_devices.py -k "cuda or test_devices"; then
    echo "\`pytest tests/model/test_layout.py tests/model/test_attention.py tests/model/test_devices.py -k 'cuda or test_devices'\`: $(tail -n 1 "$work/tests.log")" >>"$report"
fi

# ---- 2. BERT-base pretraining: the job against its bare step and an HF Trainer job ---------------------------
section base "BERT-base pretraining, rows of 16..128 tokens, bf16 (bench_pretrain_base.py)"
if run base 220 $python benchmarks/bench_pretrain_base.py "${base_flags[@]}" --markdown "$work/base.md"; then
    cat "$work/base.md" >>"$report"
fi

# ---- 3. the mini job with the job's GPU defaults ---------------------------------------------------------------
section pretrain "pretrain: $pretrain_minutes min, mini preset, 128 rows x 128 tokens, bf16, the job's GPU defaults"
if run pretrain 75 $python -m mlm_suite.jobs.pretrain --output_dir "$work/pretrain" "${mini_job[@]}" "${device_flags[@]}" \
    --max_train_minutes "$pretrain_minutes" --max_eval_samples 1024 --fill_mask_probes 4 --disable_tqdm true; then
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

# ---- 4. fine-tuning ------------------------------------------------------------------------------------------
section finetune "finetune-cls: sentiment, from that model, bf16"
if run finetune 60 $python -m mlm_suite.jobs.finetune_cls --model_name_or_path "$work/pretrain" \
    --output_dir "$work/finetune_cls" "${device_flags[@]}" "${finetune_flags[@]}" --disable_tqdm true; then
    $python - "$work/finetune_cls" >>"$report" <<'EOF'
import json, sys
results = json.load(open(f"{sys.argv[1]}/all_results.json"))
print(f"- test accuracy {results.get('test_accuracy', float('nan')):.4f}, validation {results.get('eval_accuracy', float('nan')):.4f}")
print(f"- steady {results.get('train_steady_samples_per_second', 0):,.0f} rows/s; {results.get('train_runtime', 0):.0f} s of training")
EOF
fi

# ---- 5. feeding the GPU: the mini job, finetune-cls and finetune-ner against a bare loop ------------------------
section feed "Feeding the GPU (bench_job_throughput.py)"
if run feed 90 $python benchmarks/bench_job_throughput.py "${feed_flags[@]}" \
    --finetune_model "$work/pretrain" --markdown "$work/feed.md"; then
    cat "$work/feed.md" >>"$report"
fi

# ---- 6. the model step against HF BERT, its share of the GEMM peak, and its profile -----------------------------
section bench "Model step: BERT-base MLM, bf16, lengths 16..128, batch 512 (bench_speed.py --compile --profile)"
if run bench 90 $python benchmarks/bench_speed.py "${bench_flags[@]}" --profile --markdown "$work/bench.md"; then
    cat "$work/bench.md" >>"$report"
    echo >>"$report"
fi

# ---- 7. converted families against transformers' own classes ----------------------------------------------------
section families "Converted families against transformers' own masked LMs (bench_speed.py --families)"
if run families 90 $python benchmarks/bench_speed.py "${families_flags[@]}" --markdown "$work/families.md"; then
    cat "$work/families.md" >>"$report"
    echo >>"$report"
fi

printf '\nStages: %s\n' "$(paste -sd ';' "$work/stages.txt" | sed 's/;/; /g')" >>"$report"
rm -f "$work/stages.txt"
echo "report: $report ($failures failed stage(s))"
exit $((failures > 0))
