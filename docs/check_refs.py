"""Every file a document names exists: ``python docs/check_refs.py`` (exit status 1 and a list when one does not).

Checks README.md, CHANGELOG.md and docs/**/*.md: relative Markdown link targets (resolved from the document's
folder) and backticked repository paths (resolved from the repository root): a token whose first part is a
top-level folder of the repository, or a path with a known file extension. Tokens with ``<``, ``*`` or ``{``
(templates, globs) are not paths; ``path:line`` is checked as ``path``, ``path::name`` (a pytest id) as ``path`` holding ``def name``.
"""
from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOP = {"reference", "ops", "ascendc", "perf", "tests", "docs", "tools", ".ci"}
EXTS = (".py", ".md", ".json", ".txt", ".sh", ".csv", ".png", ".toml", ".cpp", ".h", ".hpp")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TICK = re.compile(r"`([^`\s]+)`")


def documents() -> list[pathlib.Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md"] + sorted((ROOT / "docs").rglob("*.md"))


def dangling(doc: pathlib.Path) -> list[str]:
    """The references in ``doc`` that name no file or folder, as 'line: reference'."""
    out = []
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if path and not (doc.parent / path).exists():
                out.append(f"{n}: ({target})")
        for tok in TICK.findall(line):
            if any(c in tok for c in "<*{") or tok.startswith(("http", "/", "$")):
                continue
            path = tok.split("::", 1)[0].rstrip(",.;")
            path = re.sub(r":\d+$", "", path)
            first = path.split("/", 1)[0]
            if not ((first in TOP and "/" in path) or path.endswith(EXTS)):
                continue
            if "/" not in path:         # a bare name (`summary.md`, an output or another project's file)
                continue
            if not (ROOT / path).exists():
                out.append(f"{n}: `{tok}`")
            elif "::" in tok and path.endswith(".py"):   # a pytest id: its test function must be in that file
                name = tok.split("::")[-1].split("[", 1)[0].rstrip(",.;")
                if not re.search(rf"^\s*(?:async )?def {re.escape(name)}\b", (ROOT / path).read_text(), re.M):
                    out.append(f"{n}: `{tok}` ({name} is not defined in {path})")
    return out


def main() -> int:
    bad = {d: dangling(d) for d in documents()}
    for d, refs in bad.items():
        for r in refs:
            print(f"{d.relative_to(ROOT)}:{r}")
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
