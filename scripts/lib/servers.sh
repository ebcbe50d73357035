# Sourced by the peer benchmarks: a free loopback port, and waiting for an
# OpenAI-compatible server to answer /health and /v1/models.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { # url, pid
  for _ in $(seq 600); do
    curl -sf "$1/health" >/dev/null 2>&1 && curl -sf "$1/v1/models" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "server exited" >&2; return 1; }
    sleep 0.2
  done
  echo "server not ready" >&2; return 1
}
