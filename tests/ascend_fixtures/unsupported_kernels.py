"""Outside triton-ascend's language subset: fp64 arithmetic (the Ascend front end rejects it).
The check must fail this case at the Triton -> Linalg step with the front end's message."""
from .small_kernels import add_kernel  # reused with fp64 pointers; defined and covered there


def ascend_compile_cases():
    return [dict(name="add_f64", fn=add_kernel,
                 signature={"x_ptr": "*fp64", "y_ptr": "*fp64", "o_ptr": "*fp64", "n": "i32", "BLOCK": "constexpr"},
                 constexprs={"BLOCK": 256})]
