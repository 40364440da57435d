"""Inner half of ``tools/ascend_check.py``: runs INSIDE the triton-ascend virtual environment.

triton-ascend 3.2.0 installs its own ``triton`` package (Triton 3.2 front end + the ``ascend`` backend), so this
script cannot run in the project's test venv, which has upstream Triton. It is started by ``ascend_check.py`` as
``PYTHONPATH=ROOT <venv>/bin/python tools/_ascend_lower.py --repo ROOT --out DIR MODULE.py ...`` and does, for every
module:

1. import the module by file path (parent packages are stubbed, so ``ops/__init__.py`` is never executed and
   relative imports still work);
2. call ``ascend_compile_cases()``; a module that defines ``@triton.jit`` kernels but no such function, or a kernel
   that no case covers, is reported as a failure (nothing is skipped silently);
3. for each case, run ``triton.compile`` for ``GPUTarget("npu", "Ascend910B3", 0)`` through triton-ascend's own
   stages (TTIR -> ``triton-adapter-opt`` Linalg) up to the point where triton-ascend would launch
   ``bishengir-compile``. There the command line triton-ascend builds is captured (so its A2/A3 flags are reproduced
   exactly, whatever options the case sets) together with the Linalg module, and the compile is stopped.

It writes ``DIR/<module>/<case>/kernel.ttadapter.mlir`` and one JSON manifest, ``DIR/lowered.json``, that the outer
tool reads; running bishengir-compile and judging the result happen outside.

Only the standard library, triton-ascend and what the kernel modules import (triton, torch) are used here.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import traceback
import types

ARCH_DEFAULT = "Ascend910B3"
CASE_KEYS = ("name", "fn", "signature", "constexprs")


class _Captured(Exception):
    """Raised from the patched ``subprocess.run`` when triton-ascend is about to start bishengir-compile.

    triton re-wraps errors raised inside a stage (MLIRCompilationError), so the captured command and Linalg are
    kept in ``_CAPTURE`` as well and the exception only serves to stop the compile."""


_CAPTURE: dict = {}


def _versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for dist in ("triton-ascend", "ascendnpu-ir", "torch", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _bishengir_bin() -> str:
    if os.environ.get("BISHENGIR_BIN"):
        return os.environ["BISHENGIR_BIN"]
    spec = importlib.util.find_spec("ascendnpuir")  # site-packages/ascendnpuir/bin/bishengir-{compile,opt}
    if spec is None or spec.origin is None:
        raise RuntimeError("the ascendnpu-ir package (bishengir-compile) is not installed in this venv")
    return os.path.join(os.path.dirname(spec.origin), "bin")


# ------------------------------------------------------------------------------------------------
# patching triton-ascend so that triton.compile stops right before bishengir-compile
# ------------------------------------------------------------------------------------------------
class _FakeNPUUtils:
    """Stands in for triton-ascend's NPUUtils, whose constructor builds a C extension against CANN."""
    arch = ARCH_DEFAULT

    def get_arch(self):
        return self.arch


def _install_capture(arch: str):
    from triton.backends import backends

    compiler = backends["ascend"].compiler          # loaded under the module name "ascend", not triton.backends...
    g = compiler.add_stages.__globals__
    if "linalg_to_bin_enable_npu_compile_A2_A3" not in g:
        raise RuntimeError("this triton-ascend has no linalg_to_bin_enable_npu_compile_A2_A3; update _ascend_lower.py")
    real_subprocess = g["subprocess"]

    def run(cmd, *args, **kwargs):
        if isinstance(cmd, (list, tuple)) and cmd and os.path.basename(str(cmd[0])).startswith("bishengir-compile") \
                and "--help" not in cmd and "--version" not in cmd:
            with open(cmd[1]) as f:                   # the .ttadapter.mlir file in triton-ascend's tempdir
                _CAPTURE.update(cmd=list(cmd), linalg=f.read())
            raise _Captured("captured the bishengir-compile command; compile stopped on purpose")
        return real_subprocess.run(cmd, *args, **kwargs)

    shim = types.ModuleType("subprocess_capture")
    shim.__dict__.update({k: getattr(real_subprocess, k) for k in dir(real_subprocess) if not k.startswith("__")})
    shim.run = run
    g["subprocess"] = shim

    to_bin = g["linalg_to_bin_enable_npu_compile_A2_A3"]

    def to_bin_recording(linalg, metadata, opt):
        # the Linalg as triton-adapter produced it, before triton-ascend strips ``mix_mode`` (aiv / aic / mix)
        m = re.search(r'mix_mode\s*=\s*"(\w+)"', linalg)
        _CAPTURE["mix_mode"] = m.group(1) if m else None
        return to_bin(linalg, metadata, opt)

    g["linalg_to_bin_enable_npu_compile_A2_A3"] = to_bin_recording  # add_stages looks the name up at call time
    _FakeNPUUtils.arch = arch
    g["NPUUtils"] = _FakeNPUUtils


class _AlignedPointer:
    """Stands for a tensor argument whose storage is 16-byte aligned (every fresh torch allocation is)."""

    @staticmethod
    def data_ptr():
        return 0


def _launch_attrs(fn, signature: dict, constexprs: dict, aligned: bool):
    """The attribute descriptor triton builds at launch (JITFunction.run): pointers get tt.divisibility=16 when
    aligned. Integer values are unknown here, so no scalar gets divisibility or equal-to-1 specialisation; a
    scalar that is always 1 at launch (the unit stride of a contiguous dim) must be a constexpr = 1 in the case,
    as triton turns it into one."""
    from triton.backends import backends

    values = []
    for p in fn.params:
        if p.name in constexprs:
            values.append(constexprs[p.name])
        elif str(signature.get(p.name, "")).startswith("*") and aligned:
            values.append(_AlignedPointer())
        else:
            values.append(object())   # neither an int nor a tensor: no property
    desc = backends["ascend"].compiler.add_stages.__globals__["AscendAttrsDescriptor"]
    return desc(fn.params, values)


_LOWER_ATTEMPTS = 3
_CRASH_MARKS = ("corrupted", "Malformed type storage", "Stack dump", "Segmentation fault", "double free", "Aborted")


def _lower(fn, signature: dict, constexprs: dict, options: dict, arch: str, aligned: bool = True):
    """Return (bishengir command as triton-ascend built it, Linalg text, mix mode)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    src = ASTSource(fn=fn, signature=dict(signature), constants=dict(constexprs),
                    attrs=_launch_attrs(fn, signature, constexprs, aligned))
    # triton-adapter-opt 3.2.0 sometimes aborts at random on a case that lowers fine on the next try (heap
    # corruption messages: "corrupted size vs. prev_size", "Malformed type storage object"); a deterministic
    # failure fails every attempt and is reported with its message
    for attempt in range(_LOWER_ATTEMPTS):
        _CAPTURE.clear()
        try:
            triton.compile(src, target=GPUTarget("npu", arch, 0), options=dict(options) or None)
            break
        except Exception as e:
            if "cmd" in _CAPTURE:
                break
            if attempt + 1 == _LOWER_ATTEMPTS or not any(m in str(e) for m in _CRASH_MARKS):
                raise  # a genuine front-end / triton-adapter failure
    if "cmd" not in _CAPTURE:
        raise RuntimeError("triton.compile finished without reaching bishengir-compile (the backend changed?)")
    return _CAPTURE["cmd"], _CAPTURE["linalg"], _CAPTURE.get("mix_mode")


# ------------------------------------------------------------------------------------------------
# module discovery and import
# ------------------------------------------------------------------------------------------------
def _import_by_path(path: str, repo: str):
    """Import ``path`` under its dotted name relative to ``repo`` without executing any parent ``__init__``."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path, repo)
    if rel.startswith(".."):
        name = "_ascend_case_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    parts = os.path.splitext(rel)[0].split(os.sep)
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            stub = types.ModuleType(pkg)
            stub.__path__ = [os.path.join(repo, *parts[:i])]
            stub.__package__ = pkg
            sys.modules[pkg] = stub
    return importlib.import_module(".".join(parts))


def _jit_functions(mod) -> dict:
    """@triton.jit functions defined in ``mod`` (not imported into it), by name: JITFunction objects, or under
    TRITON_INTERPRET (the project's CPU tests) the InterpretedFunction that @triton.jit returns there."""
    from triton.runtime.jit import JITFunction

    out = {}
    for name, val in vars(mod).items():
        fn = _unwrap(val)
        if (isinstance(fn, JITFunction) or type(fn).__name__ == "InterpretedFunction") and \
                getattr(fn.fn, "__module__", None) == mod.__name__:
            out[fn.fn.__name__] = fn
    return out


def _unwrap(fn):
    """Autotuner / Heuristics wrappers keep the JITFunction (InterpretedFunction under TRITON_INTERPRET) in ``.fn``."""
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(fn, JITFunction) and type(fn).__name__ != "InterpretedFunction" and hasattr(fn, "fn") \
            and seen < 8:
        fn, seen = fn.fn, seen + 1
    return fn


def _validate_case(case, index: int) -> str | None:
    if not isinstance(case, dict):
        return f"case #{index} is a {type(case).__name__}, expected dict(name, fn, signature, constexprs)"
    missing = [k for k in CASE_KEYS if k not in case]
    if missing:
        return f"case #{index} ({case.get('name', '?')}) lacks {missing}"
    sig, const = case["signature"], case["constexprs"]
    if not isinstance(sig, dict) or not all(isinstance(v, str) for v in sig.values()):
        return f"case {case['name']}: signature must map argument names to type strings like '*fp16', 'i32'"
    want = {k for k, v in sig.items() if v == "constexpr"}
    if want != set(const):
        return (f"case {case['name']}: constexprs {sorted(const)} do not match the constexpr arguments of the "
                f"signature {sorted(want)}")
    return None


def _frontend_message(e: BaseException) -> str:
    """The reason first, then where: triton's CompilationError chain (a kernel calling a helper nests them) is
    unwound to the innermost message, with `function:line` of each level, innermost first."""
    where, seen, cur = [], 0, e
    while cur is not None and type(cur).__name__ in ("CompilationError", "CompileTimeAssertionFailure") \
            and seen < 16:
        src, node = getattr(cur, "src", None) or "", getattr(cur, "node", None)
        m = re.search(r"def\s+(\w+)", src)
        line = getattr(node, "lineno", None)
        text = src.split("\n")[line - 1].strip() if line and src.count("\n") >= line - 1 else ""
        where.append(f"{m.group(1) if m else '?'}:{line} `{text}`")
        nxt = cur.__cause__ or cur.__context__
        if nxt is None:
            msg = getattr(cur, "error_message", None) or ""
            break
        cur, seen = nxt, seen + 1
    else:
        msg = f"{type(cur).__name__}: {cur}" if cur is not None else ""
    lines = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    if any(re.search(r":\d+:\d+: error:", ln) for ln in lines):
        # triton-adapter-opt / MLIR diagnostics: keep each error with the source line that follows it
        keep = []
        for k, ln in enumerate(lines):
            if re.search(r":\d+:\d+: error:", ln):
                keep.append(re.sub(r"^\S*?([\w.]+\.py:\d+:\d+:)", r"\1", ln))
                if k + 1 < len(lines) and not re.search(r":\d+:\d+:", lines[k + 1]):
                    keep.append("`" + lines[k + 1] + "`")
        lines = [f"{type(cur).__name__}:"] + keep
    text = " | ".join(lines)
    if where:
        text += " (at " + " <- ".join(reversed(where)) + ")"
    return text[:3000]


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:120]


def check_module(path: str, repo: str, out: str, arch: str) -> dict:
    stem = os.path.splitext(os.path.basename(path))[0]
    res = {"module": stem, "path": os.path.relpath(os.path.abspath(path), repo), "error": None,
           "kernels": [], "uncovered": [], "not_compiled": {}, "cases": []}
    try:
        mod = _import_by_path(path, repo)
    except Exception as e:  # noqa: BLE001 - report any import failure with its message
        res["error"] = f"import failed under triton-ascend: {type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc(limit=6)
        return res
    kernels = _jit_functions(mod)
    res["kernels"] = sorted(kernels)
    getter = getattr(mod, "ascend_compile_cases", None)
    if getter is None:
        if kernels:
            res["error"] = (f"defines @triton.jit kernels {sorted(kernels)} but no ascend_compile_cases(); "
                            "every kernel must be compile-checked for Ascend")
        else:
            res["skipped"] = "no @triton.jit kernels and no ascend_compile_cases()"
        return res
    try:
        cases = list(getter())
    except Exception as e:  # noqa: BLE001
        res["error"] = f"ascend_compile_cases() raised {type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc(limit=6)
        return res
    if not cases:
        res["error"] = "ascend_compile_cases() returned no cases"
        return res
    # optional escape hatch: {kernel_name: reason} for kernels the launcher never uses on an NPU
    not_compiled = dict(getattr(mod, "ASCEND_NOT_COMPILED", {}) or {})
    res["not_compiled"] = not_compiled
    covered = set()
    for i, case in enumerate(cases):
        err = _validate_case(case, i)
        entry = {"name": str(case.get("name", f"#{i}")) if isinstance(case, dict) else f"#{i}", "error": err}
        if not err and any(c["name"] == entry["name"] for c in res["cases"]):
            err = entry["error"] = f"case name {entry['name']!r} is used twice"
        res["cases"].append(entry)
        fn = _unwrap(case.get("fn")) if isinstance(case, dict) else None
        if fn is not None:
            covered.add(getattr(fn, "__name__", None))
        if err:
            continue
        # triton 3.2 reads the signature by position: put it in the kernel's parameter order, after checking
        # that the names are the kernel's
        names = list(getattr(fn, "arg_names", None) or case["signature"])
        if set(names) != set(case["signature"]):
            entry["error"] = (f"case {entry['name']}: signature names do not match the parameters of "
                              f"{getattr(fn, '__name__', fn)}: missing {sorted(set(names) - set(case['signature']))}, "
                              f"unknown {sorted(set(case['signature']) - set(names))}")
            continue
        case = dict(case, signature={k: case["signature"][k] for k in names})
        entry.update(kernel=getattr(fn, "__name__", repr(fn)), signature=dict(case["signature"]),
                     constexprs={k: (v if isinstance(v, (int, float, bool, str)) or v is None else repr(v))
                                 for k, v in case["constexprs"].items()},
                     options=dict(case.get("options", {})))
        cdir = os.path.join(out, _slug(stem), _slug(entry["name"]))
        os.makedirs(cdir, exist_ok=True)
        try:
            cmd, linalg, mix = _lower(fn, case["signature"], case["constexprs"], entry["options"], arch,
                                      aligned=bool(case.get("aligned", True)))
        except Exception as e:  # noqa: BLE001 - the front end's message is the result
            entry["error"] = "Triton -> Linalg failed: " + _frontend_message(e)
            continue
        src = os.path.join(cdir, "kernel.ttadapter.mlir")
        with open(src, "w") as f:
            f.write(linalg)
        # triton-ascend's own command, re-pointed at our copy of the Linalg and our output directory
        flags = list(cmd[2:])
        if "-o" in flags:
            i_o = flags.index("-o")
            del flags[i_o:i_o + 2]
        entry.update(linalg=os.path.relpath(src, out), dir=os.path.relpath(cdir, out), mix_mode=mix, flags=flags)
    uncovered = uncovered_kernels(kernels, covered, not_compiled)
    res["uncovered"] = uncovered
    if uncovered:
        res["error"] = (f"@triton.jit kernels {uncovered} are neither in ascend_compile_cases() nor called from a "
                        "kernel that is (list them in ASCEND_NOT_COMPILED with a reason if the NPU never runs them)")
    return res


def uncovered_kernels(kernels: dict, covered: set, not_compiled: dict) -> list[str]:
    """Names of the module's @triton.jit functions (``kernels``: name -> function) that no case compiles: neither a
    case's kernel (``covered``), nor a device helper called (directly or through other helpers) from one, nor listed
    in ``not_compiled`` (the module's ASCEND_NOT_COMPILED). Pure Python: the project's test venv runs it too."""
    reached = {k for k in covered if k in kernels}
    grew = True
    while grew:  # device helpers called (directly or through other helpers) by a covered kernel are inlined there
        new = {k for k in kernels if k not in reached and _called_by(kernels[k], [kernels[r] for r in reached])}
        reached |= new
        grew = bool(new)
    return sorted(k for k in kernels if k not in reached and k not in not_compiled)


def _called_by(helper, roots) -> bool:
    """True when ``helper`` is called (by name) from one of the covered kernels: a device helper, inlined there."""
    name = helper.fn.__name__
    for r in roots:
        if re.search(r"\b%s\s*\(" % re.escape(name), _source(r)):
            return True
    return False


def _source(fn) -> str:
    """A jit function's source (JITFunction keeps it in ``src``; InterpretedFunction does not)."""
    src = getattr(fn, "src", None)
    if src is None:
        import inspect

        src = inspect.getsource(fn.fn)
    return src


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default=ARCH_DEFAULT)
    ap.add_argument("modules", nargs="*")
    a = ap.parse_args(argv)
    repo, out = os.path.abspath(a.repo), os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(out, "triton-cache"))
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    binp = _bishengir_bin()
    os.environ["PATH"] = binp + os.pathsep + os.environ.get("PATH", "")  # triton-ascend finds bishengir on PATH
    _install_capture(a.arch)
    manifest = {"arch": a.arch, "versions": _versions(), "bishengir_bin": binp, "modules": []}
    try:
        r = subprocess.run([os.path.join(binp, "bishengir-compile"), "--version"], capture_output=True, text=True)
        manifest["versions"]["bishengir-compile"] = " ".join((r.stdout + r.stderr).split())[:200]
    except OSError as e:
        manifest["versions"]["bishengir-compile"] = f"not runnable: {e}"
    for path in a.modules:
        manifest["modules"].append(check_module(path, repo, out, a.arch))
    with open(os.path.join(out, "lowered.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
