"""A module with a @triton.jit kernel and no ascend_compile_cases(): the check must report it as a failure."""
import triton
import triton.language as tl


@triton.jit
def forgotten_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
