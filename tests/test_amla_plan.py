"""The Triton amla launcher's plans and launch tables (ops/triton/configs/<backend>/amla.json), read through the public
``launch_plan`` / ``launch_plan_for`` / ``compile_cases``: the tables parse, every bucket is reachable, the plan follows
the table (never a pinned tuning value: a correct retune passes), every "cuda" entry compiles for sm_90, the
batch-invariant plan depends on no batch property. No kernel runs here (results: tests/test_amla_triton.py)."""
from __future__ import annotations

import pytest
import torch

from tests.conftest import requires_triton, run_uninterpreted

pytestmark = requires_triton

tri = pytest.importorskip("ops.triton.amla")

CPU = torch.device("cpu")
SECTION_KEYS = {"cores", "vector_cores", "persistent", "fill", "max_splits", "min_keys_per_split", "rescale_skip",
                "amla_round_c", "lazy", "buckets", "flat", "flat_shrink", "float_guard", "peel"}
REQUIRED = SECTION_KEYS - {"vector_cores"}
TILE_KEYS = {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "programs_per_core", "q_in_loop", "flat",
             "rescale_skip", "peel"}
MERGE_KEYS = {"num_warps", "vec_min_splits", "vec_max_rows", "cols"}
TABLES = sorted(tri.load_configs())


def _tiles(key):
    """The table's buckets as tile configs with their max_rows (None: every row count)."""
    return [dict(b["config"], max_rows=tri.bucket_rows(b)[1]) for b in tri.section(key)["buckets"]]


def _no_prose(node):
    if isinstance(node, dict):
        return all(not k.startswith("_") and _no_prose(v) for k, v in node.items())
    return all(_no_prose(v) for v in node) if isinstance(node, list) else True


def _pow2(x):
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


@pytest.mark.parametrize("key", TABLES)
def test_table_parses(key):
    """The table is a "fwd" and a "merge" section holding only known keys of the right types (no prose, no
    candidates); the buckets match on rows = S_q·N with ranges that follow each other from 1, the last one matching
    every shape; tile sizes are powers of two (tl.arange)."""
    table = tri.load_configs()[key]
    assert set(table) == {"fwd", "merge"} and _no_prose(table)
    sect = tri.section(key)
    assert set(sect) - {"merge"} <= SECTION_KEYS and REQUIRED <= set(sect), set(sect) ^ REQUIRED
    lo = 1
    for b in sect["buckets"][:-1]:
        assert set(b) == {"match", "config"} and set(b["match"]) == {"rows"}, b
        assert b["match"]["rows"][0] == lo and b["match"]["rows"][1] >= lo, (lo, b)
        lo = b["match"]["rows"][1] + 1
    assert set(sect["buckets"][-1]) == {"config"}
    assert isinstance(sect["cores"], int) and sect["cores"] >= 0 and 0 < sect["fill"] <= 1
    assert sect["max_splits"] >= 1 and sect["min_keys_per_split"] >= 1
    assert set(sect["merge"]) <= MERGE_KEYS and sect["merge"]["num_warps"] >= 1
    for k in ("persistent", "rescale_skip", "amla_round_c", "flat", "flat_shrink", "float_guard", "peel"):
        assert isinstance(sect[k], bool), k
    for t in (b["config"] for b in sect["buckets"]):
        assert set(t) <= TILE_KEYS and {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "programs_per_core"} <= set(t), t
        assert _pow2(t["BLOCK_M"]) and t["BLOCK_M"] >= 16 and _pow2(t["BLOCK_N"]) and t["BLOCK_N"] >= 16, t
        assert _pow2(t["num_warps"]) and t["num_stages"] >= 1 and t["programs_per_core"] >= 1, t
        assert tri.INVARIANT_CHUNK_UNIT % t["BLOCK_N"] == 0, "the batch-invariant chunks must hold whole tiles"


@pytest.mark.parametrize("key", TABLES)
def test_every_bucket_is_reachable(key):
    """For each tile, the row counts S_q·N up to its max_rows (and past the previous one) pick exactly it."""
    tiles = _tiles(key)
    lo = 1
    for t in tiles:
        hi = t["max_rows"] or lo + 300
        for rows in sorted({lo, hi, (lo + hi) // 2}):
            p = tri.launch_plan(4, 1, rows, 4096, CPU, {"key": key, "cores": 132}, page=t["BLOCK_N"])
            for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"):
                assert p[k] == t[k], (key, rows, k, p, t)
            assert p["q_in_loop"] == bool(t.get("q_in_loop", False))
            assert p["num_m"] == -(-rows // t["BLOCK_M"])
        lo = hi + 1


def _expected_splits(sect, tile, B, rows, max_keys, cores):
    programs = B * -(-rows // tile["BLOCK_M"])
    target = cores * tile["programs_per_core"]
    if programs >= sect["fill"] * target or max_keys <= 0:
        return 1
    return max(1, min(target // programs, -(-max_keys // sect["min_keys_per_split"]), sect["max_splits"]))


@pytest.mark.parametrize("key", TABLES)
def test_split_count_follows_the_table_and_fits_one_wave(key):
    """Split count = min(floor(resident programs / programs), ceil(max_keys / min_keys_per_split), max_splits) when
    the programs do not fill fill·cores·programs_per_core, else 1 — read from the table, for many shapes; so
    programs·splits never exceed one wave of resident programs."""
    sect = tri.section(key)
    for cores in (132, 20, 3):
        for B in (1, 3, 16, 40, 64, 100):
            for S_q, N in ((1, 16), (2, 16), (1, 128), (2, 5)):
                for mk in (0, 300, 4096, 1 << 16):
                    rows = S_q * N
                    tile = tri.tile_for(sect["buckets"], rows)
                    p = tri.launch_plan(B, S_q, N, mk, CPU, {"key": key, "cores": cores})
                    want = _expected_splits(sect, tile, B, rows, mk, cores)
                    assert p["num_splits"] == want, (key, cores, B, S_q, N, mk, p)
                    assert p["total"] == p["num_splits"] * B * p["num_m"]
                    assert p["num_splits"] == 1 or p["total"] <= cores * tile["programs_per_core"]
                    if p["persistent"]:
                        assert p["grid"] == max(1, min(p["total"], cores * tile["programs_per_core"]))
                    else:
                        assert p["grid"] == max(p["total"], 1)


def test_launch_plan_is_from_shapes_only():
    """Forced split counts are kept, no keys means no split, a plan is a fresh dict (the memoised one is never
    handed out), and a lone request never gets fewer splits than a full batch."""
    p = tri.launch_plan(1, 1, 2, 1024, CPU, num_splits=5)
    assert p["num_splits"] == 5 and p["total"] == 5 * p["num_m"]
    assert tri.launch_plan(1, 1, 2, 0, CPU)["num_splits"] == 1
    a = tri.launch_plan(1, 1, 2, 1024, CPU)
    a["num_splits"] = -7
    assert tri.launch_plan(1, 1, 2, 1024, CPU)["num_splits"] >= 1
    for key in TABLES:
        lone = tri.launch_plan(1, 1, 16, 4096, CPU, {"key": key, "cores": 132})["num_splits"]
        assert lone >= tri.launch_plan(256, 1, 16, 4096, CPU, {"key": key, "cores": 132})["num_splits"]
    assert set(tri.load_configs()) >= {"cuda", "ascend", "interpreter"}
    args = _meta_inputs(2, 8)
    p = tri.launch_plan_for(*args)
    p["grid"] = -1
    p["merge_grid"] = -1
    assert tri.launch_plan_for(*args)["grid"] > 0 and tri.launch_plan_for(*args)["merge_grid"] > 0


@pytest.mark.parametrize("key", TABLES)
def test_plan_flags_follow_the_table(key):
    """peel, float_guard, rescale_skip, round_c, lazy come from the table (a tile may override peel / flat /
    rescale_skip); the compile cases carry the same constexprs."""
    sect = tri.section(key)
    for t in _tiles(key):
        rows = t["max_rows"] or 300
        p = tri.launch_plan(2, 1, rows, 4096, CPU, {"key": key, "cores": 132}, page=t["BLOCK_N"])
        assert p["peel"] == t.get("peel", sect["peel"]) and p["float_guard"] == sect["float_guard"]
        assert p["skip"] == t.get("rescale_skip", sect["rescale_skip"]) and p["round_c"] == sect["amla_round_c"]
        assert p["lazy"] == sect["lazy"] and p["flat"] == t.get("flat", sect["flat"])
    for c in tri.compile_cases(key, pages=(64,)):
        if c["name"].startswith("amla_fwd"):
            assert c["constexprs"]["PEEL"] in {t.get("peel", sect["peel"]) for t in _tiles(key)}
            assert c["constexprs"]["FGUARD"] == sect["float_guard"]


def test_vectorised_merge_only_from_vec_min_splits_up_to_vec_max_rows():
    """With merge {vec_min_splits 4, vec_max_rows 256, cols 256}: the vectorised merge from 4 splits, up to 256 query
    rows in all; a forced split count of thousands takes the loop (the [pow2(splits), cols] tile would pass Triton's
    tensor size limit), a single split has no merge, and a partial "merge" override keeps the other keys (it used
    to replace the dict: KeyError 'num_warps')."""
    merge = {"vec_min_splits": 4, "vec_max_rows": 256, "cols": 256}

    def plan(B, ns, **m):
        return tri.launch_plan(B, 1, 16, 4096, CPU, {"key": "cuda", "cores": 132, "merge": dict(merge, **m)}, ns)
    assert not plan(64, 2)["merge_vec"] and not plan(64, 3)["merge_vec"]
    assert plan(1, 4)["merge_vec"] and plan(1, 17)["merge_vec"]
    assert plan(16, 8)["merge_vec"] and not plan(17, 8)["merge_vec"]        # 16 requests × 16 rows = 256
    assert plan(1, 64)["merge_vec"] and not plan(1, 65)["merge_vec"] and not plan(1, 5000)["merge_vec"]
    assert not plan(1, 1)["merge_vec"]
    assert not plan(1, 8, vec_min_splits=0)["merge_vec"]
    p = tri.launch_plan(64, 1, 16, 4096, CPU, {"key": "cuda", "cores": 132, "merge": {"vec_max_rows": 4096}}, 4)
    assert p["merge_warps"] == tri.section("cuda")["merge"]["num_warps"]
    assert p["merge_cols"] == tri.section("cuda")["merge"].get("cols", 0)


def _meta_inputs(B, N, Dc=512, L=40, bs=16, S_q=1):
    m = dict(device="meta", dtype=torch.float16)
    nb = B * -(-L // bs) + 1
    return (torch.empty(B, S_q, N, Dc, **m), torch.empty(B, S_q, N, 64, **m), torch.empty(nb, bs, 1, Dc, **m),
            torch.empty(nb, bs, 1, 64, **m), torch.empty(B, -(-L // bs) + 1, dtype=torch.int32, device="meta"))


def test_merge_grid_whole_rows_unless_vectorised():
    """merge.cols applies to the vectorised merge only: the loop merge keeps one work item per whole row (a loop
    merge over half rows doubled its programs and cost 5 % at B16 N128 L1024 on the H200)."""
    cfg = {"key": "cuda", "cores": 132, "merge": {"vec_min_splits": 4, "vec_max_rows": 256, "cols": 256}}
    for B, ns, vec in ((1, 8, True), (17, 8, False), (2, 2, False)):
        p = tri.launch_plan_for(*_meta_inputs(B, 16), config=cfg, num_splits=ns)
        assert p["merge_vec"] == vec and p["merge_dv_block"] == (256 if vec else 512), (B, ns, p)
        assert p["merge_grid"] == B * 16 * (2 if vec else 1), (B, ns, p)


def test_vectorised_merge_tile_bound_uses_the_real_latent_dim():
    """The plan sizes the vectorised merge's [pow2(splits), cols] tile without knowing Dc (512 when cols = 0);
    launch_plan_for re-checks it with the real column block, so a wide latent dim takes the whole-row loop instead
    of a tile past 16384 elements."""
    for cols, ns, vec, dvb in ((0, 32, False, 1024), (0, 16, True, 1024), (256, 64, True, 256), (0, 4, True, 1024)):
        cfg = {"key": "cuda", "merge": {"cols": cols, "vec_min_splits": 4, "vec_max_rows": 256}}
        p = tri.launch_plan_for(*_meta_inputs(1, 4, Dc=1024), config=cfg, num_splits=ns)
        assert p["merge_vec"] == vec and p["merge_dv_block"] == dvb, (cols, ns, p)
        assert p["merge_grid"] == 4 * 1024 // dvb, (cols, ns, p)


def test_launch_plan_names_a_bad_config_key():
    """config["key"] must name a launch table; a typo gave KeyError 'tiles'."""
    for bad in ("CUDA", "fwd"):
        with pytest.raises(ValueError, match=f"config key must be one of .*got '{bad}'"):
            tri.launch_plan(1, 1, 16, 4096, CPU, {"key": bad})
    with pytest.raises(ValueError, match="config key must be one of"):
        tri.compile_cases("npu")


@pytest.mark.parametrize("key", ["ascend", "cuda"])
def test_compile_cases_are_well_formed(key):
    """Every case names exactly the kernel's arguments, its constexprs are those of the plan the launcher makes for
    that table (flat addressing only where the tile lies in one page), and on Ascend the accumulator tile fits."""
    sect = tri.section(key)
    cases = tri.compile_cases(key, pages=tri.ASCEND_PAGES)
    assert cases and len({c["name"] for c in cases}) == len(cases)
    assert {c["constexprs"].get("INV_CHUNK", 0) > 0 for c in cases if c["name"].startswith("amla_fwd")} == {False, True}
    for c in cases:
        names = set(c["fn"].arg_names)
        assert set(c["signature"]) == names, c["name"]
        assert set(c["constexprs"]) <= names
        assert all(c["signature"][k] == "constexpr" for k in c["constexprs"])
        ce = c["constexprs"]
        if c["name"].startswith("amla_fwd"):
            assert ce["sl_h"] == 1 and ce["FGUARD"] == sect["float_guard"]
            if ce["FLAT"]:
                assert ce["PAGE"] % ce["BLOCK_N"] == 0
            if key == "ascend":
                assert ce["FLAT"], "Ascend lowers only flat addressing to block copies"
                # acc [BLOCK_M, 512] fp32 and the K tile must fit L0C (128 KiB) / UB (192 KiB) with room to spare
                assert ce["BLOCK_M"] * 512 * 4 <= 64 * 1024
    assert tri.ascend_compile_cases() == tri.compile_cases("ascend")


@pytest.mark.slow
def test_every_cuda_table_entry_compiles_for_sm90():
    """Each tile of the "cuda" table (the split forward kernel) and both merges (the table's, the ordered one of the
    batch-invariant mode) compile for sm_90 (bf16, block size 64). Compiled in a subprocess without TRITON_INTERPRET;
    the other variants compile on the GPU when tests/test_amla*.py run there."""
    code = (
        "import triton, ops.triton.amla as A\n"
        "from triton.backends.compiler import GPUTarget\n"
        "n = 0\n"
        "for c in A.compile_cases('cuda', pages=(64,), dtypes=('bf16',)):\n"
        "    if '_nosplit_' in c['name'] or c['name'].endswith('amla_invariant'):\n"
        "        continue\n"
        "    src = triton.compiler.ASTSource(c['fn'], c['signature'], c['constexprs'])\n"
        "    triton.compile(src, target=GPUTarget('cuda', 90, 64),\n"
        "                   options=dict(num_warps=c['num_warps'], num_stages=c['num_stages']))\n"
        "    n += 1\n"
        "print('compiled', n)\n")
    cases = tri.compile_cases("cuda", pages=(64,), dtypes=("bf16",))
    want = sum("_nosplit_" not in c["name"] and not c["name"].endswith("amla_invariant") for c in cases)
    r = run_uninterpreted(code, timeout=600)
    assert r.returncode == 0 and f"compiled {want}" in r.stdout, r.stderr[-3000:]


def test_flat_addressing_only_where_the_tile_lies_in_one_page():
    """CUDA keeps BLOCK_N and falls back to per-key gathers when the page is no multiple of it; flat_shrink sections
    shrink BLOCK_N to the largest power of two ≥ 16 dividing the page."""
    for key in TABLES:
        sect = tri.section(key)
        bn = sect["buckets"][-1]["config"]["BLOCK_N"]
        for page in (16, 24, 64, 128, 256):
            p = tri.launch_plan(2, 1, 300, 4096, CPU, {"key": key, "cores": 132}, page=page)
            if page % bn == 0:
                assert p["flat"] == sect["flat"] and p["BLOCK_N"] == bn
            elif sect["flat_shrink"] and page % 16 == 0 and sect["flat"]:
                shrunk = bn
                while page % shrunk:
                    shrunk //= 2
                assert p["flat"] and p["BLOCK_N"] == shrunk, (key, page, p)
            else:
                assert not p["flat"] and p["BLOCK_N"] == bn, (key, page, p)


# ----------------------------------------------------------------------------------------------
# the batch-invariant plan
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", tri.BATCH_INVARIANT_POLICIES)
def test_invariant_chunking_rule(policy):
    """The chunk length follows L and constants: a multiple of the 512 unit (or L itself for "single"), at least the
    base, at most max_chunks chunks, and never shorter for a longer request."""
    for rows in (1, 16, 32, 128, 256, 2048):
        base, cap = tri.invariant_chunking(policy, rows)
        prev = 0
        for L in (0, 1, 511, 512, 513, 4096, 16384, 32769, 131072):
            c = tri.invariant_chunk_len(L, rows, policy)
            if base == 0:
                assert c == L
                continue
            assert c >= base and c % tri.INVARIANT_CHUNK_UNIT == 0 and -(-L // c) <= cap, (policy, rows, L, c)
            assert c >= prev
            prev = c
    with pytest.raises(ValueError, match="policy"):
        tri.invariant_chunking("adaptive", 16)


@pytest.mark.parametrize("policy", tri.BATCH_INVARIANT_POLICIES)
def test_invariant_plan_ignores_the_batch_the_cores_and_the_table(policy):
    """In the mode the split count is the most chunks any request of ≤ max_keys keys can have, whatever B, the core
    count or the fill / split settings of the table; the merge is the ordered loop (never the vectorised tile)."""
    for key in TABLES:
        for S_q, N in ((1, 16), (2, 128), (1, 3)):
            rows = S_q * N
            base, cap = tri.invariant_chunking(policy, rows)
            for mk in (0, 512, 4096, 1 << 17):
                want = 1 if base == 0 else min(cap, max(1, -(-mk // base)))
                for B in (1, 2, 7, 64):
                    for cores, extra in ((132, {}), (3, {"fill": 0.1, "max_splits": 2, "min_keys_per_split": 8})):
                        p = tri.launch_plan(B, S_q, N, mk, CPU, dict({"key": key, "cores": cores}, **extra),
                                            invariant=policy)
                        assert p["num_splits"] == want and not p["merge_vec"], (key, B, mk, p)
                        assert p["invariant"] == policy
    with pytest.raises(ValueError, match="num_splits"):
        tri.launch_plan(1, 1, 16, 4096, CPU, num_splits=2, invariant=policy)


def test_invariant_mode_is_read_at_launch_time(monkeypatch):
    """launch_plan_for follows ops.batch_invariant() / DS_OPS_BATCH_INVARIANT when invariant is None, "off" forces the
    default split, a policy name picks that policy; an unknown one is refused."""
    import ops
    args = _meta_inputs(1, 16, L=4096)
    assert tri.launch_plan_for(*args)["invariant"] is None
    with ops.batch_invariant():
        assert tri.launch_plan_for(*args)["invariant"] == tri.BATCH_INVARIANT_POLICY
        assert tri.launch_plan_for(*args, invariant="off")["invariant"] is None
        with ops.batch_invariant(False):
            assert tri.launch_plan_for(*args)["invariant"] is None
    monkeypatch.setenv("DS_OPS_BATCH_INVARIANT", "1")
    assert tri.launch_plan_for(*args)["invariant"] == tri.BATCH_INVARIANT_POLICY
    assert tri.launch_plan_for(*args, invariant="fixed")["invariant"] == "fixed"
    with pytest.raises(ValueError, match="policy"):
        tri.launch_plan_for(*args, invariant="on")
