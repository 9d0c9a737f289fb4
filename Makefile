# Convenience targets; each runs a command documented in README.md or docs/.
PYTHON ?= python

.PHONY: install test test-fast test-lowest pretrain finetune-ner finetune-cls finetune-pair finetune-retrieval wsd anisotropy bench bench-job-throughput bench-budget bench-pretrain-to-task bench-pretrain-controls bench-label-efficiency diagnose-transfer bench-retrieval quickstart docs-figures gpu-check

install:
	pip install torch==2.13.0
	pip install -e ".[dev]"

test:
	$(PYTHON) -m pytest -q

test-fast:
	$(PYTHON) -m pytest -q -m "not slow"

test-lowest:
	scripts/test_lowest_versions.sh

quickstart:
	mlm-suite quickstart --output_dir outputs/quickstart

pretrain:
	mlm-suite pretrain --output_dir outputs/pretrain

finetune-ner:
	mlm-suite finetune-ner --output_dir outputs/ner

finetune-cls:
	mlm-suite finetune-cls --output_dir outputs/sentiment

finetune-pair:
	mlm-suite finetune-pair --output_dir outputs/coherence

finetune-retrieval:
	mlm-suite finetune-retrieval --output_dir outputs/retrieval

wsd:
	mlm-suite wsd --output_dir outputs/wsd

anisotropy:
	mlm-suite anisotropy --output_dir outputs/anisotropy

bench:
	$(PYTHON) benchmarks/bench_speed.py --compile

bench-job-throughput:
	$(PYTHON) benchmarks/bench_job_throughput.py --markdown outputs/bench_job_throughput/cpu.md

gpu-check:
	scripts/gpu_check.sh outputs/gpu_check/report.md

bench-budget:
	$(PYTHON) benchmarks/bench_budget.py --markdown outputs/bench_budget/table.md

bench-pretrain-to-task:
	$(PYTHON) benchmarks/bench_pretrain_to_task.py --markdown outputs/pretrain_to_task/table.md

bench-pretrain-controls:
	OMP_NUM_THREADS=1 $(PYTHON) benchmarks/bench_pretrain_controls.py --markdown outputs/pretrain_controls/table.md

bench-label-efficiency:
	$(PYTHON) benchmarks/bench_label_efficiency.py --markdown outputs/label_efficiency/table.md

diagnose-transfer:
	$(PYTHON) benchmarks/diagnose_transfer.py --model outputs/pretrain --markdown outputs/diagnose_transfer/table.md

bench-retrieval:
	$(PYTHON) benchmarks/bench_retrieval.py --seeds 0 1 2 --max_train_samples 10000 --threads 1 --rerank --markdown outputs/bench_retrieval/table.md

docs-figures:
	scripts/docs_figures.sh
