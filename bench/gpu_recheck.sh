#!/usr/bin/env bash
# A short GPU re-check after changes to the graph path (about 5 minutes on an H200): the GPU-only tests
# (captured steps equal eager, fresh dropout at every replay, STS-B regression through the graph buffers), the
# MiniLM SST-2 comparison with the HF Trainer, and where the first steps' time goes (bench/gpu_warmup.py).
#   bash bench/gpu_recheck.sh          # with .gpu and .whl carried, as for gpu_device.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ftcli-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site
{
  echo "== GPU tests"
  PYTHONPATH="${PYTHONPATH:-}:src:." timeout 200 python3 -m pytest -q -p no:cacheprovider -rs \
    tests/trainer/test_cuda_graphs.py tests/trainer/test_tasks.py -k "gpu or cuda" 2>&1 | tail -25
  echo "== MiniLM SST-2 vs the HF Trainer"
  BUDGET=170 HARD_LIMIT=220 bash bench/gpu_device.sh --cases minilm_sst2_128 --skip-profile 2>&1 | tail -12
  echo "== the first steps"
  PYTHONPATH="${PYTHONPATH:-}:src" timeout 100 python3 bench/gpu_warmup.py --assets .gpu --work /tmp/ftcli-gpu-bench \
    --steps 80 --out "$OUT/warmup.json" 2>&1 | grep -v "^step \|^eval @" | tail -60
} 2>&1 | tee "$OUT/recheck.log"
