#!/usr/bin/env bash
# The CUDA backend's device check (issue 8), in one call on the lent H200 machine: pick the
# binaries (prebuilt here and carried, else built there for sm_90 with bench/cuda_standalone,
# which needs only CUDA, a C++ compiler and the carried fmt/GoogleTest), run the CUDA tests,
# compute-sanitizer memcheck on the kernel tests when time allows, then the decode/prefill
# benchmark, and print a short table last. Logs go to $OUT (tests.log, sanitizer.log, bench.log).
#
# Prepare here (no GPU needed), then call the device tool's run from the repository root:
#   cmake --build build-cuda -j2 --target cuda_backend_test cuda_decode_bench
#   bench/device_check.sh --prepare          # fills build-cuda/device_carry (~7 MB)
#   run(command="bash bench/device_check.sh", carry=["build-cuda/device_carry"], timeout_s=540)
# Options: --build (ignore the carried binaries and build there), --no-sanitizer,
#          --models LIST (default: default,llama-3-8b; see bench/cuda_decode_bench.cpp).
# Stage caps with carried binaries: tests 180 s, memcheck 90 s (only if started before 150 s),
# benchmark 270 s; expected total well under that (not yet measured: no session has run it).
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=${TROUPE_DEVICE_CARRY:-build-cuda/device_carry}
OUT=${OUT:-/tmp/troupe_device_out}
mkdir -p "$OUT"
FORCE_BUILD=0 SANITIZER=1 MODELS=default,llama-3-8b
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare)
      mkdir -p "$CARRY/include" "$CARRY/lib" "$CARRY/bin"
      cp -r /usr/include/fmt /usr/include/gtest "$CARRY/include/"
      cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$CARRY/lib/"
      cp -L /lib/x86_64-linux-gnu/libfmt.so.9 "$CARRY/lib/"
      cp build-cuda/tests/cuda_backend_test build-cuda/bench/cuda_decode_bench "$CARRY/bin/"
      du -sh "$CARRY"
      exit 0 ;;
    --build) FORCE_BUILD=1 ;;
    --no-sanitizer) SANITIZER=0 ;;
    --models) MODELS=$2; shift ;;
    *) echo "device_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[device_check +$(elapsed)s] $*"; }

GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)
log "GPU: $GPU"
log "nvcc: $(nvcc --version 2>&1 | tail -1)"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tail -1

CUBLAS_PIP=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$PWD/$CARRY/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${CUBLAS_PIP:+:$CUBLAS_PIP}:${LD_LIBRARY_PATH:-}"

# 1. Binaries.
BUILD_MODE=""
TEST_BIN="$CARRY/bin/cuda_backend_test"
BENCH_BIN="$CARRY/bin/cuda_decode_bench"
if [ "$FORCE_BUILD" = 0 ] && [ -x "$TEST_BIN" ] && "$TEST_BIN" --gtest_list_tests >/dev/null 2>"$OUT/prebuilt_start.log"; then
  BUILD_MODE="carried prebuilt (archs 80;90)"
else
  [ "$FORCE_BUILD" = 0 ] && log "carried binaries do not start here: $(head -3 "$OUT/prebuilt_start.log" 2>/dev/null)"
  log "building bench/cuda_standalone for sm_90"
  GEN=""; command -v ninja >/dev/null && GEN="-G Ninja"
  if timeout 300 cmake -S bench/cuda_standalone -B build-device $GEN -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCARRY_DIR="$PWD/$CARRY" >"$OUT/build.log" 2>&1 &&
     timeout 300 cmake --build build-device -j"$(nproc)" >>"$OUT/build.log" 2>&1; then
    BUILD_MODE="built here for sm_90 in $(elapsed)s"
  else
    BUILD_MODE="BUILD FAILED"
    tail -40 "$OUT/build.log"
  fi
  TEST_BIN=build-device/cuda_backend_test
  BENCH_BIN=build-device/cuda_decode_bench
fi
log "binaries: $BUILD_MODE"
command -v cuobjdump >/dev/null && log "SASS in test binary: $(cuobjdump --list-elf "$TEST_BIN" 2>/dev/null | grep -o 'sm_[0-9a-z]*' | sort -u | tr '\n' ' ')"

# 2. Tests.
TESTS="not run"
if [ -x "$TEST_BIN" ]; then
  log "running $TEST_BIN"
  timeout 180 "$TEST_BIN" --gtest_color=no >"$OUT/tests.log" 2>&1
  rc=$?
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*\(|\] [0-9]+ rows,|^\[ kv \]|Failure|Which is|error' "$OUT/tests.log" | head -80
  passed=$(grep -c '^\[       OK \]' "$OUT/tests.log")
  failed=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$OUT/tests.log")
  skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z].*(' "$OUT/tests.log")
  TESTS="rc $rc: $passed passed, $((failed / 2)) failed, $skipped skipped"
  [ $rc = 124 ] && TESTS="$TESTS (TIMED OUT after 180 s)"
fi
log "tests: $TESTS"

# 3. compute-sanitizer memcheck on the kernel tests (out-of-bounds and misaligned accesses).
SAN="skipped"
if [ "$SANITIZER" = 1 ] && [ -x "$TEST_BIN" ] && command -v compute-sanitizer >/dev/null && [ "$(elapsed)" -lt 150 ]; then
  log "compute-sanitizer memcheck"
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$TEST_BIN" --gtest_color=no \
    --gtest_filter='CudaOps.*:CudaBackend.Launch*:Types/CudaLogits.MixedBatchesMatchCpuBackend/Q4_1' >"$OUT/sanitizer.log" 2>&1
  rc=$?
  SAN="rc $rc$( [ $rc = 0 ] && echo ' (clean)')$( [ $rc = 124 ] && echo ' (timed out)')"
  grep -E 'ERROR SUMMARY|Invalid|out of bounds' "$OUT/sanitizer.log" | head -10
fi
log "sanitizer: $SAN"

# 4. Benchmark.
if [ -x "$BENCH_BIN" ]; then
  log "benchmark: $MODELS"
  timeout 270 "$BENCH_BIN" --models "$MODELS" --context 512 --steps 20 >"$OUT/bench.log" 2>&1
  log "benchmark rc $?"
  grep -v '^|' "$OUT/bench.log" | tail -20
fi

echo
echo "=== troupe CUDA device check, $(date -u +%Y-%m-%dT%H:%MZ), $(elapsed) s ==="
echo "GPU:        $GPU"
echo "binaries:   $BUILD_MODE"
echo "tests:      $TESTS"
echo "sanitizer:  $SAN"
grep '^|' "$OUT/bench.log" 2>/dev/null || echo "benchmark:  no table (see $OUT/bench.log)"
