"""Deliberately oversized tiles: the Ascend compile check must FAIL them with bishengir's overflow message.

* ``add_ub_overflow``: three live fp32 tiles of 65536 elements = 768 KiB > 192 KiB unified buffer.
* ``matmul_cc_overflow``: a 256x256 fp32 accumulator = 256 KiB > 128 KiB L0C.
Test fixture for tests/test_ascend_check.py.
"""
from .small_kernels import add_kernel, matmul_kernel  # reused with oversized tiles; defined and covered there


def ascend_compile_cases():
    return [
        dict(name="add_ub_overflow", fn=add_kernel,
             signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "o_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
             constexprs={"BLOCK": 65536}),
        dict(name="matmul_cc_overflow", fn=matmul_kernel,
             signature={"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
                        "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
             constexprs={"BM": 256, "BN": 256, "BK": 64}),
    ]
