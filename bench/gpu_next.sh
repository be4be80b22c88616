#!/usr/bin/env bash
# The one call for the next lent GPU machine (H100 or H200; ~430 s expected, at most TOTAL=520 s): what could
# close issue #13's MFU gap at 512 tokens (bench/README.md, "Where the time goes at 512 tokens"), against the
# trainer's defaults (graphs, --gpu-warmup, --weight-copies) and HF. Most important first:
#   a   the GPU-only tests, full log ($OUT/gpu_tests.log) under -X faulthandler: among them --varlen-attention's
#       (the real flash kernel against SDPA, fresh dropout masks at every replay, captured training steps); the
#       compiled layers' tests come later (a2: their compiles take longer)
#   c   bench/gpu.py, BERT-base IMDB @512: ftcli_copies (the defaults), ftcli_varlen (--varlen-attention) and hf
#       once (~75 s on an H100), then the profile of 32 full 512-token rows (~6 s a mode, plus each compile):
#       copies, compiled (the layers torch.compile'd inside the
#       captured step: one compile of one layer's code; its time in the warm-up seconds), varlen,
#       compiled+varlen (the flash call left out of the trace), shared (--shared-casts), unmasked
#       (--unmask-full-batches) ($OUT/cases_results.json, cases_console.log, profile.txt)
#   b   bench/gpu_kernels.py --parts attention: attention at 512, 320, 128 and 32 tokens under every masking
#       torch offers (SDPA backends, varlen_attn with seqused_k, packed, --varlen-attention's call; with and
#       without dropout)
#       ($OUT/kernels.json, kernels_console.log; its compile part is left out: the compiled profile mode is the
#       trainer's own compiled step)
#   a2  the compiled layers' GPU tests (inductor's dropout at every replay; compiled and compiled+varlen captured
#       training against the plain captured run), appended to $OUT/gpu_tests.log
#   c2  bench/gpu.py, MiniLM SST-2 (real weights: the accuracy check): ftcli_copies, ftcli_varlen and ftcli_shared,
#       if time is left
#       (its table and notes go into the summary)
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
TOTAL=${TOTAL:-520}
mkdir -p "$OUT" "$DETAIL"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
DRY=() KDRY=()
T_A=60 T_A2=60 T_B=70 C_MIN=120 C_MAX=270 C2_MIN=50
PROFILES=copies,compiled,varlen,compiled+varlen,shared,unmasked  # most telling first: a cut keeps them
if [ "${GPU_NEXT_CPU_DRY:-0}" = 1 ]; then
  DRY=(--device cpu --rows 96 --tiny-bert) KDRY=(--device cpu --small --reps 3)
  TOTAL=${DRY_TOTAL:-2300} T_A=400 T_A2=400 T_B=400 C_MIN=300 C_MAX=900 C2_MIN=200
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
    tests/trainer/test_cuda_graphs.py tests/trainer/test_tasks.py tests/trainer/test_model.py \
    -k "(gpu or cuda) and not (test_compiled_dropout or test_compiled_layers_in_gpu)" > "$OUT/gpu_tests.log" 2>&1
  echo "pytest exit status $? (124: its ${t} s limit; 134/139: abort/segfault; the log names the last test begun)"
  grep -E "FAILED|ERROR|Fatal Python error|Segmentation|Aborted|Timeout|^E " "$OUT/gpu_tests.log" | head -30
  tail -1 "$OUT/gpu_tests.log"

  t=$(( $(left) - 15 - T_B ))
  [ "$t" -gt "$C_MAX" ] && t=$C_MAX
  if [ "$t" -ge "$C_MIN" ]; then
    part "c: BERT-base IMDB @512, ftcli_copies / ftcli_varlen / hf once, profile $PROFILES; ${t} s"
    timeout -k 5 $((t + 10)) python3 bench/gpu.py --assets .gpu --out "$DETAIL/cases" --work "$WORK" \
      --budget "$t" --cases bert_imdb_512 --contenders ftcli_copies,ftcli_varlen,hf --skip-check \
      --profile-modes "$PROFILES" ${DRY[@]+"${DRY[@]}"} > "$OUT/cases_console.log" 2>&1
    echo "bench/gpu.py exit status $?"
    grep "^\[" "$OUT/cases_console.log" | tail -8
  else
    part "c: skipped, $(left) s left (needs $((C_MIN + 15 + T_B)))"
  fi

  part "b: attention kernels at 512, 320, 128 and 32 tokens ($OUT/kernels.json)"
  t=$(lim "$T_B" 15)
  PYTHONPATH="${PYTHONPATH:-}:src" timeout -k 5 "$t" python3 bench/gpu_kernels.py --assets .gpu --out "$OUT/kernels.json" \
    --parts attention ${KDRY[@]+"${KDRY[@]}"} > "$OUT/kernels_console.log" 2>&1
  echo "bench/gpu_kernels.py exit status $?"
  grep -E "^(attention|compile) \|" "$OUT/kernels_console.log" | tail -40

  t=$(lim "$T_A2" $((C2_MIN + 12)))
  if [ "$t" -ge 20 ]; then
    part "a2: the compiled layers' GPU tests (appended to $OUT/gpu_tests.log); ${t} s"
    PYTHONPATH="${PYTHONPATH:-}:src:." timeout -s ABRT -k 5 "$t" python3 -X faulthandler -m pytest -v \
      -p no:cacheprovider -rs --durations=4 -o faulthandler_timeout=45 tests/trainer/test_cuda_graphs.py \
      -k "test_compiled_dropout or test_compiled_layers_in_gpu" > "$DETAIL/gpu_tests_compiled.log" 2>&1
    echo "pytest exit status $? (124: its ${t} s limit; 134/139: abort/segfault)"
    grep -E "FAILED|ERROR|Fatal Python error|Segmentation|Aborted|Timeout|^E " "$DETAIL/gpu_tests_compiled.log" | head -20
    tail -1 "$DETAIL/gpu_tests_compiled.log"
    { echo; echo "== a2: the compiled layers' GPU tests"; cat "$DETAIL/gpu_tests_compiled.log"; } >> "$OUT/gpu_tests.log"
  else
    part "a2: skipped, $(left) s left"
  fi

  budget=$(( $(left) - 12 ))
  if [ "$budget" -ge "$C2_MIN" ]; then
    part "c2: MiniLM SST-2, ftcli_copies / ftcli_varlen / ftcli_shared once; ${budget} s"
    timeout -k 5 $((budget + 8)) python3 bench/gpu.py --assets .gpu --out "$DETAIL/minilm" --work "$WORK" \
      --budget "$budget" --cases minilm_sst2_128 --contenders ftcli_copies,ftcli_varlen,ftcli_shared --skip-check \
      --skip-profile ${DRY[@]+"${DRY[@]}"} > "$DETAIL/minilm_console.log" 2>&1
    echo "bench/gpu.py exit status $?"
    grep "^\[" "$DETAIL/minilm_console.log" | tail -4
  else
    part "c2: skipped, $(left) s left (needs $((C2_MIN + 12)))"
  fi

  part "d: summary"
  {
    echo "GPU tests: $(grep -E '^=+ .*(passed|failed|error).* =+$' "$OUT/gpu_tests.log" | head -1)"
    echo "compiled layers' GPU tests: $(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' \
      "$DETAIL/gpu_tests_compiled.log" 2>/dev/null | tail -1)"
    grep -E "FAILED|ERROR|Fatal Python error" "$OUT/gpu_tests.log" | head -8
    echo; grep -E "^## |^(attention|compile) \|" "$OUT/kernels_console.log" 2>/dev/null
    [ -f "$DETAIL/cases/table.md" ] && { echo; cat "$DETAIL/cases/table.md"; }
    [ -f "$DETAIL/cases/profile.txt" ] && { echo; grep -E "^==|^time by kind|^-- " "$DETAIL/cases/profile.txt"; }
    [ -f "$DETAIL/minilm/table.md" ] && { echo; cat "$DETAIL/minilm/table.md"; }
  } 2>&1 | tee "$OUT/summary.txt"
  # at most 8 files come back: these 2 beside console, gpu_tests, kernels(.json, _console), cases_console, summary
  [ -f "$DETAIL/cases/results.json" ] && cp "$DETAIL/cases/results.json" "$OUT/cases_results.json"
  [ -f "$DETAIL/cases/profile.txt" ] && cp "$DETAIL/cases/profile.txt" "$OUT/profile.txt"
  echo "== [$SECONDS s] done; everything under $OUT"
} 2>&1 | tee "$OUT/console.log"
