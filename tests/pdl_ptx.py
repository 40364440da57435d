"""The PTX check behind the PDL compile tests (tests/test_quant_triton.py, tests/test_amla_triton.py); imported by the
subprocesses those tests run without TRITON_INTERPRET, so this module has no side effects."""
from __future__ import annotations

import re

# the first instruction that touches global or shared memory: loads / stores in any form, cp.async, atomics
_MEMORY = re.compile(r"\b(?:ld|st)(?:\.[\w:]+)*\.(?:global|shared)|\bcp\.async|\batom\.|\bred\.")


def check_pdl_order(ptx: str, pdl: bool, name: str) -> None:
    """AssertionError unless the kernel body of ``ptx`` has griddepcontrol.launch_dependents, then griddepcontrol.wait,
    before its first memory access (``pdl``), or no griddepcontrol instruction at all (not ``pdl``)."""
    body = ptx[ptx.index(".entry"):]
    if not pdl:
        assert "griddepcontrol" not in body, name
        return
    wait = body.index("griddepcontrol.wait")
    assert 0 <= body.index("griddepcontrol.launch_dependents") < wait < _MEMORY.search(body).start(), name
