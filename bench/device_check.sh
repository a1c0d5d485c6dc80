#!/usr/bin/env bash
# The CUDA backend's device check (issues 8, 34), for the lent GPU machine, which has the CUDA
# toolkit and driver but no Boost, spdlog, simdjson, UCX or GoogleTest. Everything is built here
# (on the CPU machine) and carried: the binaries, the shared libraries they load, and the default
# model in two parts (a call carries at most 64 MiB; the model is 94 MiB). The reference outputs
# (tests/reference/) and the scripts come with the working tree.
#
#   bench/device_check.sh --prepare [--mutants]   # here: the release build (CUDA for sm_80/90);
#                                        # --mutants also builds tests/mutants/gpu (build_gpu); fills
#                                        #   build-cuda/device_model  (model part A, ~60 MiB)
#                                        #   build-cuda/device_carry  (binaries, libs, part B)
#   run(command="bash bench/device_check.sh --stash", carry=["build-cuda/device_model"], timeout_s=60)
#   run(command="bash bench/device_check.sh", carry=["build-cuda/device_carry"], timeout_s=540)
#
# The second call must follow the first within the machine's idle release (~30 s), so that part
# A is still under /tmp; without it the check runs on dummy weights only and says so. Stages
# (each capped; the whole check targets 8 minutes):
#   1. cuda_backend_test: every test, with the per-type parity lines ([ parity ... ],
#      [ op by op ... ], [ round trip ... ]) collected into the table (240 s), and the FP8 KV
#      cache's four tests and lines ([ kv fp8 ], [ fp8 kv ... ]): all four passing is what lets
#      fp8_e4m3 into gpu/cuda_proven_types.cpp's kKvProofs; the same for the seven CudaGemma3
#      tests ([ gemma3 ... ]) and gemma3's row in kGraphProofs
#   2. server greedy parity: `troupe serve --backend cuda` on the real model
#      (TROUPE_CUDA_UNPROVEN_TYPES=allow: proving the types is the point), all reference prompts
#      at once, against llama.cpp's tokens (bench/device_server_parity.py; 90 s)
#   3. decode/prefill benchmark (cuda_decode_bench; 120 s)
#   4. compute-sanitizer memcheck on the op and upload tests, if there is time left (60 s)
#   5. the GPU mutants, when carried: each must fail its tests (90 s in all)
# Logs and the table land in $OUT (the device tool brings them back). Options: --no-sanitizer,
# --no-bench, --models LIST (cuda_decode_bench's; default "default,real").
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=build-cuda/device_carry
MODEL_A=build-cuda/device_model
MODEL_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
STASH=/tmp/troupe_device_model
OUT=${OUT:-/tmp/troupe_device_out}
SANITIZER=1 BENCH=1 MODELS=default,real

prepare() {
  set -e
  # The release build compiles the CUDA backend for sm_80 and sm_90 wherever nvcc exists.
  [ -x build/tests/cuda_backend_test ] && [ -x build/bench/cuda_decode_bench ] && [ -x build/bin/troupe ] ||
    ./scripts/build release
  rm -rf "$CARRY" "$MODEL_A"
  mkdir -p "$CARRY/bin" "$CARRY/lib" "$CARRY/fallback/include" "$CARRY/fallback/lib" "$MODEL_A"
  cp build/tests/cuda_backend_test build/bench/cuda_decode_bench build/bin/troupe "$CARRY/bin/"
  # Every shared library the binaries load, but the C/C++ runtime and CUDA's own (the device
  # machine has its driver's and toolkit's).
  for b in "$CARRY"/bin/*; do
    ldd "$b" | awk '/=> \//{print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcublas[^/]*|libcudart)\.so' |
    while read -r lib; do cp -L "$lib" "$CARRY/lib/"; done
  # For a build there (bench/cuda_standalone: tests and benchmark only) if these do not start.
  cp -r /usr/include/fmt /usr/include/gtest "$CARRY/fallback/include/"
  cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$CARRY/fallback/lib/"
  # The binaries compress several-fold; the model does not (quantized weights): two parts.
  tar -C "$CARRY" -cJf "$CARRY/binaries.tar.xz" bin lib fallback
  rm -rf "$CARRY/bin" "$CARRY/lib" "$CARRY/fallback"
  if [ -f "models/$MODEL_NAME" ]; then
    split -b 60M -d -a 1 "models/$MODEL_NAME" "$MODEL_A/part"
    mv "$MODEL_A/part1" "$CARRY/model_part1"
    sha256sum "models/$MODEL_NAME" | cut -d' ' -f1 >"$CARRY/model.sha256"
  fi
  du -sh "$CARRY" "$MODEL_A"
  echo "device_check: ready. Call the device tool twice, back to back (see this script's header)."
}

case "${1:-}" in
  --prepare)
    prepare || exit $?
    if [ "${2:-}" = --mutants ]; then
      tests/mutants/build_gpu && cp build-cuda/device_mutants.tar.xz "$CARRY/" && du -sh "$CARRY"
    fi
    exit $? ;;
  --stash)
    mkdir -p "$STASH" && cp "$MODEL_A/part0" "$STASH/part0" && ls -l "$STASH"
    exit $? ;;
esac
while [ $# -gt 0 ]; do
  case "$1" in
    --no-sanitizer) SANITIZER=0 ;;
    --no-bench) BENCH=0 ;;
    --models) MODELS=$2; shift ;;
    *) echo "device_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

mkdir -p "$OUT"
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[device_check +$(elapsed)s] $*"; }
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)
log "GPU: $GPU; nvcc: $(nvcc --version 2>&1 | tail -1)"

# 0. Binaries and the model.
WORK=/tmp/troupe_device_run
rm -rf "$WORK" && mkdir -p "$WORK"
tar -C "$WORK" -xJf "$CARRY/binaries.tar.xz" || { log "no carried binaries: run --prepare here first"; exit 2; }
CUBLAS_PIP=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$WORK/lib:/usr/local/cuda/lib64${CUBLAS_PIP:+:$CUBLAS_PIP}:${LD_LIBRARY_PATH:-}"
BIN=$WORK/bin
if ! "$BIN/cuda_backend_test" --gtest_list_tests >/dev/null 2>"$OUT/prebuilt_start.log"; then
  log "carried binaries do not start ($(head -2 "$OUT/prebuilt_start.log" | tr '\n' ' ')): building tests and benchmark here"
  GEN=""; command -v ninja >/dev/null && GEN="-G Ninja"
  timeout 300 cmake -S bench/cuda_standalone -B "$WORK/build" $GEN -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCARRY_DIR="$WORK/fallback" >"$OUT/build.log" 2>&1 &&
    timeout 300 cmake --build "$WORK/build" -j"$(nproc)" >>"$OUT/build.log" 2>&1 || tail -20 "$OUT/build.log"
  cp "$WORK/build/cuda_backend_test" "$WORK/build/cuda_decode_bench" "$BIN/" 2>/dev/null
fi
MODEL=""
if [ -f "$STASH/part0" ] && [ -f "$CARRY/model_part1" ]; then
  cat "$STASH/part0" "$CARRY/model_part1" >"$WORK/$MODEL_NAME"
  if [ "$(sha256sum "$WORK/$MODEL_NAME" | cut -d' ' -f1)" = "$(cat "$CARRY/model.sha256")" ]; then
    MODEL=$WORK/$MODEL_NAME
    export TROUPE_TEST_MODEL=$MODEL
  else
    log "assembled model's SHA-256 differs: real-model stages skipped"
  fi
else
  log "model part A not under $STASH (the --stash call did not precede this one): real-model stages skipped"
fi
log "model: ${MODEL:-none (dummy weights only)}"

# 1. Tests.
log "cuda_backend_test"
timeout 240 "$BIN/cuda_backend_test" --gtest_color=no >"$OUT/tests.log" 2>&1
rc=$?
passed=$(grep -c '^\[       OK \]' "$OUT/tests.log")
failed=$(grep -c '^\[  FAILED  \] [A-Za-z].*(' "$OUT/tests.log")
skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z].*(' "$OUT/tests.log")
TESTS="rc $rc: $passed passed, $failed failed, $skipped skipped$([ $rc = 124 ] && echo ' (TIMED OUT at 240 s)')"
grep -E '^\[  FAILED  \] [A-Za-z].*\(' "$OUT/tests.log" | head -20
log "tests: $TESTS"
fp8_ok=$(grep -cE '^\[       OK \] (CudaOps\.[A-Za-z]*Fp8|CudaBackend\.Fp8)' "$OUT/tests.log")
FP8="$fp8_ok of 4 FP8 KV tests passed"
# All seven passing is what lets gemma3 into gpu/cuda_proven_types.cpp's kGraphProofs.
gemma3_ok=$(grep -cE '^\[       OK \] CudaGemma3' "$OUT/tests.log")
GEMMA3="$gemma3_ok of 7 Gemma 3 graph tests passed ($(grep -c '^\[ gemma3 ' "$OUT/tests.log") parity lines)"

# 2. Server greedy parity on the real model, through the engine's real step loop.
SERVER="not run (no model)"
if [ -n "$MODEL" ] && [ -x "$BIN/troupe" ]; then
  log "troupe serve --backend cuda"
  TROUPE_CUDA_UNPROVEN_TYPES=allow "$BIN/troupe" serve --model "$MODEL" --backend cuda --port 18080 \
    --admin-socket "$WORK/admin.sock" >"$OUT/server.log" 2>&1 &
  server=$!
  up=0
  for _ in $(seq 1 120); do
    if python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:18080/health", timeout=2)' 2>/dev/null; then
      up=1; break
    fi
    kill -0 "$server" 2>/dev/null || break
    sleep 0.5
  done
  if [ $up = 1 ] && ! grep -q "CUDA backend on" "$OUT/server.log"; then
    SERVER="the server is not on the CUDA backend: $(grep -m1 -i 'backend' "$OUT/server.log")"
  elif [ $up = 1 ]; then
    timeout 90 python3 bench/device_server_parity.py \
      --url http://127.0.0.1:18080 --json "$OUT/server_parity.json" >"$OUT/server_parity.log" 2>&1
    SERVER="rc $?: $(grep 'server greedy parity' "$OUT/server_parity.log" | cut -d: -f2-)"
    cat "$OUT/server_parity.log"
  else
    SERVER="server did not start: $(tail -3 "$OUT/server.log" | tr '\n' ' ')"
  fi
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null
fi
log "server: $SERVER"

# 3. Benchmark.
if [ "$BENCH" = 1 ]; then
  log "cuda_decode_bench --models $MODELS"
  timeout 120 "$BIN/cuda_decode_bench" --models "$MODELS" --context 512 --steps 20 >"$OUT/bench.log" 2>&1
  log "benchmark rc $?"
fi

# 4. Sanitizer, with what time is left.
SAN="skipped"
if [ "$SANITIZER" = 1 ] && command -v compute-sanitizer >/dev/null && [ "$(elapsed)" -lt 400 ]; then
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/cuda_backend_test" --gtest_color=no \
    --gtest_filter='CudaOps.*:CudaBackend.Launch*:Types/CudaWeightRoundTrip.*/Q4_1_tied' >"$OUT/sanitizer.log" 2>&1
  rc=$?
  SAN="rc $rc$([ $rc = 0 ] && echo ' (clean)')$([ $rc = 124 ] && echo ' (timed out)')"
fi

# 5. GPU mutants (tests/mutants/gpu): a corrected test must fail on the bug it names.
MUTANTS="not carried"
if [ -f "$CARRY/device_mutants.tar.xz" ]; then
  mkdir -p "$WORK/mutants" && tar -C "$WORK/mutants" -xJf "$CARRY/device_mutants.tar.xz"
  killed=0 total=0 survivors=""
  deadline=$(( $(elapsed) + 90 ))
  for dir in "$WORK"/mutants/*/; do
    name=$(basename "$dir")
    [ "$(elapsed)" -lt "$deadline" ] || { survivors="$survivors $name(not run: time)"; continue; }
    total=$((total + 1))
    if BIN="$dir/cuda_backend_test" timeout 60 bash -c "$(cat "$dir/test")" >"$OUT/mutant_$name.log" 2>&1; then
      survivors="$survivors $name"
    else
      killed=$((killed + 1))
    fi
  done
  MUTANTS="$killed of $total killed${survivors:+; SURVIVED:$survivors}"
fi

{
  echo "=== troupe CUDA device check, $(date -u +%Y-%m-%dT%H:%MZ), $(elapsed) s ==="
  echo "GPU:        $GPU"
  echo "model:      ${MODEL:-none}"
  echo "tests:      $TESTS"
  echo "server:     $SERVER"
  echo "sanitizer:  $SAN"
  echo "mutants:    $MUTANTS"
  echo "fp8 kv:     $FP8"
  echo "gemma3:     $GEMMA3"
  grep -E '^\[ (kv fp8|fp8 kv) ' "$OUT/tests.log" | sed 's/^/  /'
  echo "per type (device: GPU vs CPU on the F16 copy; noise: CPU vs its F16 copy; GPU vs CPU):"
  grep -E '^\[ (parity|op by op|round trip) ' "$OUT/tests.log" | sed 's/^/  /'
  grep '^|' "$OUT/bench.log" 2>/dev/null || echo "benchmark:  no table"
} | tee "$OUT/summary.txt"
