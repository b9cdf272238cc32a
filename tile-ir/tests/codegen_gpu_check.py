"""Runs the PTX that `cargo test -p tile-ir --test codegen dump_ptx_for_gpu_runs` writes
(with TILE_GPU_DUMP=<dir>) on a GPU through the driver API (ctypes) and checks it against
PyTorch references. Needs only libcuda and PyTorch on the GPU machine:

    TILE_GPU_DUMP=$PWD/gpu_check cargo test -p tile-ir --test codegen dump_ptx_for_gpu_runs
    python3 tile-ir/tests/codegen_gpu_check.py gpu_check
"""
import ctypes, math, sys, torch
DIR = sys.argv[1] if len(sys.argv) > 1 else "gpu_check"
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

def launch(name, arch, grid, threads, args, sync=True):
    f, smem = func(name, arch)
    cargs = []
    for a in args:
        if isinstance(a, torch.Tensor):
            cargs.append(ctypes.c_uint64(a.data_ptr()))
        else:
            cargs.append(a)
    arr = (ctypes.c_void_p * len(cargs))(*[ctypes.cast(ctypes.pointer(c), ctypes.c_void_p) for c in cargs])
    g = list(grid) + [1] * (3 - len(grid))
    check(cuda.cuLaunchKernel(f, g[0], g[1], g[2], threads, 1, 1, smem, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), arr, None), f"launch {name}")
    if sync:
        torch.cuda.synchronize()

i32 = ctypes.c_int32
fails = 0
def expect(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails += 1

cdiv = lambda a, b: (a + b - 1) // b
for arch in ["sm_80", "sm_90a"]:
    # vector_add
    for n in [1, 1000003, 1 << 20]:
        a = torch.randn(n, device="cuda"); b = torch.randn(n, device="cuda"); c = torch.zeros(n, device="cuda")
        launch("vector_add", arch, [cdiv(n, 1024)], 256, [a, b, c, i32(n)])
        expect(torch.equal(c, a + b), f"{arch} vector_add n={n}")
    # softmax
    for (m, n) in [(37, 4096), (5, 1000), (5, 999), (3, 1)]:
        x = (torch.randn(m, n, device="cuda") * 3).half(); y = torch.zeros(m, n, device="cuda", dtype=torch.half)
        launch("softmax", arch, [m], 256, [x, y, i32(m), i32(n)])
        ref = torch.softmax(x.float(), -1)
        err = (y.float() - ref).abs().max().item()
        expect(err < 2e-3, f"{arch} softmax {m}x{n} max err {err:.2e}")
    # reductions
    x = torch.randn(8, 3, 64, device="cuda"); y = torch.zeros(8, 64, device="cuda")
    launch("reduce_3d_dim1_Sum_f32", arch, [1], 128, [x, y, i32(8), i32(3), i32(64)])
    err = (y - (1 + x.sum(1))).abs().max().item()
    expect(err < 1e-4, f"{arch} reduce sum 3d dim1 err {err:.2e}")
    x = torch.randn(16, 256, device="cuda").half(); y = torch.zeros(256, device="cuda")
    launch("reduce_2d_dim0_Max_f16", arch, [1], 256, [x, y, i32(16), i32(256)])
    expect(torch.equal(y, torch.clamp(x.float().max(0).values, min=1.0)), f"{arch} reduce max 2d dim0")
    # transpose through shared
    m, n = 1000, 777
    a = torch.randn(m, n, device="cuda").half(); b = torch.zeros(n, m, device="cuda", dtype=torch.half)
    launch("transpose", arch, [cdiv(n, 64), cdiv(m, 32)], 128, [a, b, i32(m), i32(n)])
    expect(torch.equal(b, a.t()), f"{arch} transpose {m}x{n}")
    # row scale
    m = 1001
    x = torch.randn(m, 64, device="cuda"); z = torch.randn(m, 32, device="cuda"); o = torch.zeros(m, 32, device="cuda")
    launch("row_scale", arch, [cdiv(m, 8)], 128, [x, z, o, i32(m)])
    expect(torch.equal(o, z * x.max(1, keepdim=True).values), f"{arch} row_scale")
    # copies
    B, M, N = 3, 50, 70
    x = torch.randn(B, M, N, device="cuda") * 100; y = torch.zeros(B, M, N, device="cuda", dtype=torch.half)
    z = torch.zeros(8, device="cuda", dtype=torch.int32); w = torch.tensor([1.5, -2.0, 42.9, 3.25], device="cuda"); w2 = torch.zeros(4, device="cuda")
    launch("copies", arch, [cdiv(N, 64), cdiv(M, 16), B], 128, [x, y, z, w, w2, i32(B), i32(M), i32(N)])
    ref = torch.full((B, M, N), 7.0, device="cuda"); ref[:, :, :-1] = x[:, :, 1:]
    expect(torch.equal(y, ref.half()), f"{arch} copies y")
    expect(z.tolist() == [0, 0, 0, 42, 0, 0, 0, 0] and torch.equal(w2, w), f"{arch} copies z/w2")
    # divergent
    n = 700
    x = torch.randn(n, device="cuda") * 3; y = torch.zeros(n, device="cuda", dtype=torch.half); w = torch.zeros(n, device="cuda")
    launch("divergent", arch, [cdiv(n, 256)], 128, [x, y, w, i32(n)])
    xs = x.tolist(); padded = cdiv(n, 256) * 256; fv = []
    for g in range(padded):
        i = g % 256; xg = xs[g] if g < n else 0.0; acc = 0.0
        for t in range(i % 5): acc += t * xg
        fv.append(acc + math.exp(0.5) if i % 2 == 0 else math.log(abs(acc) + 1) - acc)
    yerr = max(abs(y[g].item() - fv[g]) / max(1, abs(fv[g])) for g in range(n))
    wref = [1 / math.sqrt(abs(fv[(g // 256) * 256 + 255 - g % 256]) + 1) for g in range(n)]
    werr = max(abs(w[g].item() - wref[g]) for g in range(n))
    expect(yerr < 2e-3 and werr < 1e-4, f"{arch} divergent (y err {yerr:.1e}, w err {werr:.1e})")

# atomics (bf16 needs sm_90a)
n = 100
x = torch.randint(-2, 18, (n,), device="cuda", dtype=torch.int32)
hist = torch.zeros(16, device="cuda", dtype=torch.int32); sums = torch.zeros(2, device="cuda", dtype=torch.half)
big = torch.zeros(1, device="cuda", dtype=torch.int32); bsum = torch.zeros(1, device="cuda", dtype=torch.bfloat16)
launch("atomics_bf16", "sm_90a", [cdiv(n, 128)], 64, [x, hist, sums, big, bsum, i32(n)])
href = torch.stack([(x == b).sum() for b in range(16)]).int()
expect(torch.equal(hist, href) and sums[1].item() == x.sum().item() and big.item() == x.sum().item() and bsum.item() == 128.0, f"sm_90a atomics (bsum {bsum.item()})")

# softmax bandwidth at the target shape
m, n = 65536, 4096
x = torch.randn(m, n, device="cuda").half(); y = torch.empty_like(x)
for arch in ["sm_90a"]:
    f, smem = func("softmax", arch)
    launch("softmax", arch, [m], 256, [x, y, i32(m), i32(n)])
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        launch("softmax", arch, [m], 256, [x, y, i32(m), i32(n)], sync=False)
    e.record(); torch.cuda.synchronize()
    ms = s.elapsed_time(e) / 10
    print(f"softmax {m}x{n} {arch}: {ms:.3f} ms, {2 * m * n * 2 / ms / 1e9:.0f} GB/s")
    ref = torch.softmax(x.float(), -1)
    expect((y.float() - ref).abs().max().item() < 2e-3, "softmax 65536x4096 correct")
print("FAILS", fails)
sys.exit(1 if fails else 0)
