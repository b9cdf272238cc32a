#!/usr/bin/env bash
# Assembles, from package registries only, what building candle's CUDA
# backend needs on a machine without the CUDA toolkit or a driver (this one),
# into DIR (default target/cuda-13.0), and prints the environment to build
# with (`eval "$(scripts/cuda-toolkit.sh)"`):
#
#   nvcc 13.0 and its tools, headers, libcudart, libcublas(Lt), libcurand,
#   libnvrtc   NVIDIA's CUDA 13.0 wheels on PyPI (pinned below). 13.0 because
#              the GPU machine has driver 580 (CUDA 13.0) and /usr/local/cuda
#              13.0: nvcc 13.0 writes PTX ISA 9.0, the newest its JIT takes,
#              and the binary needs the sonames that machine has
#              (libcublas.so.13, libcudart.so.13, libnvrtc.so.13,
#              libcurand.so.10).
#   libcuda    the NVIDIA driver's own user-space library, Debian's `libcuda1`
#              (trixie non-free, 550.163.01-2), unpacked, not installed. It is only
#              linked against (cudarc's `dynamic-linking`, which candle turns
#              on, needs `-lcuda`); the binary records `NEEDED libcuda.so.1`
#              and no RPATH/RUNPATH, so at run time the loader finds the GPU
#              machine's driver (580), and nothing of DIR is ever loaded there.
#              A 550 library links the 12.8 driver API that tile and candle
#              call through cudarc (`cuda-12080`); the 580 driver that runs it
#              has every one of those entry points.
#
# DIR/lib holds the unversioned names the linker looks for (libcublas.so ->
# libcublas.so.13, libcuda.so -> the Debian file). Nothing here is a stub: every
# library is NVIDIA's. Re-running with DIR complete does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-target/cuda-13.0}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

wheels=(nvidia-cuda-nvcc==13.0.48 nvidia-nvvm==13.0.48 nvidia-cuda-crt==13.0.48 nvidia-cuda-cccl==13.0.50
  nvidia-cuda-runtime==13.0.48 nvidia-cuda-nvrtc==13.0.48 nvidia-cublas==13.0.0.19 nvidia-curand==10.4.0.35)
libcuda_deb=550.163.01-2

if [[ ! -e $dir/.complete ]]; then
  echo "cuda-toolkit.sh: assembling $dir" >&2
  rm -rf "$dir/wheels" "$dir/tree" "$dir/apt" && mkdir -p "$dir/wheels" "$dir/apt"
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 -d "$dir/wheels" "${wheels[@]}" >&2
  for w in "$dir"/wheels/*.whl; do
    (cd "$dir" && python3 -m zipfile -e "$w" tree)
  done
  # The wheels' tree is a toolkit root (bin, include, lib, nvvm), except that
  # cicc comes in bin/ where nvcc.profile looks in nvvm/bin.
  root="$dir/tree/nvidia/cu13"
  chmod +x "$root"/bin/*
  mkdir -p "$root/nvvm/bin" && ln -sfn ../../bin/cicc "$root/nvvm/bin/cicc"
  # libcuda1 from Debian's non-free archive, through apt with a private
  # configuration (the machine's sources and state are not touched).
  apt_dir="$dir/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  echo "deb http://deb.debian.org/debian trixie non-free" >"$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache" -o APT::Architecture=amd64 -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq >&2
  (cd "$apt_dir" && apt-get "${apt_opts[@]}" download "libcuda1=$libcuda_deb" >&2)
  dpkg-deb -x "$apt_dir"/libcuda1_*.deb "$apt_dir/x"
  real=$(ls "$apt_dir"/x/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.*.*)
  # The names the linker looks for.
  lib="$root/lib"
  ln -sfn "$real" "$lib/libcuda.so"
  for l in cudart.so.13 cublas.so.13 cublasLt.so.13 curand.so.10 nvrtc.so.13; do
    ln -sfn "lib$l" "$lib/lib${l%.so.*}.so"
  done
  rm -rf "$dir/wheels" "$apt_dir/cache" "$apt_dir/lists"
  ln -sfn "$root" "$dir/root"
  touch "$dir/.complete"
fi

root="$dir/root"
"$root/bin/nvcc" --version | tail -n 1 >&2
# cudarc's build script links from $CUDA_HOME/lib; candle-kernels' finds nvcc
# on PATH and compiles for CUDA_COMPUTE_CAP (no GPU here to ask: the H200's 9.0).
cat <<EOF
export CUDA_HOME='$root'
export PATH='$root/bin':"\$PATH"
export CUDA_COMPUTE_CAP="\${CUDA_COMPUTE_CAP:-90}"
EOF
