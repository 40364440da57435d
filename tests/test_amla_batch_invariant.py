"""The batch-invariant mode of ds::amla (``ops.batch_invariant()`` / ``DS_OPS_BATCH_INVARIANT=1``, docs/ops/amla.md):
the same request alone, in batches of 2, 7 and 64 beside requests of other lengths (0, 1, a key tile ± 1, a chunk
± 1, a long one) and at different positions gives the same out and lse bits, on every backend; with the mode off the
split kernels show the difference (so the test can fail); results stay within the tolerance of the reference; the
mode is read at each launch (torch.compile does not bake it in; a CUDA graph keeps the mode of its capture).

On the GPU (triton-cuda) the long neighbour has 16K keys; under the interpreter 1300 (runtime)."""
from __future__ import annotations

import pytest
import torch

import ops
from ops.amla import paged_cache
from tests.backends import backends_for
from tests.test_amla import DC, DR, SCALE, assert_matches_dense, run

BACKENDS = backends_for("amla")


def _sizes(be):
    """(N, key tile, long length) for the backend: real sizes on the GPU, small ones under the interpreter."""
    if be.device == "cuda":
        return 16, 64, 16384
    return 2, 16, 1100


def _chunk(be, S_q, N):
    if be.name != "triton":
        return 512
    from ops.triton import amla as tri
    return tri.invariant_chunk_len(1, S_q * N)


class _Pool:
    """A target request and neighbours with fixed data, laid into batches in any order (random pages, a block
    table as wide as the batch's longest request needs)."""

    def __init__(self, be, S_q, N, target_len, gen):
        self.be, self.S_q, self.N = be, S_q, N
        self.dtype = be.dtype(torch.bfloat16)
        self.gen = gen
        self.target = self._request(target_len)

    def _request(self, L):
        g, dt = self.gen, self.dtype
        return dict(q_nope=torch.randn(self.S_q, self.N, DC, generator=g).to(dt),
                    q_rope=torch.randn(self.S_q, self.N, DR, generator=g).to(dt),
                    c_kv=torch.randn(L, DC, generator=g).to(dt), k_rope=torch.randn(L, DR, generator=g).to(dt))

    def batch(self, lens, pos, bs):
        reqs = [self._request(L) for L in lens]
        reqs.insert(pos, self.target)
        cache = paged_cache([r["c_kv"] for r in reqs], [r["k_rope"] for r in reqs], bs, generator=self.gen)
        inputs = dict(q_nope=torch.stack([r["q_nope"] for r in reqs]), q_rope=torch.stack([r["q_rope"] for r in reqs]),
                      **cache, softmax_scale=SCALE, causal=True)
        return {k: (v.to(self.be.device) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _target_len(be, S_q, N):
    """Two chunks under the interpreter, three on the GPU."""
    return (2 if be.device == "cuda" else 1) * _chunk(be, S_q, N) + 5


def _batches(be, S_q, bs):
    """(neighbour lengths, target position) for the batch sizes 2, 7 and 64 (the target first, inside, last)."""
    N, tile, long = _sizes(be)
    chunk = _chunk(be, S_q, N)
    odd = [0, 1, tile - 1, tile + 1, chunk - 1, chunk + 1, long]
    if be.device == "cuda":
        return [([long], 1), (odd[:6], 3), (odd[1:], 6), ((odd * 10)[:63], 0), ((odd * 10)[:63], 40)]
    many = ([0, 1, tile - 1, tile + 1] * 16)[:61] + [chunk + 1, long]
    return [([long], 1), ([0, 1, tile - 1, tile + 1, chunk - 1, long], 6), (many, 40)]


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("S_q,bs", [(1, 64), (2, 16)])
def test_request_bits_do_not_depend_on_the_batch(be, S_q, bs, gen):
    N, tile, long = _sizes(be)
    pool = _Pool(be, S_q, N, _target_len(be, S_q, N), gen)
    alone = pool.batch([], 0, bs)
    with ops.batch_invariant():
        o1, l1 = run(be, alone)
        for lens, pos in _batches(be, S_q, bs):
            inputs = pool.batch(lens, pos, bs)
            out, lse = run(be, inputs)
            assert torch.equal(out[pos], o1[0]) and torch.equal(lse[pos], l1[0]), (len(lens) + 1, pos)
    assert_matches_dense(o1, l1, alone)
    if be.name == "reference":
        return
    # control: with the mode off the split count follows the batch and the bits move (the test above can fail)
    from ops.triton import amla as tri
    keys = ("q_nope", "q_rope", "kv_cache", "kr_cache", "block_table")
    o0, l0 = run(be, alone)
    assert_matches_dense(o0, l0, alone)
    differs = False
    for lens, pos in _batches(be, S_q, bs):
        inputs = pool.batch(lens, pos, bs)
        if tri.launch_plan_for(**{k: inputs[k] for k in keys})["num_splits"] == \
                tri.launch_plan_for(**{k: alone[k] for k in keys})["num_splits"]:
            continue
        out, lse = run(be, inputs)
        differs = not (torch.equal(out[pos], o0[0]) and torch.equal(lse[pos], l0[0]))
        if differs:
            break
    assert differs, "no batch changed the default split: the control cannot show the difference"


@pytest.mark.interpreter
@pytest.mark.parametrize("policy", ["scaled", "fixed", "single"])
def test_every_chunk_policy_is_batch_invariant(policy, gen):
    """Each policy of BATCH_INVARIANT_POLICIES through amla_variant(invariant=...): alone vs 7 requests."""
    tri = pytest.importorskip("ops.triton.amla")
    be = next(p.values[0] for p in BACKENDS if p.values[0].name == "triton")
    if be.device != "cpu":
        pytest.skip("the interpreter variant; tests above run the GPU")
    from ops import _library
    if not _library.triton_interpret():
        pytest.skip("Triton runs on CPU tensors only under TRITON_INTERPRET=1")
    pool = _Pool(be, 2, 2, tri.invariant_chunk_len(1, 4, policy) + 5 if policy != "single" else 700, gen)
    alone = pool.batch([], 0, 16)
    o1, l1 = tri.amla_variant(**alone, invariant=policy)
    for lens, pos in (([0, 1, 15, 17, 600, 2100], 2),):
        out, lse = tri.amla_variant(**pool.batch(lens, pos, 16), invariant=policy)
        assert torch.equal(out[pos], o1[0]) and torch.equal(lse[pos], l1[0]), (policy, pos)
    assert_matches_dense(o1, l1, alone)


@pytest.mark.parametrize("be", BACKENDS)
def test_environment_variable_turns_the_mode_on(be, gen, monkeypatch):
    pool = _Pool(be, 1, _sizes(be)[0], _target_len(be, 1, _sizes(be)[0]), gen)
    alone, batch = pool.batch([], 0, 64), pool.batch([0, 5, 700], 2, 64)
    monkeypatch.setenv("DS_OPS_BATCH_INVARIANT", "1")
    assert ops.batch_invariant_enabled()
    o1, l1 = run(be, alone)
    o2, l2 = run(be, batch)
    assert torch.equal(o2[2], o1[0]) and torch.equal(l2[2], l1[0])
    with ops.batch_invariant(False):
        assert not ops.batch_invariant_enabled()
    for v, on in (("0", False), ("off", False), ("", False), ("TRUE", True), (" yes ", True)):
        monkeypatch.setenv("DS_OPS_BATCH_INVARIANT", v)
        assert ops.batch_invariant_enabled() is on, v
    monkeypatch.setenv("DS_OPS_BATCH_INVARIANT", "2")
    with pytest.raises(ValueError, match="DS_OPS_BATCH_INVARIANT"):
        ops.batch_invariant_enabled()
    with pytest.raises(TypeError, match="enabled"):
        with ops.batch_invariant("yes"):
            pass


@pytest.mark.parametrize("be", BACKENDS)
def test_torch_compile_reads_the_mode_at_each_run(be, gen):
    """One torch.compile(fullgraph=True) function, run with the mode on and off: each run gives the eager result of
    the mode in force then (the op is opaque to the compiler; its launch reads the mode when it runs)."""
    N = _sizes(be)[0]
    pool = _Pool(be, 2, N, _target_len(be, 2, N), gen)
    inputs = pool.batch([0, 1, 900], 1, 16)
    names = ("q_nope", "q_rope", "kv_cache", "kr_cache", "block_table", "seq_lens")

    def f(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens):
        return ops.amla.amla(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, SCALE, True)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if be.device == "cpu" else "inductor")
    args = [inputs[n] for n in names]
    res = {}
    with be.active():
        for mode in (True, False):
            with ops.batch_invariant(mode):
                got, want = compiled(*args), f(*args)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), mode
            res[mode] = got
    inv, default = res[True], res[False]
    if be.name == "triton":
        assert not (torch.equal(inv[0], default[0]) and torch.equal(inv[1], default[1])), \
            "the modes gave the same bits: the compiled function may have kept one of them"


@pytest.mark.gpu
@pytest.mark.parametrize("be", [p for p in BACKENDS if p.values[0].device == "cuda"] or
                         [pytest.param(None, marks=pytest.mark.skip(reason="needs CUDA"))])
def test_cuda_graph_keeps_the_mode_of_its_capture(be, gen):
    """Captured with the mode on, replays give the eager mode-on bits, also when replayed with the mode off."""
    N, _, long = _sizes(be)
    pool = _Pool(be, 2, N, _target_len(be, 2, N), gen)
    inputs = pool.batch([0, 1, long], 1, 64)
    with be.active(), ops.batch_invariant():
        want = torch.ops.ds.amla(**inputs)
        torch.ops.ds.amla(**inputs)                        # compile outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out, lse = torch.ops.ds.amla(**inputs)
    with ops.batch_invariant(False):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want[0]) and torch.equal(lse, want[1])
