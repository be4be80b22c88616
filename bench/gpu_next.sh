#!/usr/bin/env bash
# The one call for the next lent GPU machine (H100 or H200; ~330 s expected, at most TOTAL=390 s): does
# --weight-copies (bf16 copies of the Linear weights, no per-step casts) make the same run faster, and what does
# it do to BERT-base's MFU at 512 tokens? Most important first:
#   a   the GPU-only tests, full log ($OUT/gpu_tests.log) under -X faulthandler (the weight copies' bitwise test
#       on real captures is among them)
#   b   bench/gpu.py, MiniLM SST-2: check (graph path vs eager, prepare(), and --weight-copies vs the graph
#       path's casts, which must be bit-identical), then ftcli_warm, ftcli_copies, hf interleaved twice
#       ($OUT/minilm_results.json)
#   c   bench/gpu.py, BERT-base IMDB @512: ftcli_warm, ftcli_copies, hf once, then the profile of 32 full
#       512-token rows, graphs and copies ($OUT/imdb_results.json, imdb_profile.txt)
#   d   a summary ($OUT/summary.txt)
# From the repository root, with the git-ignored .gpu and .whl carried (python bench/prepare_gpu_assets.py):
#   bash bench/gpu_next.sh
#   GPU_NEXT_CPU_DRY=1 bash bench/gpu_next.sh    # on a CPU: the same plumbing, 96 rows, a 2-layer BERT
# (The previous question, --gpu-warmup, was answered by this script's earlier version on an H100: bench/README.md.)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ftcli-gpu-out}
WORK=${WORK:-/tmp/ftcli-gpu-bench}
DETAIL=${DETAIL:-/tmp/ftcli-gpu-detail}  # gpu.py's folders; only 8 chosen files go to $OUT (what comes back)
TOTAL=${TOTAL:-390}
mkdir -p "$OUT" "$DETAIL"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
DRY=()
T_A=60 B_BUDGET=190 C_MIN=100
if [ "${GPU_NEXT_CPU_DRY:-0}" = 1 ]; then
  DRY=(--device cpu --rows 96 --tiny-bert)
  TOTAL=${DRY_TOTAL:-1600} T_A=400 B_BUDGET=700 C_MIN=300
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
  t=$(lim "$T_A" $((B_BUDGET + C_MIN)))
  PYTHONPATH="${PYTHONPATH:-}:src:." timeout -s ABRT -k 5 "$t" python3 -X faulthandler -m pytest -v \
    -p no:cacheprovider -rs --durations=8 -o faulthandler_timeout=45 \
    tests/trainer/test_cuda_graphs.py tests/trainer/test_tasks.py -k "gpu or cuda" > "$OUT/gpu_tests.log" 2>&1
  echo "pytest exit status $? (124: its ${t} s limit; 134/139: abort/segfault; the log names the last test begun)"
  grep -E "FAILED|ERROR|Fatal Python error|Segmentation|Aborted|Timeout|^E " "$OUT/gpu_tests.log" | head -30
  tail -1 "$OUT/gpu_tests.log"

  part "b: MiniLM SST-2, ftcli_warm / ftcli_copies / hf interleaved x2 ($DETAIL/minilm)"
  t=$(lim "$B_BUDGET" $((C_MIN + 15)))
  timeout -k 5 $((t + 10)) python3 bench/gpu.py --assets .gpu --out "$DETAIL/minilm" --work "$WORK" \
    --budget "$t" --cases minilm_sst2_128 --contenders ftcli_warm,ftcli_copies,hf --repeat 2 \
    --skip-profile ${DRY[@]+"${DRY[@]}"} > "$OUT/minilm_console.log" 2>&1
  echo "bench/gpu.py exit status $?"
  grep "^\[" "$OUT/minilm_console.log" | tail -12

  budget=$(( $(left) - 15 ))
  part "c: BERT-base IMDB @512, ftcli_warm / ftcli_copies / hf once, profile graphs,copies; ${budget} s ($DETAIL/imdb)"
  timeout -k 5 $((budget + 10)) python3 bench/gpu.py --assets .gpu --out "$DETAIL/imdb" --work "$WORK" \
    --budget "$budget" --cases bert_imdb_512 --contenders ftcli_warm,ftcli_copies,hf --skip-check \
    --profile-modes graphs,copies ${DRY[@]+"${DRY[@]}"} > "$OUT/imdb_console.log" 2>&1
  echo "bench/gpu.py exit status $?"
  grep "^\[" "$OUT/imdb_console.log" | tail -8

  part "d: summary"
  {
    echo "GPU tests: $(grep -E '^=+ .*(passed|failed|error).* =+$' "$OUT/gpu_tests.log" | tail -1)"
    grep -E "FAILED|ERROR|Fatal Python error" "$OUT/gpu_tests.log" | head -8
    for t in minilm imdb; do
      [ -f "$DETAIL/$t/table.md" ] && { echo; cat "$DETAIL/$t/table.md"; }
    done
    [ -f "$DETAIL/imdb/profile.txt" ] && { echo; grep -E "^==|^time by kind" "$DETAIL/imdb/profile.txt"; }
  } 2>&1 | tee "$OUT/summary.txt"
  # what comes back is at most 8 files: these 3 beside console, gpu_tests, minilm_console, imdb_console, summary
  for t in minilm imdb; do [ -f "$DETAIL/$t/results.json" ] && cp "$DETAIL/$t/results.json" "$OUT/${t}_results.json"; done
  [ -f "$DETAIL/imdb/profile.txt" ] && cp "$DETAIL/imdb/profile.txt" "$OUT/imdb_profile.txt"
  echo "== [$SECONDS s] done; everything under $OUT"
} 2>&1 | tee "$OUT/console.log"
