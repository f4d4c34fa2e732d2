#!/usr/bin/env bash
# PyTorch 2.x beside qkv on a Debian 12 machine, for bench/compare_torch.py.
#
# Debian 12 packages PyTorch 1.13, which has neither SDPA for training nor a
# fused CPU AdamW, while the speed targets are set against PyTorch 2.x's best
# eager path. Debian 13 packages 2.6 (oneDNN, AVX-512 kernels; its BLAS is the
# system's, here OpenBLAS 0.3.29). This puts Debian 13 in a chroot (from
# Debian's registry only: debootstrap, then apt inside) and a wrapper,
# /usr/local/bin/qkv-host, that runs this checkout's Release qkv back in the
# host's root, with the host's libraries. A measuring instrument only:
# nothing in qkv's build or tests uses it.
#
#   sudo bench/torch2_chroot.sh [DIR]        # default DIR /opt/trixie; about 1 minute, 1.3 GB
#   chroot DIR python3 /host$PWD/bench/compare_torch.py --qkv /usr/local/bin/qkv-host \
#       --configs tiny,small,mini --threads 1,2 --rounds 5
#
# Running again skips what is done. The mounts (DIR/proc, DIR/dev, and the
# host's root at DIR/host) last until reboot; `umount -R DIR/host DIR/proc
# DIR/dev` removes them. Never delete DIR while they stand: DIR/host is the
# whole machine.
set -euo pipefail
dir=${1:-/opt/trixie}
top=$(cd "$(dirname "$0")/.." && pwd)
qkv="$top/build/release/examples/cli/qkv"
[ "$(id -u)" = 0 ] || { echo "torch2_chroot.sh: run as root (debootstrap, mount and chroot need it)" >&2; exit 1; }
[ -x "$qkv" ] || { echo "torch2_chroot.sh: build qkv first ($qkv is missing; ./qkv.sh train builds it)" >&2; exit 1; }

command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
if [ ! -x "$dir/usr/bin/apt-get" ]; then
  echo "torch2_chroot.sh: Debian 13 (trixie) into $dir"
  debootstrap --variant=minbase trixie "$dir" http://deb.debian.org/debian >/dev/null
fi
mountpoint -q "$dir/proc" || mount --bind /proc "$dir/proc"
mountpoint -q "$dir/dev" || mount --rbind /dev "$dir/dev"  # with /dev/pts, which apt wants
mkdir -p "$dir/host"
mountpoint -q "$dir/host" || mount --rbind / "$dir/host"
if ! chroot "$dir" python3 -c 'import torch' 2>/dev/null; then
  echo "torch2_chroot.sh: python3-torch and OpenBLAS (OpenMP) inside"
  # Without libopenblas0-openmp, torch's BLAS is the reference libblas3: 10x slower products.
  chroot "$dir" bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends python3-torch python3-numpy libopenblas0-openmp >/dev/null'
fi
# qkv re-executes itself through /proc/self/exe, so it runs in the host's root rather than under the
# chroot's loader: its libraries (OpenBLAS 0.3.21, libgomp) are then exactly those of a normal run.
cat >"$dir/usr/local/bin/qkv-host" <<EOF
#!/bin/sh
exec chroot /host "$qkv" "\$@"
EOF
chmod +x "$dir/usr/local/bin/qkv-host"
chroot "$dir" python3 -c 'import torch; print("torch", torch.__version__, "with", torch.backends.mkldnn.is_available() and "oneDNN" or "no oneDNN")'
chroot "$dir" qkv-host info --system | sed -n 's/^ *kernels */qkv: /p'
echo "torch2_chroot.sh: ready: chroot $dir python3 /host$top/bench/compare_torch.py --qkv /usr/local/bin/qkv-host"
