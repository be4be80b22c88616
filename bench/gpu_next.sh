#!/usr/bin/env bash
# The next call on a lent GPU machine (H100 or H200; ~330 s expected, at most TOTAL=440 s). The first call of
# 2026-11-26 (this script's earlier version, git 0eb6674) timed the IMDB case and the attention kernels, but its
# profile ran all modes in one process and every mode after the first failed ("Offset increment outside graph
# capture encountered unexpectedly"); bench/gpu.py now gives each mode a process of its own. This call measures
# what that left open, most important first:
#   c   the profile of 32 full 512-token rows, BERT-base, one child per mode: copies (the defaults), compiled (the
#       layers torch.compile'd inside the captured step; its compile in the warm-up seconds), varlen
#       (--varlen-attention), compiled+varlen, shared (--shared-casts), unmasked (--unmask-full-batches)
#       ($OUT/cases_results.json, profile.txt, cases_console.log)
#   a   the GPU tests the first call's time limit cut (tests/trainer/test_tasks.py, test_model.py) ($OUT/gpu_tests.log)
#   a2  the compiled+varlen captured-training GPU test, with the time its two compiles need (appended)
#   d   a summary ($OUT/summary.txt)
# From the repository root, with the git-ignored .gpu and .whl carried (python bench/prepare_gpu_assets.py):
#   bash bench/gpu_next.sh
#   GPU_NEXT_CPU_DRY=1 bash bench/gpu_next.sh    # on a CPU: the same plumbing, tiny shapes, a 2-layer BERT
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ftcli-gpu-out}
WORK=${WORK:-/tmp/ftcli-gpu-bench}
DETAIL=${DETAIL:-/tmp/ftcli-gpu-detail}
TOTAL=${TOTAL:-440}
mkdir -p "$OUT" "$DETAIL"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
DRY=()
T_A=60 T_A2=150 C_MAX=300 C_MIN=60
PROFILES=copies,compiled,varlen,compiled+varlen,shared,unmasked  # most telling first: a cut keeps them
if [ "${GPU_NEXT_CPU_DRY:-0}" = 1 ]; then
  DRY=(--device cpu --rows 96 --tiny-bert)
  TOTAL=${DRY_TOTAL:-1500} T_A=300 T_A2=400 C_MAX=700
fi
left() { echo $((TOTAL - SECONDS)); }
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
'| gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, '| transformers', t.__version__)"
  git log -1 --format='commit %h %s' 2>/dev/null || true

  t=$(( $(left) - T_A - T_A2 - 15 ))
  [ "$t" -gt "$C_MAX" ] && t=$C_MAX
  [ "$t" -lt "$C_MIN" ] && t=$C_MIN
  part "c: the profile at 512, one process a mode: $PROFILES; ${t} s"
  timeout -k 5 $((t + 10)) python3 bench/gpu.py --assets .gpu --out "$DETAIL/cases" --work "$WORK" \
    --budget "$t" --skip-cases --skip-check --profile-modes "$PROFILES" ${DRY[@]+"${DRY[@]}"} \
    > "$OUT/cases_console.log" 2>&1
  echo "bench/gpu.py exit status $?"
  grep "^\[\|^profile" "$OUT/cases_console.log" | tail -14

  t=$(( $(left) - T_A2 - 10 )); [ "$t" -gt "$T_A" ] && t=$T_A
  part "a: the GPU tests of test_tasks.py and test_model.py; ${t} s"
  PYTHONPATH="${PYTHONPATH:-}:src:." timeout -s ABRT -k 5 "$t" python3 -X faulthandler -m pytest -v \
    -p no:cacheprovider -rs --durations=6 -o faulthandler_timeout=50 \
    tests/trainer/test_tasks.py tests/trainer/test_model.py -k "gpu or cuda" > "$OUT/gpu_tests.log" 2>&1
  echo "pytest exit status $? (124: its ${t} s limit; 134/139: abort/segfault)"
  grep -E "FAILED|ERROR|Fatal Python error|Segmentation|Aborted|Timeout|^E " "$OUT/gpu_tests.log" | head -20
  tail -1 "$OUT/gpu_tests.log"

  t=$(( $(left) - 8 )); [ "$t" -gt "$T_A2" ] && t=$T_A2
  part "a2: compiled+varlen captured training against the plain captured run; ${t} s"
  PYTHONPATH="${PYTHONPATH:-}:src:." timeout -s ABRT -k 5 "$t" python3 -X faulthandler -m pytest -v \
    -p no:cacheprovider -rs --durations=4 -o faulthandler_timeout=$((t - 5)) tests/trainer/test_cuda_graphs.py \
    -k "test_compiled_layers_in_gpu and varlen" > "$DETAIL/gpu_tests_compiled.log" 2>&1
  echo "pytest exit status $? (124: its ${t} s limit; 134/139: abort/segfault)"
  grep -E "FAILED|ERROR|Fatal Python error|Segmentation|Aborted|Timeout|^E " "$DETAIL/gpu_tests_compiled.log" | head -20
  tail -1 "$DETAIL/gpu_tests_compiled.log"
  { echo; echo "== a2: compiled+varlen"; cat "$DETAIL/gpu_tests_compiled.log"; } >> "$OUT/gpu_tests.log"

  part "d: summary"
  {
    echo "GPU tests: $(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' "$OUT/gpu_tests.log" | head -1)"
    echo "compiled+varlen GPU test: $(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' \
      "$DETAIL/gpu_tests_compiled.log" 2>/dev/null | tail -1)"
    grep -E "FAILED|ERROR|Fatal Python error" "$OUT/gpu_tests.log" | head -8
    [ -f "$DETAIL/cases/table.md" ] && { echo; grep "^profile" "$DETAIL/cases/table.md"; }
    [ -f "$DETAIL/cases/profile.txt" ] && { echo; grep -E "^==|^time by kind|^-- " "$DETAIL/cases/profile.txt"; }
  } 2>&1 | tee "$OUT/summary.txt"
  [ -f "$DETAIL/cases/results.json" ] && cp "$DETAIL/cases/results.json" "$OUT/cases_results.json"
  [ -f "$DETAIL/cases/profile.txt" ] && cp "$DETAIL/cases/profile.txt" "$OUT/profile.txt"
  echo "== [$SECONDS s] done; everything under $OUT"
} 2>&1 | tee "$OUT/console.log"
