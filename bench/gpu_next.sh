#!/usr/bin/env bash
# The one call for the next lent GPU machine (H100 or H200; ~330 s expected, at most TOTAL=390 s): what could
# close issue #13's MFU gap at 512 tokens (bench/README.md, "Where the time goes at 512 tokens"), and the table
# with the trainer's defaults (graphs, --gpu-warmup, --weight-copies) against HF. Most important first:
#   a   the GPU-only tests, full log ($OUT/gpu_tests.log) under -X faulthandler
#   b   bench/gpu_kernels.py: attention at 512 and 320 tokens under every masking torch offers (SDPA backends,
#       varlen with seqused_k, packed), and a whole BERT-base step captured in a CUDA graph, eager model
#       against torch.compile(model), with and without a padding mask ($OUT/kernels.json, kernels_console.log)
#   c   bench/gpu.py, BERT-base IMDB @512: ftcli_copies (the defaults), ftcli_unmasked (--unmask-full-batches)
#       and hf once, then the profile of 32 full 512-token rows, copies and unmasked, if the time is left
#       ($OUT/cases_results.json, cases_console.log, profile.txt)
#   d   a summary ($OUT/summary.txt)
# From the repository root, with the git-ignored .gpu and .whl carried (python bench/prepare_gpu_assets.py):
#   bash bench/gpu_next.sh
#   GPU_NEXT_CPU_DRY=1 bash bench/gpu_next.sh    # on a CPU: the same plumbing, tiny shapes, 96 rows, a 2-layer BERT
# (Earlier questions, answered on an H100 by this script's earlier versions: --gpu-warmup, --weight-copies.)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ftcli-gpu-out}
WORK=${WORK:-/tmp/ftcli-gpu-bench}
DETAIL=${DETAIL:-/tmp/ftcli-gpu-detail}  # gpu.py's folders; only 8 chosen files go to $OUT (what comes back)
TOTAL=${TOTAL:-390}
mkdir -p "$OUT" "$DETAIL"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
DRY=() KDRY=()
T_A=60 T_B=150 C_MIN=110
if [ "${GPU_NEXT_CPU_DRY:-0}" = 1 ]; then
  DRY=(--device cpu --rows 96 --tiny-bert) KDRY=(--device cpu --small --reps 3)
  TOTAL=${DRY_TOTAL:-1600} T_A=400 T_B=400 C_MIN=300
fi
left() { echo $((TOTAL - SECONDS)); }
lim() { # lim OWN RESERVE: OWN seconds, or less so that RESERVE seconds are left for what follows
  local l=$(( $(left) - $2 )); if [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}
part() { echo; echo "== [$SECONDS s] $*"; }

{
  part "start: $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs, budget ${TOTAL} s"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -2
  if [ ! -f .gpu/minilm/model.safetensors ]; then
    echo "no .gpu/ assets here: run python bench/prepare_gpu_assets.py and carry .gpu (and .whl)"; exit 2
  fi
  if [ "${GPU_NEXT_CPU_DRY:-0}" != 1 ] && compgen -G ".whl/*.whl" > /dev/null; then
    if timeout 40 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl; then
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    else
      echo "wheel install failed: the machine's own transformers is used"
    fi
  fi
  python3 -c "import torch, transformers as t; print('torch', torch.__version__, '| cuda', torch.version.cuda, \
'| gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, '| transformers', t.__version__, \
'from', t.__file__.rsplit('/', 2)[0])"
  git log -1 --format='commit %h %s' 2>/dev/null || true

  part "a: GPU tests (full log: $OUT/gpu_tests.log)"
  t=$(lim "$T_A" $((T_B + C_MIN)))
  PYTHONPATH="${PYTHONPATH:-}:src:." timeout -s ABRT -k 5 "$t" python3 -X faulthandler -m pytest -v \
    -p no:cacheprovider -rs --durations=8 -o faulthandler_timeout=45 \
    tests/trainer/test_cuda_graphs.py tests/trainer/test_tasks.py -k "gpu or cuda" > "$OUT/gpu_tests.log" 2>&1
  echo "pytest exit status $? (124: its ${t} s limit; 134/139: abort/segfault; the log names the last test begun)"
  grep -E "FAILED|ERROR|Fatal Python error|Segmentation|Aborted|Timeout|^E " "$OUT/gpu_tests.log" | head -30
  tail -1 "$OUT/gpu_tests.log"

  part "b: attention and compiled steps at 512 tokens ($OUT/kernels.json)"
  t=$(lim "$T_B" $((C_MIN + 15)))
  PYTHONPATH="${PYTHONPATH:-}:src" timeout -k 5 "$t" python3 bench/gpu_kernels.py --assets .gpu --out "$OUT/kernels.json" \
    ${KDRY[@]+"${KDRY[@]}"} > "$OUT/kernels_console.log" 2>&1
  echo "bench/gpu_kernels.py exit status $?"
  grep -E "^(attention|compile) \|" "$OUT/kernels_console.log" | tail -40

  budget=$(( $(left) - 15 ))
  if [ "$budget" -ge "$C_MIN" ]; then
    part "c: BERT-base IMDB @512, ftcli_copies / ftcli_unmasked / hf once, profile copies,unmasked; ${budget} s"
    timeout -k 5 $((budget + 10)) python3 bench/gpu.py --assets .gpu --out "$DETAIL/cases" --work "$WORK" \
      --budget "$budget" --cases bert_imdb_512 --contenders ftcli_copies,ftcli_unmasked,hf --skip-check \
      --profile-modes copies,unmasked ${DRY[@]+"${DRY[@]}"} > "$OUT/cases_console.log" 2>&1
    echo "bench/gpu.py exit status $?"
    grep "^\[" "$OUT/cases_console.log" | tail -8
  else
    part "c: skipped, $(left) s left (needs $((C_MIN + 15)))"
  fi

  part "d: summary"
  {
    echo "GPU tests: $(grep -E '^=+ .*(passed|failed|error).* =+$' "$OUT/gpu_tests.log" | tail -1)"
    grep -E "FAILED|ERROR|Fatal Python error" "$OUT/gpu_tests.log" | head -8
    echo; grep -E "^## |^(attention|compile) \|" "$OUT/kernels_console.log" 2>/dev/null
    [ -f "$DETAIL/cases/table.md" ] && { echo; cat "$DETAIL/cases/table.md"; }
    [ -f "$DETAIL/cases/profile.txt" ] && { echo; grep -E "^==|^time by kind" "$DETAIL/cases/profile.txt"; }
  } 2>&1 | tee "$OUT/summary.txt"
  # at most 8 files come back: these 2 beside console, gpu_tests, kernels(.json, _console), cases_console, summary
  [ -f "$DETAIL/cases/results.json" ] && cp "$DETAIL/cases/results.json" "$OUT/cases_results.json"
  [ -f "$DETAIL/cases/profile.txt" ] && cp "$DETAIL/cases/profile.txt" "$OUT/profile.txt"
  echo "== [$SECONDS s] done; everything under $OUT"
} 2>&1 | tee "$OUT/console.log"
