#!/usr/bin/env bash
# Builds the comparison peer, llama.cpp's llama-server, from the llama-cpp-python sdist on PyPI
# (it carries the whole llama.cpp tree, tools/server included). Never part of CI: ~15 min on
# 2 cores. Usage: bench/build_peer.sh [native|parity]   (default native)
#   native  -DGGML_NATIVE=ON: the fastest build on this CPU, for speed comparisons
#   parity  AVX2 only: with `llama-server -fa off` its greedy tokens match troupe's
# Output: build-peer-<flavour>/bin/llama-server (ignored by git). The benches take it with
# --peer-bin or $TROUPE_BENCH_PEER_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour="${1:-native}"
version=0.3.36
src=build-peer-src
out="build-peer-${flavour}"
case "$flavour" in
  native) flags=(-DGGML_NATIVE=ON) ;;
  parity) flags=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF) ;;
  *) echo "usage: $0 [native|parity]" >&2; exit 2 ;;
esac
python=python3
[[ -x .venv/bin/python ]] && python=.venv/bin/python
if [[ ! -d "$src/llama_cpp_python-$version" ]]; then
  mkdir -p "$src"
  "$python" -m pip download --quiet --no-deps --no-binary :all: -d "$src" \
    "llama-cpp-python==$version"
  tar -xzf "$src/llama_cpp_python-$version.tar.gz" -C "$src"
fi
cmake -S "$src/llama_cpp_python-$version/vendor/llama.cpp" -B "$out" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  "${flags[@]}"
cmake --build "$out" -j"$(nproc)" --target llama-server
echo "peer: $out/bin/llama-server"
