#!/usr/bin/env bash
# PyTorch 2.x beside qkv on a Debian 12 machine: runs bench/compare_torch.py
# against Debian 13's PyTorch, in a chroot.
#
# Debian 12 packages PyTorch 1.13, which has neither SDPA for training nor a
# fused CPU AdamW, while the speed targets are set against PyTorch 2.x's best
# eager path. Debian 13 packages 2.6 (oneDNN, AVX-512 kernels; its BLAS is the
# system's, here OpenBLAS 0.3.29). The first run puts Debian 13 into DIR
# (debootstrap, then apt inside: Debian's registry only; about a minute,
# 1.3 GB); every run then starts compare_torch.py there with ARGS, and
# compare_torch.py times this checkout's Release qkv, which runs back in the
# host's root with the host's libraries. A measuring instrument only: nothing
# in qkv's build or tests uses it.
#
#   sudo bench/torch2_chroot.sh [ARGS for compare_torch.py]
#   sudo bench/torch2_chroot.sh --configs tiny,small,mini --threads 1,2 --rounds 5
#   sudo bench/torch2_chroot.sh --configs gpt2 --baseline /path/to/older/qkv   (before and after, too)
#   sudo bench/torch2_chroot.sh --generate [--rounds 3]   (bench/compare_generate.py: sampling with a KV cache)
#
# DIR is $QKV_TORCH2_ROOT, default /opt/qkv-torch2. The mounts a run needs
# (the host's root at DIR/host, /proc, /dev) live in a mount namespace of
# the run's own, which does not pass mount events back to the host: they go
# when the run ends, and DIR is then a plain directory (rm -rf removes it).
set -euo pipefail
dir=${QKV_TORCH2_ROOT:-/opt/qkv-torch2}
top=$(cd "$(dirname "$0")/.." && pwd)
qkv="$top/build/release/qkv"
fail() {
  echo "torch2_chroot.sh: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || fail "run as root (debootstrap, mount and chroot need it)"
[ -x "$qkv" ] || fail "build qkv first ($qkv is missing; ./qkv.sh train builds it)"
case "$dir" in /*) ;; *) fail "QKV_TORCH2_ROOT must be an absolute path, not '$dir'" ;; esac
[ "$(realpath -m "$dir")" != / ] || fail "QKV_TORCH2_ROOT must not be /"
if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -e "$dir/.qkv-torch2" ]; then
  fail "$dir holds something else (no .qkv-torch2 in it): choose another QKV_TORCH2_ROOT"
fi

# Everything from here runs in a private mount namespace (unshare -m, slave propagation).
in_namespace() {
  unshare -m --propagation slave bash -euo pipefail -c '
    dir=$1; shift
    mount --bind /proc "$dir/proc"
    mount --rbind /dev "$dir/dev"  # with /dev/pts, which apt wants
    mkdir -p "$dir/host"
    mount --rbind / "$dir/host"
    chroot "$dir" "$@"' in_namespace "$dir" "$@"
}

if [ ! -e "$dir/.qkv-torch2" ]; then
  if ! command -v debootstrap >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  echo "torch2_chroot.sh: Debian 13 (trixie) into $dir" >&2
  debootstrap --variant=minbase trixie "$dir" >/dev/null  # debootstrap's default mirror
  echo "torch2_chroot.sh: python3-torch and OpenBLAS (OpenMP) inside" >&2
  # Without libopenblas0-openmp, torch's BLAS is the reference libblas3: 10x slower products.
  in_namespace bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends python3-torch python3-numpy libopenblas0-openmp >/dev/null'
  touch "$dir/.qkv-torch2"
fi
# The wrapper compare_torch.py runs as qkv: a chroot back into the host's root, so qkv runs with the
# host's loader and libraries (OpenBLAS 0.3.21, libgomp), as in a normal run. (Run by the chroot's loader
# with the host's libraries instead, it could not re-execute itself through /proc/self/exe.)
cat >"$dir/usr/local/bin/qkv-host" <<EOF
#!/bin/sh
exec chroot /host '$qkv' "\$@"
EOF
chmod +x "$dir/usr/local/bin/qkv-host"
# --generate (first) runs compare_generate.py instead; its model is written where both roots see it.
if [ "${1:-}" = --generate ]; then
  shift
  gen=$(mktemp -d /tmp/qkv-generate.XXXXXX)
  trap 'rm -rf "$gen"' EXIT
  in_namespace python3 "/host$top/bench/compare_generate.py" --qkv /usr/local/bin/qkv-host --folder "/host$gen" \
    --qkv-folder "$gen" "$@"
  exit
fi
# --baseline OLD_QKV (a host path) runs back in the host's root the same way.
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = --baseline ] && [ $# -ge 2 ]; then
    old=$(realpath "$2")
    [ -x "$old" ] || fail "--baseline $2 is not an executable"
    printf '#!/bin/sh\nexec chroot /host %q "$@"\n' "$old" >"$dir/usr/local/bin/qkv-host-baseline"
    chmod +x "$dir/usr/local/bin/qkv-host-baseline"
    args+=(--baseline /usr/local/bin/qkv-host-baseline)
    shift 2
  else
    args+=("$1")
    shift
  fi
done
in_namespace python3 "/host$top/bench/compare_torch.py" --qkv /usr/local/bin/qkv-host "${args[@]}"
