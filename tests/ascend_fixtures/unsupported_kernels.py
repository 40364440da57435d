"""Outside triton-ascend's language subset: fp64 arithmetic (the Ascend front end rejects it).
The check must fail this case at the Triton -> Linalg step with the front end's message."""
import triton
import triton.language as tl


@triton.jit
def add_f64_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def ascend_compile_cases():
    return [dict(name="add_f64", fn=add_f64_kernel,
                 signature={"x_ptr": "*fp64", "y_ptr": "*fp64", "o_ptr": "*fp64", "n": "i32", "BLOCK": "constexpr"},
                 constexprs={"BLOCK": 256})]
