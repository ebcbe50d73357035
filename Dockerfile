# syntax=docker/dockerfile:1
# hasten in a container: `docker build -t hasten .` (or podman/buildah).
# The binary carries its default model, so the image serves with no volume:
#   docker run -p 8000:8000 hasten
# Runtime CPU detection picks the kernel tier on the host that runs it.

# --- build: the release binary, from the committed Cargo.lock -------------
FROM docker.io/library/rust:1.87-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p hasten \
 && install -D -m 0755 target/release/hasten /out/hasten

# --- runtime: Debian slim, the binary, a user without privileges ----------
FROM docker.io/library/debian:bookworm-slim AS runtime
RUN groupadd --system --gid 10001 hasten \
 && useradd --system --uid 10001 --gid hasten --home-dir /cache --create-home hasten
COPY --from=build /out/hasten /usr/local/bin/hasten
USER 10001:10001
ENV HOME=/cache HF_HOME=/cache/huggingface
WORKDIR /cache
EXPOSE 8000
# /health answers 200 while the process serves (/ready is for load
# balancers: 503 while loading and draining). Bash's /dev/tcp keeps curl
# out of the image.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["hasten"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
