#!/usr/bin/env python3
"""Builds DeepSeek FlashMLA's sm90 dense decode kernels, a benchmark peer only
(scripts/mla_peers.py times them beside ours when `import flash_mla` works).

    build.py KIT [--out DIR]

KIT is what `kit.sh` packs: `src/` (FlashMLA's `csrc` and `flash_mla`) and
`cutlass/` (CUTLASS's `include` and `tools/util/include` at the commit
FlashMLA pins). Compiles only the dense decode (the scheduler, the combine and
the bf16/fp16 split kernels, sm_90a) and `dense_api.cpp` (their Python
binding), links them against the installed PyTorch as `flash_mla.cuda`, and
copies FlashMLA's Python package beside it into DIR (default
/tmp/fmla_pkg): `PYTHONPATH=DIR python3 scripts/mla_peers.py ...`. Object
files are kept in DIR/../fmla_build and reused (a warm GPU machine rebuilds
nothing). Needs nvcc (CUDA 12.3+) and PyTorch with its headers; no network.
"""
import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils import cpp_extension as ce

ap = argparse.ArgumentParser()
ap.add_argument("kit")
ap.add_argument("--out", default="/tmp/fmla_pkg")
args = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
kit = os.path.abspath(args.kit)
src, pkg = f"{kit}/src", os.path.abspath(args.out)
build = os.path.join(os.path.dirname(pkg), "fmla_build")
os.makedirs(build, exist_ok=True)
cuda = ce.CUDA_HOME or "/usr/local/cuda"
nvcc = f"{cuda}/bin/nvcc"
print(subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1])
try:
    incs = ce.include_paths(device_type="cuda")
    libdirs = ce.library_paths(device_type="cuda")
except TypeError:  # PyTorch before 2.6
    incs = ce.include_paths(cuda=True)
    libdirs = ce.library_paths(cuda=True)
incs += [sysconfig.get_paths()["include"], f"{src}/csrc", f"{src}/csrc/api", f"{src}/csrc/kerutils/include",
         f"{src}/csrc/sm90", f"{kit}/cutlass/include", f"{kit}/cutlass/tools/util/include"]
abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
defs = ["-DTORCH_EXTENSION_NAME=cuda", "-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DNDEBUG"]
inc = [f"-I{i}" for i in incs]
# FlashMLA's setup.py flags for its kernels, for sm_90a only.
kernels = ["smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu", "smxx/decode/combine/combine.cu",
           "sm90/decode/dense/instantiations/bf16.cu", "sm90/decode/dense/instantiations/fp16.cu"]
nvflags = ["-O3", "-std=c++20", "-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
           "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
           "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
           "--use_fast_math", "-gencode", "arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC",
           "--ptxas-options=-v", "--threads", "4"]
objs = [f"{build}/{os.path.basename(f)}.o" for f in kernels] + [f"{build}/dense_api.o"]
jobs = [[nvcc, "-c", f"{src}/csrc/{f}", "-o", o] + nvflags + defs + inc for f, o in zip(kernels, objs)]
jobs.append([nvcc, "-c", f"{here}/dense_api.cpp", "-o", objs[-1], "-O2", "-std=c++20", "-Xcompiler", "-fPIC"]
            + defs + inc)
jobs = [j for j in jobs if not os.path.exists(j[4])]
start = time.time()


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return cmd[2], r.returncode, r.stdout + r.stderr


ok = True
with ThreadPoolExecutor(max(len(jobs), 1)) as ex:
    for name, rc, out in ex.map(run, jobs):
        print(f"{os.path.basename(name)}: rc {rc} ({time.time() - start:.0f} s)")
        print("\n".join(l for l in out.splitlines() if "registers" in l or "spill" in l)[-800:])
        if rc != 0:
            ok = False
            print(out[-3000:])
if not ok:
    sys.exit(1)
os.makedirs(f"{pkg}/flash_mla", exist_ok=True)
so = f"{pkg}/flash_mla/cuda{sysconfig.get_config_var('EXT_SUFFIX')}"
link = ["g++", "-shared", "-o", so] + objs + [f"-L{d}" for d in libdirs] + [f"-Wl,-rpath,{d}" for d in libdirs]
link += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10_cuda", "-ltorch_cuda", f"-L{cuda}/lib64", "-lcudart"]
r = subprocess.run(link, capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"link failed: {r.stderr[-2000:]}")
for f in os.listdir(f"{src}/flash_mla"):
    shutil.copy(f"{src}/flash_mla/{f}", f"{pkg}/flash_mla/{f}")
print(f"flash_mla built into {pkg} in {time.time() - start:.0f} s")
