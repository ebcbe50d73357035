"""Starting `hasten serve` from a benchmark script: waits for its
"listening on" line, then keeps reading its stderr on a thread, so a
server that logs more than a pipe holds (64 KiB: a line per request over a
long run) never blocks on a full pipe, as the SDK tests' server once did."""
import subprocess
import threading


def start(bin_path, model, port, threads="2", env=None):
    """The `hasten serve` process on 127.0.0.1:`port`, once listening."""
    p = subprocess.Popen(
        [bin_path, "serve", "--model", model, "--port", str(port), "-t", str(threads)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    while True:
        line = p.stderr.readline()
        if not line:
            raise RuntimeError(f"hasten serve exited before listening (status {p.wait()})")
        if "listening on" in line:
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p
