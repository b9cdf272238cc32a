"""Runs the pipelined kernels that
`TILE_GPU_DUMP=<dir> cargo test -p tile-ir --test codegen_pipeline dump_ptx_for_gpu_runs`
writes on a GPU (driver API through ctypes) and checks them against PyTorch references:

    TILE_GPU_DUMP=$PWD/gpu_pipe cargo test -p tile-ir --test codegen_pipeline dump_ptx_for_gpu_runs
    python3 tile-ir/tests/codegen_pipeline_gpu_check.py gpu_pipe [quick]

With `quick`, fewer shapes (for compute-sanitizer runs).
"""
import ctypes, sys, torch
DIR = sys.argv[1] if len(sys.argv) > 1 else "gpu_pipe"
QUICK = len(sys.argv) > 2 and sys.argv[2] == "quick"
torch.zeros(1, device="cuda")
cuda = ctypes.CDLL("libcuda.so.1")
torch.manual_seed(0)


def check(r, what):
    if r != 0:
        s = ctypes.c_char_p()
        cuda.cuGetErrorString(r, ctypes.byref(s))
        raise RuntimeError(f"{what}: {r} {s.value}")


mods = {}


def func(name, arch):
    key = (name, arch)
    if key in mods:
        return mods[key]
    ptx = open(f"{DIR}/{name}.{arch}.ptx", "rb").read() + b"\0"
    smem = int(open(f"{DIR}/{name}.{arch}.smem").read())
    mod = ctypes.c_void_p()
    log = ctypes.create_string_buffer(8192)
    opts = (ctypes.c_int * 2)(5, 6)
    vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(8192))
    r = cuda.cuModuleLoadDataEx(ctypes.byref(mod), ptx, 2, opts, vals)
    if r != 0:
        raise RuntimeError(f"load {name} {arch}: {r}: {log.value.decode()}")
    f = ctypes.c_void_p()
    entry = ptx.decode().split(".visible .entry ")[1].split("(")[0]
    check(cuda.cuModuleGetFunction(ctypes.byref(f), mod, entry.encode()), "getfunc")
    if smem > 48 * 1024:
        check(cuda.cuFuncSetAttribute(f, 8, smem), "smem attr")
    mods[key] = (f, smem)
    return mods[key]


def launch(name, arch, grid, threads, args, grid_y=1):
    f, smem = func(name, arch)
    cargs = [ctypes.c_uint64(a.data_ptr()) if isinstance(a, torch.Tensor) else a for a in args]
    arr = (ctypes.c_void_p * len(cargs))(*[ctypes.cast(ctypes.pointer(c), ctypes.c_void_p) for c in cargs])
    check(cuda.cuLaunchKernel(f, grid, grid_y, 1, threads, 1, 1, smem, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), arr, None), f"launch {name}")
    torch.cuda.synchronize()


i32 = ctypes.c_int32
fails = 0


def expect(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += 0 if ok else 1


ms = [37, 1000] if not QUICK else [70]
ks = [0, 32, 64, 96, 93, 224, 221, 1000, 4099] if not QUICK else [0, 93, 224]
archs = ["sm_80", "sm_90a"]
for dt, tdt in [("f32", torch.float32), ("f16", torch.float16)]:
    for m in ms:
        for k in ks:
            x = torch.randn(m, k, device="cuda").to(tdt)
            y = torch.randn(m, k, device="cuda").to(tdt)
            w = (torch.arange(k, device="cuda") // 32 + 1).double()
            want = (x.double() * y.double() * w).sum(1)
            first = None
            for stages in range(1, 5):
                for arch in archs:
                    out = torch.full((m,), float("nan"), device="cuda")
                    launch(f"rowsum_s{stages}_{dt}", arch, (m + 63) // 64, 128, [x, y, out, i32(m), i32(k)])
                    err = (out.double() - want).abs().max().item() if m else 0.0
                    tol = 1e-4 * max(1.0, want.abs().max().item())
                    same = first is None or torch.equal(first, out)
                    first = out if first is None else first
                    expect(err <= tol and same, f"rowsum {dt} stages {stages} {arch} M {m} K {k}: err {err:.2e} same-as-stages-1 {same}")
for m in ms:
    for k in ks:
        x = torch.randn(m, k, device="cuda")
        w = (torch.arange(k, device="cuda") // 16 + 1).double()
        want = (x.double() * w).sum(1) * 6.0
        for stages in range(1, 5):
            for arch in archs:
                out = torch.full((m,), float("nan"), device="cuda")
                launch(f"rowsum_rep_s{stages}", arch, (m + 7) // 8, 64, [x, out, i32(m), i32(k)])
                err = (out.double() - want).abs().max().item() if m else 0.0
                expect(err <= 1e-4 * max(1.0, want.abs().max().item()), f"repeated rowsum stages {stages} {arch} M {m} K {k}: err {err:.2e}")
# Pipelined mma.sync gemm, 128x128x32 tiles, 256 threads: C = A·B (f16 in, f32 out).
def gemm(stages, arch, a, b, c=None):
    m, kk = a.shape
    n = b.shape[1]
    c = torch.full((m, n), float("nan"), device="cuda") if c is None else c
    launch(f"gemm_f16_s{stages}", arch, (n + 127) // 128, 256, [a, b, c, i32(m), i32(n), i32(kk)], grid_y=(m + 127) // 128)
    return c


shapes = [(1, 1, 1), (130, 70, 33), (256, 384, 0), (300, 260, 1000)] if not QUICK else [(130, 70, 40)]
for (m, n, kk) in shapes:
    a = torch.randn(m, kk, device="cuda").half()
    b = torch.randn(kk, n, device="cuda").half()
    want = a.double() @ b.double()
    for stages in range(1, 5):
        for arch in archs:
            got = gemm(stages, arch, a, b)
            err = (got.double() - want).abs().max().item() if m * n else 0.0
            expect(err <= 1e-3 * max(1.0, want.abs().max().item()), f"gemm stages {stages} {arch} {m}x{n}x{kk}: err {err:.2e}")
if not QUICK:
    m = n = kk = 8192
    a = torch.randn(m, kk, device="cuda").half()
    b = torch.randn(kk, n, device="cuda").half()
    def timed(fn):
        for _ in range(3):
            fn()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(10):
            fn()
        t1.record()
        torch.cuda.synchronize()
        return t0.elapsed_time(t1) / 10 / 1e3
    ref = timed(lambda: a @ b)
    print(f"torch.matmul f16 8192^3: {2 * m * n * kk / ref / 1e12:.1f} TFLOP/s", flush=True)
    for stages in range(1, 5):
        for arch in archs:
            c = torch.empty(m, n, device="cuda")
            t = timed(lambda: gemm(stages, arch, a, b, c))
            print(f"gemm stages {stages} {arch} 8192^3: {2 * m * n * kk / t / 1e12:.1f} TFLOP/s ({ref / t:.2f}x torch)", flush=True)
print("FAILURES:", fails)
sys.exit(1 if fails else 0)
