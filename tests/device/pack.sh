#!/usr/bin/env bash
# Run in the project's root on your own machine before a call to the device
# machine (DEVELOPERS.md): the workplace's ../shared/device/pack.sh puts
# Debian's build dependencies into .device/ (git ignores it), and this adds
# the two its list lacks, the page libraries examples/CMakeLists.txt inlines
# into qkv (libjs-dygraphs, python3-xstatic-dagre: files only). Without them
# the build does not configure there. on-device.sh and tests/cuda/on_gpu.sh
# unpack every .deb in .device/debs, so nothing else changes. Then call the
# device tool's run with carry [".device"] and
#     bash tests/device/xeon.sh check | speed          (the Xeon: issue 19)
#     bash tests/cuda/on_gpu.sh test | sanitize | race | bench   (the GPU machine)
# With 15 minutes of device time a task (all its calls and starts together),
# one task fits `on_gpu.sh test` (which also runs the CPU's checks of
# xeon.sh, on the GPU machine's own 16 cores) and then at most one short call.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
bash "$top/../shared/device/pack.sh"
cd .device/debs
for p in libjs-dygraphs python3-xstatic-dagre; do
  ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -qq "$p" 2>&1 | grep -v "unsandboxed" || true
  ls "${p}"_*.deb >/dev/null 2>&1 || { echo "pack.sh: could not download $p" >&2; exit 1; }
done
du -sh "$top/.device"
