"""Runs the GEMM PTX that `cargo test -p tile-ir --test codegen_gemm dump_gemm_ptx` writes
(with TILE_GEMM_DUMP=<dir>) on a GPU through the driver API (ctypes): checks each
configuration against torch.matmul at awkward sizes, then times 8192^3 against cuBLAS.

    TILE_GEMM_DUMP=$PWD/gemm_check cargo test -p tile-ir --test codegen_gemm dump_gemm_ptx
    python3 tile-ir/tests/gemm_gpu_check.py gemm_check [arch] [size]
"""
import ctypes, glob, os, sys, torch
DIR = sys.argv[1] if len(sys.argv) > 1 else "gemm_check"
ARCH = sys.argv[2] if len(sys.argv) > 2 else "sm_80"
SIZE = int(sys.argv[3]) if len(sys.argv) > 3 else 8192
torch.zeros(1, device="cuda")
cuda = ctypes.CDLL("libcuda.so.1")
torch.manual_seed(0)

def check(r, what):
    if r != 0:
        s = ctypes.c_char_p()
        cuda.cuGetErrorString(r, ctypes.byref(s))
        raise RuntimeError(f"{what}: {r} {s.value}")

def load(name):
    ptx = open(f"{DIR}/{name}.{ARCH}.ptx", "rb").read() + b"\0"
    smem = int(open(f"{DIR}/{name}.{ARCH}.smem").read())
    mod = ctypes.c_void_p()
    log = ctypes.create_string_buffer(8192)
    opts = (ctypes.c_int * 2)(5, 6)
    vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(8192))
    r = cuda.cuModuleLoadDataEx(ctypes.byref(mod), ptx, 2, opts, vals)
    if r != 0:
        raise RuntimeError(f"load {name}: {r}: {log.value.decode()}")
    f = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(f), mod, b"gemm"), "getfunc")
    if smem > 48 * 1024:
        check(cuda.cuFuncSetAttribute(f, 8, smem), "smem attr")
    return f, smem

def run(f, smem, threads, bm, bn, a, b, c, m, n, k):
    cargs = [ctypes.c_uint64(a.data_ptr()), ctypes.c_uint64(b.data_ptr()), ctypes.c_uint64(c.data_ptr()),
             ctypes.c_int32(m), ctypes.c_int32(n), ctypes.c_int32(k)]
    arr = (ctypes.c_void_p * len(cargs))(*[ctypes.cast(ctypes.pointer(x), ctypes.c_void_p) for x in cargs])
    grid = ((n + bn - 1) // bn, (m + bm - 1) // bm, 1)
    check(cuda.cuLaunchKernel(f, grid[0], grid[1], grid[2], threads, 1, 1, smem,
                              ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), arr, None), "launch")

def timeit(fn, reps=20):
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / reps / 1e3

fails = 0
for cfgf in sorted(glob.glob(f"{DIR}/*.cfg")):
    name = os.path.basename(cfgf)[:-4]
    threads, bm, bn, bk, dt, ta, tb = open(cfgf).read().split()
    threads, bm, bn, bk, ta, tb = int(threads), int(bm), int(bn), int(bk), int(ta), int(tb)
    dtype = torch.float16 if dt == "f16" else torch.bfloat16
    f, smem = load(name)
    for (m, n, k) in [(1000, 520, 200), (257, 129, 96), (SIZE // 4, SIZE // 4, SIZE // 4)]:
        A = torch.randn(m, k, device="cuda").to(dtype)
        B = torch.randn(k, n, device="cuda").to(dtype)
        a = A.t().contiguous() if ta else A
        b = B.t().contiguous() if tb else B
        C = torch.zeros(m, n, device="cuda", dtype=torch.float32)
        run(f, smem, threads, bm, bn, a, b, C, m, n, k)
        torch.cuda.synchronize()
        ref = A.float() @ B.float()
        err = ((C - ref).abs() / (1 + ref.abs())).max().item()
        ok = err < 1e-2
        fails += not ok
        print(("ok   " if ok else "FAIL ") + f"{name} {m}x{n}x{k}: max rel err {err:.2e}")
    n = SIZE
    A = torch.randn(n, n, device="cuda").to(dtype)
    B = torch.randn(n, n, device="cuda").to(dtype)
    C = torch.empty(n, n, device="cuda", dtype=torch.float32)
    t_ours = timeit(lambda: run(f, smem, threads, bm, bn, A, B, C, n, n, n))
    t_cublas = timeit(lambda: torch.matmul(A, B))
    fl = 2 * n ** 3
    print(f"perf {name} {ARCH} {n}^3: ours {fl / t_ours / 1e12:.0f} TFLOPS, cuBLAS ({dt} out) {fl / t_cublas / 1e12:.0f} TFLOPS, ratio {t_cublas / t_ours:.2f}")
print("FAILURES", fails)
sys.exit(1 if fails else 0)
