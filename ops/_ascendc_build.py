"""Build and load the Ascend C kernels' CPU twin builds: plain C-ABI shared libraries called through ctypes.

``build_library`` compiles C++17 sources with g++ against the twin's ``kernel_operator.h``
(``ascendc/twin/include``) into ``build/ascendc-twin/<name>-<hash>.so``. The hash covers the sources, every header
under ``ascendc/``, the flags and the compiler version, so an edit rebuilds and an unchanged tree reuses the
library — also across pytest-xdist workers (an ``fcntl`` lock per library makes concurrent callers build once).
No torch headers are involved, so a build takes seconds.

``TwinReport`` mirrors ``twin::TwinReportC`` (ascendc/twin/include/twin/launch.h), the launch report a C-ABI
wrapper fills: ``ok``, ``rule``/``message`` of the first violation, ``modeled_ns`` (modeled 910B time), per-pipe
busy time and counters.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import pathlib
import subprocess
from collections.abc import Iterable, Sequence

ROOT = pathlib.Path(__file__).resolve().parent.parent
ASCENDC = ROOT / "ascendc"
TWIN_INCLUDE = ASCENDC / "twin" / "include"
BUILD_DIR = ROOT / "build" / "ascendc-twin"
CXX = os.environ.get("CXX", "g++")
BASE_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-pthread")
PIPES = ("S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX")

_compiler_version: str | None = None


def _cxx_version() -> str:
    global _compiler_version
    if _compiler_version is None:
        try:
            _compiler_version = subprocess.run([CXX, "--version"], capture_output=True, text=True,
                                               check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"Ascend C twin build: C++ compiler {CXX!r} not usable: {e}") from e
    return _compiler_version


def _flags(include_dirs: Iterable[str | os.PathLike], defines: Iterable[str]) -> list[str]:
    flags = list(BASE_FLAGS) + [f"-I{TWIN_INCLUDE}", f"-I{ASCENDC}", "-DASCENDC_TWIN=1"]
    flags += [f"-I{pathlib.Path(d).resolve()}" for d in include_dirs]
    flags += [f"-D{d}" for d in defines]
    return flags


def _headers(root: pathlib.Path) -> list[pathlib.Path]:
    """Every C/C++ header under ``root``, following symlinked folders, in a stable order."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        found += [pathlib.Path(dirpath) / f for f in sorted(filenames) if f.endswith((".h", ".hpp", ".inc"))]
    return found


def build_library(name: str, sources: Sequence[str | os.PathLike], *, include_dirs: Iterable[str | os.PathLike] = (),
                  defines: Iterable[str] = ()) -> pathlib.Path:
    """Compile ``sources`` into a cached shared library and return its path.

    name:         library stem (letters, digits, ``_`` and ``-``)
    sources:      C++17 files; paths relative to the repository root or absolute
    include_dirs: extra ``-I`` directories (``ascendc/twin/include`` and ``ascendc/`` are always on the path)
    defines:      extra ``-D`` macros (``ASCENDC_TWIN=1`` is always defined)

    Raises ValueError for a bad name or a missing source, RuntimeError with g++'s stderr when compilation fails.
    """
    if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        raise ValueError(f"build_library: name must be letters, digits, '_' or '-', got {name!r}")
    srcs = [pathlib.Path(s) if pathlib.Path(s).is_absolute() else ROOT / s for s in sources]
    if not srcs:
        raise ValueError("build_library: sources is empty")
    for s in srcs:
        if not s.is_file():
            raise ValueError(f"build_library: source {s} does not exist")
    include_dirs, defines = list(include_dirs), list(defines)
    flags = _flags(include_dirs, defines)
    h = hashlib.sha256()
    for part in (_cxx_version(), *flags):
        h.update(part.encode() + b"\0")
    headers = [h for d in (ASCENDC, *include_dirs) for h in _headers(pathlib.Path(d))]
    for f in [*srcs, *headers]:
        h.update(f.read_bytes() + b"\0")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    out = BUILD_DIR / f"{name}-{h.hexdigest()[:16]}.so"
    if out.exists():
        return out
    with open(BUILD_DIR / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if out.exists():
                return out
            tmp = out.with_suffix(f".{os.getpid()}.tmp")
            cmd = [CXX, *flags, *map(str, srcs), "-o", str(tmp)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise RuntimeError(f"Ascend C twin build of {name!r} failed:\n{' '.join(cmd)}\n{r.stderr}")
            os.replace(tmp, out)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out


def load(name: str, sources: Sequence[str | os.PathLike], *, include_dirs: Iterable[str | os.PathLike] = (),
         defines: Iterable[str] = ()) -> ctypes.CDLL:
    """``build_library`` then ``ctypes.CDLL`` of the result (same arguments and errors)."""
    return ctypes.CDLL(str(build_library(name, sources, include_dirs=include_dirs, defines=defines)))


class TwinReport(ctypes.Structure):
    """ctypes mirror of ``twin::TwinReportC``. Times are modeled 910B nanoseconds, never measured."""

    _fields_ = [
        ("ok", ctypes.c_int32),
        ("block_dim", ctypes.c_uint32),
        ("modeled_ns", ctypes.c_double),
        ("pipe_busy_ns", ctypes.c_double * len(PIPES)),
        ("mte2_bytes", ctypes.c_uint64),
        ("mte3_bytes", ctypes.c_uint64),
        ("vector_repeats", ctypes.c_uint64),
        ("vector_calls", ctypes.c_uint64),
        ("scalar_ops", ctypes.c_uint64),
        ("calls", ctypes.c_uint64),
        ("rule_", ctypes.c_char * 32),
        ("message_", ctypes.c_char * 1024),
    ]

    @property
    def rule(self) -> str:
        """Id of the broken rule ("" when ok)."""
        return self.rule_.decode()

    @property
    def message(self) -> str:
        """"[rule] Call: detail (core N)" of the first violation ("" when ok)."""
        return self.message_.decode()

    def busy(self) -> dict[str, float]:
        """Per-pipe busy time, modeled 910B ns (max over cores)."""
        return {p: self.pipe_busy_ns[i] for i, p in enumerate(PIPES)}

    def raise_if_violation(self) -> None:
        """Raise RuntimeError("Ascend C twin violation: ...") when the launch broke a rule."""
        if not self.ok:
            raise RuntimeError(f"Ascend C twin violation: {self.message}")
