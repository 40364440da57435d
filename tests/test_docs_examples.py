"""The Python examples in README.md, docs/*.md and docs/ops/*.md run as written (CPU, default backend).

Every ```python block whose first line is an import is executed in a fresh namespace from the repository
root; blocks that need what a CPU CI machine does not have are listed in SKIP with the reason. Signature
snippets (blocks that do not start with an import) are not run.
"""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "ops").glob("*.md"))

# (file name, the block's heading) -> why it is not run here
SKIP = {
    ("deepseek_layer.md", "Loading a checkpoint"): "needs a DeepSeek-V3 checkpoint and a CUDA device "
                                                   "(tests/test_layer_hf.py runs the same calls on a random one)",
}


def _blocks():
    """[(file name, heading above the block, code)] for every runnable-looking ```python block."""
    out = []
    for f in FILES:
        text = f.read_text()
        for m in re.finditer(r"```python\n(.*?)```", text, re.S):
            code = m.group(1)
            first = code.lstrip().splitlines()[0] if code.strip() else ""
            if not first.startswith(("import ", "from ")):
                continue
            heads = re.findall(r"^#+ (.+)$", text[:m.start()], re.M)
            out.append((f.name, heads[-1].strip() if heads else "", code))
    return out


BLOCKS = _blocks()


def test_examples_are_found():
    # the collection itself can break (a renamed folder, another fence style): then nothing below would run
    names = {n for n, _, _ in BLOCKS}
    assert {"README.md", "amla.md", "mla_prolog.md", "moe_gating.md", "quant.md"} <= names, names
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("name,heading,code", BLOCKS, ids=[f"{n}:{h}" for n, h, _ in BLOCKS])
def test_example_runs(name, heading, code, monkeypatch):
    if (name, heading) in SKIP:
        pytest.skip(SKIP[(name, heading)])
    monkeypatch.chdir(ROOT)
    exec(compile(code, f"{name} ({heading})", "exec"), {"__name__": "__doc_example__"})


def test_every_file_and_test_id_the_docs_name_exists():
    """docs/check_refs.py finds nothing dangling: every backticked repository path exists and every ``path::name``
    test id names a test defined in that file (docs/ops/amla.md once cited a test in the wrong file)."""
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "check_refs.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_row_counts_the_docs_quote_match_the_committed_report():
    """README.md and docs/performance.md quote the size of docs/perf/h200/results.json; they said 360 rows and 180
    shapes while it held 386 and 193. A re-measured report must update them."""
    rows = json.loads((ROOT / "docs" / "perf" / "h200" / "results.json").read_text())["rows"]
    n_rows, n_shapes = len(rows), len({(r["op"], r["shape"]) for r in rows})
    for doc in ("README.md", "docs/performance.md"):
        text = (ROOT / doc).read_text().replace("\n", " ")
        for m in re.finditer(r"all (\d+) rows", text, re.I):
            assert int(m.group(1)) == n_rows, f"{doc} says {m.group(0)!r}; the report has {n_rows} rows"
        for m in re.finditer(r"(\d+) shapes, every check", text):
            assert int(m.group(1)) == n_shapes, f"{doc} says {m.group(0)!r}; the report has {n_shapes} shapes"
    assert all(r["check"] == "PASS" for r in rows if r["backend"] != "reference")
