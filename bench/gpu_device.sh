#!/usr/bin/env bash
# The whole GPU benchmark as one command on a lent GPU machine (no network): from the repository root,
#   bash bench/gpu_device.sh                # writes under $OUT (default /tmp/ftcli-gpu-out); the table is printed last
# It needs the git-ignored .gpu/ (python bench/prepare_gpu_assets.py) carried along, and uses .whl/ when it is
# there (transformers 5.24, the version ftcli pins; the machine has 5.17). bench/gpu.py keeps to BUDGET seconds
# (default 330) by skipping what no longer fits; HARD_LIMIT (default 400) kills it whatever happens.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ftcli-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
{
  echo "== $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -2
  if [ ! -f .gpu/minilm/model.safetensors ]; then
    echo "no .gpu/ assets here: run python bench/prepare_gpu_assets.py and carry .gpu (and .whl)"; exit 2
  fi
  if compgen -G ".whl/*.whl" > /dev/null; then
    if timeout 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl; then
      export PYTHONPATH=/tmp/site
    else
      echo "wheel install failed: the machine's own transformers is used"
    fi
  fi
  python3 -c "import torch, transformers as t; print('torch', torch.__version__, '| cuda', torch.version.cuda, \
'| transformers', t.__version__, 'from', t.__file__.rsplit('/', 2)[0])"
  timeout -k 10 "${HARD_LIMIT:-400}" python3 bench/gpu.py --assets .gpu --out "$OUT" --budget "${BUDGET:-330}" "$@"
  echo "bench/gpu.py exit status $?"
} 2>&1 | tee "$OUT/console.log"
