#!/usr/bin/env bash
# Run the multi-process (accelerate launch, 2 gloo CPU processes) tests N times in a row and count
# passes and failures. A flake that shows up in one run out of four needs many consecutive green
# runs before it can be called fixed; one green pytest run proves little.
#
#   scripts/loop_distributed_tests.sh [N]      # N defaults to 20
#
# Every run's pytest output is kept in $LOG_DIR (default: a new temporary folder) as run_<i>.log.
# Each run is capped by `timeout`, so a hang counts as a failure (exit status 124) instead of
# stalling the loop. Exit status: 0 when every run passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${1:-20}
python=${PYTHON:-python}
log_dir=${LOG_DIR:-$(mktemp -d -t distributed-tests.XXXXXX)}
mkdir -p "$log_dir"
# One thread per process, as the tests' subprocesses use: the machines running this have few cores.
export OMP_NUM_THREADS=1
# Every test that starts a process group (tests.helpers.launch_two_processes, or warm_python.launch).
tests=(
    tests/e2e/test_distributed.py
    tests/training/test_trainer.py
    tests/training/test_checkpoint_format.py
    tests/test_cli.py::test_a_user_error_in_one_of_two_processes_ends_the_run_cleanly
    tests/conformance/test_training_semantics.py::test_two_processes_equal_one_process
)

passes=0
failures=0
for run in $(seq 1 "$runs"); do
    started=$SECONDS
    # -p no:randomly: the same order every run, so runs differ only in timing. The cap is longer than
    # the tests' own subprocess timeouts together, so it fires only if pytest itself hangs.
    timeout --kill-after=30 1800 "$python" -m pytest -q -n 0 -p no:randomly -p no:cacheprovider "${tests[@]}" \
        >"$log_dir/run_$run.log" 2>&1
    status=$?
    if (( status == 0 )); then
        passes=$((passes + 1))
        echo "run $run/$runs: passed in $((SECONDS - started)) s"
    else
        failures=$((failures + 1))
        echo "run $run/$runs: FAILED (exit status $status) in $((SECONDS - started)) s; see $log_dir/run_$run.log"
    fi
done
echo "$passes passed, $failures failed out of $runs runs (logs: $log_dir)"
(( failures == 0 ))
