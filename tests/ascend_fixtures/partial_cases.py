"""Cases for only one of two launched kernels: the check must name the uncovered kernel as a failure.

``_twice`` is a device helper called by the covered kernel (inlined, not uncovered); ``debug_kernel`` is listed in
``ASCEND_NOT_COMPILED`` with a reason (reported, not compiled); ``orphan_kernel`` has no case and no excuse.
"""
import triton
import triton.language as tl

ASCEND_NOT_COMPILED = {"debug_kernel": "CUDA-only debugging aid, never launched on an NPU"}


@triton.jit
def _twice(x):
    return x + x


@triton.jit
def covered_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, _twice(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


@triton.jit
def orphan_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


@triton.jit
def debug_kernel(x_ptr):
    tl.store(x_ptr, 0.0)


def ascend_compile_cases():
    return [dict(name="covered_BLOCK256", fn=covered_kernel,
                 signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 256})]
