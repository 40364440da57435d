"""Small Triton kernels that fit the 910B budgets: the Ascend compile check must PASS them (up to hivmc).

Test fixture for tests/test_ascend_check.py; written in the triton-ascend 3.2 subset (no fp64, fp32/int32
accumulators, int8 tl.dot spells out_dtype=tl.int32).
"""
import triton
import triton.language as tl


@triton.jit
def _scale(x, s):
    # a device helper: inlined into its caller, so it needs no case of its own
    return x * s


@triton.jit
def add_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def persistent_scale_kernel(x_ptr, o_ptr, n_rows, n_cols, scale, BLOCK: tl.constexpr):
    # Ascend style: grid = number of vector cores, each program loops over rows
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    for row in range(pid, n_rows, nprog):
        x = tl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(o_ptr + row * n_cols + cols, _scale(x, scale).to(tl.bfloat16), mask=m)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def dot_i8_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b, out_dtype=tl.int32))


_ADD = {"x_ptr": "*fp32", "y_ptr": "*fp32", "o_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
_MM = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
       "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}


def ascend_compile_cases():
    return [
        dict(name="add_BLOCK1024", fn=add_kernel, signature=_ADD, constexprs={"BLOCK": 1024}),
        dict(name="persistent_scale_bf16", fn=persistent_scale_kernel,
             signature={"x_ptr": "*bf16", "o_ptr": "*bf16", "n_rows": "i32", "n_cols": "i32", "scale": "fp32",
                        "BLOCK": "constexpr"}, constexprs={"BLOCK": 512}),
        dict(name="matmul_f16_64x64x64", fn=matmul_kernel, signature=_MM, constexprs={"BM": 64, "BN": 64, "BK": 64}),
        dict(name="dot_i8_64", fn=dot_i8_kernel,
             signature={"a_ptr": "*i8", "b_ptr": "*i8", "c_ptr": "*i32", "BM": "constexpr", "BN": "constexpr",
                        "BK": "constexpr"}, constexprs={"BM": 64, "BN": 64, "BK": 64}),
    ]
