#!/usr/bin/env bash
# One H200 call: re-check every Triton kernel on CUDA, re-time the AMLA configs, and a quick utilization report.
# Usage (device tool): bash tests/gpu/run_all.sh      → logs under $OUT (copied into the repo afterwards)
# Each step has its own time limit so the whole call stays inside the 10-minute command limit.
set -uo pipefail
cd "$(dirname "$0")/../.."
FINAL="${OUT:-/tmp}"; OUT=/tmp/ds-ops-gpu; rm -rf "$OUT"; mkdir -p "$OUT"   # only 8 files come back: tar at the end
export PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
step() {  # name, seconds, command...
  local name=$1 secs=$2; shift 2
  echo "== $name (limit ${secs}s): $*"
  local t0=$SECONDS
  timeout "$secs" "$@" > "$OUT/$name.txt" 2>&1; local rc=$?
  echo "   rc=$rc in $((SECONDS - t0))s; tail:"; tail -n 6 "$OUT/$name.txt" | sed 's/^/   | /'
}
case "${1:-all}" in
round1)  # host profile, the three config sweeps, the layer with Triton kernels, a perf smoke of the new timer
  step profile_host 45 python3 tests/gpu/profile_host.py --calls 200 --out "$OUT/profile_host_report.txt"
  step amla_sweep 120 python3 perf/bench_amla.py "$OUT/amla_sweep.md" --sweep-only
  step quant_sweep 120 python3 perf/bench_quant_gating.py --sweep2 --out "$OUT/quant_sweep.md"
  step mla_prolog_sweep 115 python3 perf/bench_mla_prolog.py --sweep --no_bench --budget_s 95 --out "$OUT/mla_prolog_sweep.md"
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  step perf_smoke 60 python3 -m perf --device cuda --ops moe_gating_top_k,amla,quant_matmul --shapes deepseek_v3_T1,b64_sq1_n16_l4096,qkv_a_M1 --no-layer --repro-check 2 --out "$OUT/perf_smoke"
  ;;
round2a)  # the full report's first half + the AMLA correctness check (report only if the graph timer works)
  step perf_smoke 60 python3 -m perf --device cuda --ops moe_gating_top_k,quant_matmul --shapes deepseek_v3_T1,qkv_a_M1 --no-layer --no-dispatch --out "$OUT/perf_smoke"
  if grep -q 'timing failed' "$OUT/perf_smoke/results.json" || ! grep -q cudagraph "$OUT/perf_smoke/results.json"; then
    echo "   graph timer broken: skipping the report"; else
  step perf_part1 400 env PERF_BUDGET_S=300 bash perf/run_gpu.sh part1; fi
  step check_amla 200 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round2b)  # the full report's second half + the quant/gating and mla_prolog correctness checks
  step perf_part2 400 env PERF_BUDGET_S=300 bash perf/run_gpu.sh part2
  step check_quant_gating 100 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step check_mla_prolog 80 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round3)  # host-syncing references re-timed by the profiler timer, rms_norm rows under the near-tie row, mla_prolog re-check
  step perf_part3 240 python3 -m perf --device cuda --ops amla,mla_prolog --backends reference --no-layer --repro-check 4 --out "$OUT/perf_part3"
  step perf_part4 90 python3 -m perf --device cuda --ops rms_norm_dynamic_quant --no-layer --repro-check 2 --out "$OUT/perf_part4"
  step check_mla_prolog 80 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  ;;
round4)  # the shapes added to the named set after round 2: amla B=256 and TP heads 8/32/64, prefill 16K tokens
  step perf_part5 420 python3 -m perf --device cuda --shapes 'b256_*,b64_sq?_n8_*,b64_sq?_n32_*,b64_sq?_n64_*,*_T16384,*_M16384,deepseek_v3_T4096' --no-layer --repro-check 4 --out "$OUT/perf_part5"
  ;;
round5)  # q_b decode rows after the min_n buckets (M 64 / 128 with N ≥ 8192); qkv_a beside them for comparison
  step perf_part6 150 python3 -m perf --device cuda --ops quant_matmul --shapes 'q_b_M64,q_b_M128,qkv_a_M64,qkv_a_M128,q_b_M16,q_b_M4096' --no-layer --repro-check 2 --out "$OUT/perf_part6"
  ;;
round6)  # audit tests on CUDA (split-K counters under capture / two streams, fast quotient, prefetch programs) + decode qmm rows
  step pytest_audit 150 python3 -m pytest tests/test_quant_triton.py -q -k "under_cuda_graph_capture or concurrently_on_two_streams"
  step perf_part7 120 python3 -m perf --device cuda --ops quant_matmul --shapes 'qkv_a_M1,qkv_a_M16,qkv_a_M64,q_b_M1,q_b_M16' --no-layer --no-dispatch --out "$OUT/perf_part7"
  ;;
round7)  # the layer with the Triton kernels, after the kernel-path near-tie thresholds
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round8)  # mla_prolog rows after make_inputs packs int8 weights K-major on CUDA
  step perf_part8 150 python3 -m perf --device cuda --ops mla_prolog --shapes '*_a8w8' --backends triton --no-layer --no-dispatch --out "$OUT/perf_part8"
  ;;
round9)  # session 3: decode quant_matmul candidates (qkv_a, q_b M128), AMLA compute + TP-shard candidates, ncu of the compute tile
  step quant_sweep3 150 python3 perf/bench_quant_gating.py --sweep2 --sweep2-parts qmm --sweep2-budget 140 --out "$OUT/quant_sweep3.md"
  step amla_sweep 230 python3 perf/bench_amla.py "$OUT/amla_sweep3.md" --sweep-only --tp tp32,tp64 --budget 190
  step ncu_amla 90 ncu --clock-control none -k regex:_amla_fwd --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy python3 tests/gpu/ncu_amla.py
  step ncu_qmm 50 ncu --clock-control none -k regex:_qmm_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats python3 tests/gpu/ncu_qmm.py --mkn 1,7168,2112
  ;;
round10)  # session 3: mask_m decode candidates (M 1/4/16), AMLA sweep with scale_once + the new rows<=32/64 tiles, full AMLA check
  step quant_sweep4 90 python3 perf/bench_quant_gating.py --sweep2 --sweep2-parts qmm --sweep2-budget 70 --out "$OUT/quant_sweep4.md"
  step amla_sweep 150 python3 perf/bench_amla.py "$OUT/amla_sweep4.md" --sweep-only --tp tp32,tp64 --budget 120
  step check_amla 250 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round11)  # session 3: correctness + report rows for the new defaults (amla rows<=32/64 tiles, quant_matmul M<=16 N<=2560 bucket)
  step check_amla 230 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step perf_part9 120 python3 -m perf --device cuda --ops amla --shapes '*_sq2_n16_*,*_sq1_n32_*,*_sq1_n64_*,*_sq2_n32_*' --backends triton --no-layer --no-dispatch --repro-check 2 --out "$OUT/perf_part9"
  step perf_part10 60 python3 -m perf --device cuda --ops quant_matmul --shapes 'qkv_a_M1,qkv_a_M16,qkv_a_M64,moe_gate_M1,moe_gate_M16,moe_gate_M64' --backends triton --no-layer --no-dispatch --repro-check 2 --out "$OUT/perf_part10"
  ;;
round12)  # session 3: rows<=64 candidates (BM16 / BM32 tiles at 4 / 2 row blocks per request), ncu of the rows<=32 tile
  step amla_sweep 150 python3 perf/bench_amla.py "$OUT/amla_sweep5.md" --sweep-only --tp tp64 --budget 120
  step ncu_amla_tp32 60 ncu --clock-control none -k regex:_amla_fwd --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy python3 tests/gpu/ncu_amla.py --shape 64,2,16,4096
  ;;
round13)  # session 3: the rows<=64 BM16 tile: full AMLA check + its report rows
  step check_amla 230 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  step perf_part11 60 python3 -m perf --device cuda --ops amla --shapes 'b64_sq1_n64_l4096,b64_sq2_n32_l4096' --backends triton --no-layer --no-dispatch --repro-check 2 --out "$OUT/perf_part11"
  ;;
round14)  # session 3: BM16/BM32 mma.sync tiles on the compute-bound shape; the M<=128 N<=2560 quant_matmul bucket's report rows
  step amla_sweep 120 python3 perf/bench_amla.py "$OUT/amla_sweep6.md" --sweep-only --budget 90
  step perf_part12 60 python3 -m perf --device cuda --ops quant_matmul --shapes 'qkv_a_M128,moe_gate_M128' --backends triton --no-layer --no-dispatch --repro-check 2 --out "$OUT/perf_part12"
  ;;
round15)  # session 3: BM32 mma.sync tiles with Q re-read per key tile (195 TFLOPS in round 14) on all three row ranges
  step amla_sweep 200 python3 perf/bench_amla.py "$OUT/amla_sweep7.md" --sweep-only --tp tp32,tp64 --budget 170
  ;;
round16)  # session 3: rows > 32 on the BM32 q_in_loop tile: full AMLA check + its report rows
  step check_amla 230 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  step perf_part13 150 python3 -m perf --device cuda --ops amla --shapes '*_n128_*,b64_sq1_n64_l4096,b64_sq2_n32_l4096,b64_sq2_n64_l4096' --backends triton --no-layer --no-dispatch --repro-check 3 --out "$OUT/perf_part13"
  ;;
round17)  # session 3, last: the split-K CUDA-graph tests on their new shape, and the layer vs HF with the final tiles
  step pytest_graphs 90 python3 -m pytest tests/test_quant_triton.py -q -k "under_cuda_graph_capture or concurrently_on_two_streams"
  step check_layer 80 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round18)  # session 4: the transposed AMLA tiles (wgmma with 32 query rows) on the floor and TP shapes
  step amla_sweep8 200 python3 perf/bench_amla.py "$OUT/amla_sweep8.md" --sweep-only --tp tp32,tp64 --budget 180
  ;;
round19)  # session 4: mla_prolog candidates (row diagnosis, parts 2, prefetch_tail, absorb_split, T=128 tiles); AMLA guard as one magnitude compare
  step mla_prolog_sweep2 140 python3 perf/bench_mla_prolog.py --sweep --no_bench --row_diag --budget_s 95 --out "$OUT/mla_prolog_sweep2.md"
  step check_amla 160 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  step perf_amla 120 python3 -m perf --device cuda --ops amla --shapes 'b64_sq2_n128_l4096,b64_sq1_n16_l4096,b64_sq2_n16_l4096' --no-layer --no-dispatch --out "$OUT/perf_amla"
  ;;
round20)  # session 4: decode quant_matmul candidates (swap-AB, GEMV, unrolled reduction, persistent dynamic fetch) + the quant tests on CUDA
  step quant_sweep5 150 python3 perf/bench_quant_gating.py --sweep2 --sweep2-parts qmm --sweep2-budget 100 --out "$OUT/quant_sweep5.md"
  step pytest_quant_gpu 120 python3 -m pytest tests/test_quant_triton.py -q
  ;;
round21)  # session 4: quant round 6 (q_b swap tile applied for K <= 2048, M=128 candidates), the streaming floor, quant checks
  step stream_floor 120 python3 perf/bench_stream.py --out "$OUT/stream_floor.md"
  step quant_sweep6 150 python3 perf/bench_quant_gating.py --sweep2 --sweep2-parts qmm --sweep2-budget 100 --out "$OUT/quant_sweep6.md"
  step check_quant_gating 200 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  ;;
round22)  # session 4: mla_prolog round 3 (fused row+query launch, uk_l2) on the new defaults; quant M128 rows on the swap tiles
  step mla_prolog_sweep3 140 python3 perf/bench_mla_prolog.py --sweep --no_bench --budget_s 95 --out "$OUT/mla_prolog_sweep3.md"
  step check_mla_prolog 100 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step perf_qmm128 150 python3 -m perf --device cuda --ops quant_matmul --shapes '*_M128' --no-layer --no-dispatch --out "$OUT/perf_qmm128"
  ;;
round23)  # session 4, last: mla_prolog rows with the final tables (fused row+query at T=1), every GPU check on them
  step perf_mla 170 python3 -m perf --device cuda --ops mla_prolog --shapes 't*' --no-layer --no-dispatch --out "$OUT/perf_mla"
  step check_mla_prolog 100 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step check_quant_gating 130 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step check_layer 100 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round24)  # session 4: the streaming GEMV for M <= 4 (read-kernel shaped, dp4a) against the qkv_a M=1 default
  step quant_sweep7 90 python3 perf/bench_quant_gating.py --sweep2 --sweep2-parts qmm --sweep2-groups m1_gemv --sweep2-budget 50 --out "$OUT/quant_sweep7.md"
  step pytest_gemv 90 python3 -m pytest tests/test_quant_triton.py -q -k gpu_gemv_stream
  ;;
round25)  # session 4, last: the gemv_stream M=1 default on every check, M = 2..4 candidates, mla_prolog after the switch removal
  step quant_sweep8 90 python3 perf/bench_quant_gating.py --sweep2 --sweep2-parts qmm --sweep2-groups m4_gemv --sweep2-budget 40 --out "$OUT/quant_sweep8.md"
  step pytest_quant_gpu 100 python3 -m pytest tests/test_quant_triton.py -q
  step perf_qmm_m1 90 python3 -m perf --device cuda --ops quant_matmul --shapes 'qkv_a_M1,moe_gate_M1,qkv_a_M16,q_b_M1' --no-layer --no-dispatch --out "$OUT/perf_qmm_m1"
  step check_quant_gating 130 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step check_mla_prolog 100 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round26)  # session 4: the M = 2 streaming-GEMV bucket and the quant switch removal (dynamic, reduce_unroll, old gemv) on the H200
  step check_quant_gating 130 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step pytest_quant_gpu 100 python3 -m pytest tests/test_quant_triton.py -q -k gpu
  ;;
round27)  # session 4: check_mla_prolog again so its table shows the fused T = 1 launch's per-kernel time
  step check_mla_prolog 100 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  ;;
round28)  # session 5: mla_prolog query k_split (GEMM items over Hcq parts + absorption items on a counter) on CUDA
  step pytest_ksplit 120 python3 -m pytest tests/test_mla_prolog_triton.py -q -x -k "k_split or fused or modes_match"
  step mla_prolog_sweep4 230 python3 perf/bench_mla_prolog.py --sweep --no_bench --budget_s 170 --out "$OUT/mla_prolog_sweep4.md"
  ;;
round29)  # session 5: where the query launch's time goes (Nsight Compute): a8w8 T=1 fused launch (json, k_split 2), bf16 T=128 query, qkv_a M=16
  NCU="ncu --clock-control none --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section SchedulerStats"
  step ncu_mla_a8w8_t1 80 $NCU -k regex:_row_query_kernel python3 tests/gpu/ncu_mla_prolog.py --mode a8w8 --T 1
  step ncu_mla_a8w8_t1_ks2 80 $NCU -k regex:_row_query_kernel python3 tests/gpu/ncu_mla_prolog.py --mode a8w8 --T 1 --overrides '{"query": {"k_split": 2}}'
  step ncu_mla_bf16_t128 80 $NCU -k regex:_query_kernel python3 tests/gpu/ncu_mla_prolog.py --mode bf16 --T 128
  step ncu_qmm_m16 60 $NCU -k regex:_qmm_kernel python3 tests/gpu/ncu_qmm.py --mkn 16,7168,2112
  step pytest_ksplit 60 python3 -m pytest tests/test_mla_prolog_triton.py -q -x -k "k_split"
  ;;
round30)  # session 5: mla_prolog early W_UK loads + the row-wait fused launch (k_split removed after round 28; both removed after this round: no gain)
  step pytest_fused 120 python3 -m pytest tests/test_mla_prolog_triton.py -q -x -k "row_wait or fused"
  step mla_prolog_sweep5 230 python3 perf/bench_mla_prolog.py --sweep --no_bench --budget_s 170 --out "$OUT/mla_prolog_sweep5.md"
  ;;
round31)  # session 5, last: mla_prolog after the query-helper refactor and the removals (defaults unchanged)
  step check_mla_prolog 110 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  ;;
round32)  # session 5: quant_matmul qkv_a M 16 / 64 / 128 with tiny MMA CTAs (1-2 warps) split 4-14 ways, several per SM (all lost: quant_sweep9.md)
  step quant_sweep9 200 python3 perf/bench_quant_gating.py --sweep2 --sweep2-parts qmm --sweep2-groups m16_tiny,m64_tiny,m128_tiny --sweep2-budget 120 --out "$OUT/quant_sweep9.md"
  ;;
round33)  # session 5: mla_prolog query split_rope (nope + absorption and rope + RoPE as separate items, 2 x 4-warp CTAs per SM; lost 2-14 µs everywhere, removed)
  step pytest_split_rope 120 python3 -m pytest tests/test_mla_prolog_triton.py -q -x -k "split_rope or fused or modes_match"
  step mla_prolog_sweep6 230 python3 perf/bench_mla_prolog.py --sweep --no_bench --budget_s 170 --out "$OUT/mla_prolog_sweep6.md"
  ;;
round34)  # session 5: does the K-major weight walk (strided K-steps) stream slower than a contiguous read of the same bytes?
  step stream_tiles 90 python3 perf/bench_stream.py --tiles --out "$OUT/stream_tiles.md"
  ;;
round35)  # session 5: the named M = 2 quant_matmul shapes (batch-1 decode with one MTP token) into the report
  step perf_m2 150 python3 -m perf --device cuda --ops quant_matmul --shapes '*_M2' --no-layer --no-dispatch --out "$OUT/perf_m2"
  ;;
round36)  # session 6: AMLA wgmma tiles that split O's columns between programs (dv_split 2) at 64 rows per warpgroup
  step amla_sweep9 240 python3 perf/bench_amla.py "$OUT/amla_sweep9.md" --sweep-only --kinds compute --budget 200
  ;;
round37)  # session 6: AMLA without the unrounded-c compensation divisions: both floor shapes, ncu of the compute tile (amla, multiply), correctness
  step amla_sweep10 150 python3 perf/bench_amla.py "$OUT/amla_sweep10.md" --sweep-only --budget 120
  NCU="ncu --clock-control none -k regex:_amla_fwd --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats --section Occupancy --section SchedulerStats"
  step ncu_amla_default 90 $NCU python3 tests/gpu/ncu_amla.py
  step ncu_amla_default_multiply 90 $NCU python3 tests/gpu/ncu_amla.py --rescale multiply
  step check_amla 200 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round38)  # session 6: AMLA with c computed once after the last tile: both floor shapes, the report's amla rows, correctness
  step amla_sweep11 100 python3 perf/bench_amla.py "$OUT/amla_sweep11.md" --sweep-only --budget 60
  step perf_amla 330 python3 -m perf --device cuda --ops amla --no-layer --no-dispatch --out "$OUT/perf_amla"
  step check_amla 150 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round39)  # session 6: the audit fixes on CUDA (strided per-token scale, NaN query rows, int64 split offsets, k_group bound, amla NaN rows)
  step pytest_audit6 200 python3 -m pytest tests/test_mla_prolog_triton.py tests/test_strided_inputs.py tests/test_moe_gating_triton.py -q -x -k "strided or nan_token or supports_reason or split_k or modes_match or fused_row_query_modes"
  step check_quant_gating 100 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step check_mla_prolog 80 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step check_amla 250 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round40)  # session 6: check_amla alone (round 39's hit its step limit in the sweep)
  step check_amla 300 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round41)  # session 6: AMLA with loop-invariant per-key offsets (the tile's first slot in the scalar base): block sizes 128 and 64, report rows, correctness
  step amla_sweep12_bs128 110 python3 perf/bench_amla.py "$OUT/amla_sweep12_bs128.md" --sweep-only --block-size 128 --budget 60
  step amla_sweep12_bs64 80 python3 perf/bench_amla.py "$OUT/amla_sweep12_bs64.md" --sweep-only --kinds compute --budget 40
  step perf_amla 150 python3 -m perf --device cuda --ops amla --no-layer --no-dispatch --out "$OUT/perf_amla"
  step check_amla 220 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round42)  # session 6: the rows 17-32 tile after the slot-base change (TP8 + MTP shape B64 S_q2 N16), block size 128
  step amla_sweep13_tp32 120 python3 perf/bench_amla.py "$OUT/amla_sweep13_tp32.md" --sweep-only --kinds "" --tp tp32 --block-size 128 --budget 60
  ;;
round43)  # session 6: the rows 17-32 tile as the compute tile (BM32 q_in_loop, 2 programs per core) vs the old BM16 one at B 16/64/128/256 and N32 S_q1; report rows; correctness
  step amla_sweep14_tp32 75 python3 perf/bench_amla.py "$OUT/amla_sweep14_tp32.md" --sweep-only --kinds "" --tp tp32,tp32_b16,tp32_b128,tp32_b256,tp32_n32 --block-size 128 --budget 20
  step perf_amla_tp32 45 python3 -m perf --device cuda --ops amla --shapes '*_sq2_n16_*,*_sq1_n32_*' --no-layer --no-dispatch --out "$OUT/perf_amla_tp32"
  step check_amla 140 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round44)  # session 7: wgmma tiles with S's keys split between the warpgroups (s_region; the switch was removed after this round, docs/perf/amla.md session 7)
  step amla_sweep15_wg 170 python3 perf/bench_amla.py "$OUT/amla_sweep15_wg.md" --sweep-only --kinds "" --tp compute_wg,tp64_wg --block-size 128 --budget 120
  ;;
round45)  # session 7: the layer vs its fp32 emulation with the current kernels (last run in session 4), mla_prolog checks after the eager static-check memo, eager host times on the GPU
  step check_layer 120 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  step check_mla_prolog 110 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step host_overhead_gpu 90 python3 perf/host_overhead.py --gpu --repeats 5
  ;;
round46)  # session 7: amla fused_merge (the last program of a row block merges the splits; removed after this round, docs/perf/amla.md session 7) vs the merge launch; correctness; quant/gating after the eps guard
  step amla_sweep16_merge 170 python3 perf/bench_amla.py "$OUT/amla_sweep16_merge.md" --sweep-only --kinds memory --tp tp32,smallb_b1,smallb_b16,smallb_b1l1k --block-size 128 --budget 140
  step check_amla 230 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  step check_quant_gating 150 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  ;;
round47)  # session 7: amla vectorised merge (all splits of a column block in one load, 128 columns per item) vs the loop merge; correctness
  step amla_sweep17_merge 200 python3 perf/bench_amla.py "$OUT/amla_sweep17_merge.md" --sweep-only --kinds memory --tp tp32,smallb_b1,smallb_b16,smallb_b1l1k --block-size 128 --budget 170
  step check_amla 230 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round48)  # session 7: the vectorised merge from 4 KV splits on (256 columns per item), the loop below: small-batch and floor shapes, report rows of B 1 and 16, correctness
  step amla_sweep18_merge 150 python3 perf/bench_amla.py "$OUT/amla_sweep18_merge.md" --sweep-only --kinds memory --tp smallb_b1,smallb_b16,smallb_b1l1k --block-size 128 --budget 120
  step perf_amla_smallb 120 python3 -m perf --device cuda --ops amla --shapes 'b1_*,b16_*' --no-layer --no-dispatch --out "$OUT/perf_amla_smallb"
  step check_amla 220 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round49)  # session 7: the final merge rule (vectorised from 4 splits and up to 256 query rows): report rows of B 1 and 16, correctness
  step perf_amla_smallb 120 python3 -m perf --device cuda --ops amla --shapes 'b1_*,b16_*' --no-layer --no-dispatch --out "$OUT/perf_amla_smallb"
  step check_amla 200 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round50)  # session 8: quant_matmul decode with the K walk staggered per column tile (stagger; 3-30 % slower, removed after this round, docs/perf/quant_sweep10.md) vs the table's buckets; amla re-check on the session-7 review fixes
  step quant_sweep10_stagger 200 python3 perf/bench_quant_gating.py --sweep2 --sweep2-parts qmm --sweep2-groups st_m4_qkv_a,st_m16_qkv_a,st_m16_moe_gate,st_m32_qkv_a,st_m64_qkv_a,st_m128_qkv_a,st_m16_q_b,st_m64_q_b,st_m128_q_b --sweep2-budget 170 --out "$OUT/quant_sweep10.md"
  step check_amla 240 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round51)  # session 8: every check on the session-8 tree (quant K-step helper, loader/cache/layer review fixes of sessions 7-8, amla merge tile bound)
  step check_quant_gating 150 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step check_mla_prolog 110 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step check_layer 120 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  step check_amla 200 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round52)  # session 8: the final tree after the review fixes (host-side checks, fake impl, layer pre-checks): quant/gating, layer, amla
  step check_quant_gating 150 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step check_layer 120 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  step check_amla 220 python3 tests/gpu/check_amla.py --out "$OUT/check_amla_report.txt"
  ;;
round53)  # session 8: moe_gating_top_k with the packed selection key (one int64 max per round) vs the table; quant/gating correctness with it
  step gating_ab 120 python3 perf/bench_gating_ab.py --out "$OUT/gating_ab.md"
  ;;
round54)  # session 8: packed gating selection for 2-byte logits as the cuda default: A/B again, report rows, quant/gating correctness
  step gating_ab 120 python3 perf/bench_gating_ab.py --out "$OUT/gating_ab.md"
  step perf_gating 120 python3 -m perf --device cuda --ops moe_gating_top_k --no-layer --no-dispatch --out "$OUT/perf_gating"
  step check_quant_gating 150 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  ;;
round55)  # session 9: host-side changes only (scalar checks, torch.ops docs, perf CLI, layer checks) on torch 2.11 / triton 3.6; new mla_prolog tests on CUDA
  step pytest_host 150 python3 -m pytest -q -p no:cacheprovider tests/test_registry.py tests/test_moe_gating.py tests/test_moe_gating_triton.py
  step check_mla_prolog 80 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step perf_smoke 90 python3 -m perf --device cuda --quick --ops moe_gating_top_k,quant_matmul,amla --shapes deepseek_v3_T1,qkv_a_M1,b64_sq1_n16_l4096 --no-layer --out "$OUT/perf_smoke"
  ;;
round56)  # session 9: every Triton kernel under compute-sanitizer memcheck (exact-size allocations)
  step sanitize_self_test 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 5 python3 tests/gpu/sanitize.py --self-test
  step sanitize 440 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --budget-s 380
  ;;
round57)  # session 9: the same cases under compute-sanitizer initcheck (a read of device memory nothing wrote)
  step initcheck 500 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool initcheck --error-exitcode 9 --print-limit 20 python3 tests/gpu/sanitize.py --budget-s 420
  ;;
round58)  # session 10: programmatic dependent launch for the decode quant_matmul launches, A/B against the table
  step pdl_ab 420 python3 perf/bench_pdl_ab.py --rounds 3 --out "$OUT/pdl_ab.md"
  ;;
round59)  # session 10: does PDL overlap here (eager / graph), and the qmm PDL variants with and without the prefetch
  step pdl_probe 200 python3 tests/gpu/pdl_probe.py
  ;;
round60)  # session 10: PDL (no prefetch) and stage counts on every decode GEMM shape, A/B against the table
  C='pdl=pdl:1;s3=num_stages:3;s4=num_stages:4;s4pdl=num_stages:4,pdl:1'
  step qmm_ab1 280 python3 perf/bench_pdl_ab.py --rounds 3 --cands "$C" --out "$OUT/qmm_ab1.md" --shapes qkv_a_M1,qkv_a_M2,qkv_a_M16,qkv_a_M64,qkv_a_M128,q_b_M1,q_b_M2,q_b_M16,q_b_M64,q_b_M128,o_proj_M1,o_proj_M2,o_proj_M16,o_proj_M64,o_proj_M128,moe_gate_M1,moe_gate_M2,moe_gate_M16,moe_gate_M64,moe_gate_M128
  step qmm_ab2 280 python3 perf/bench_pdl_ab.py --rounds 3 --cands "$C" --out "$OUT/qmm_ab2.md" --shapes moe_gate_up_M1,moe_gate_up_M2,moe_gate_up_M16,moe_gate_up_M64,moe_gate_up_M128,moe_down_M1,moe_down_M2,moe_down_M16,moe_down_M64,moe_down_M128,dense_gate_M1,dense_gate_M2,dense_gate_M16,dense_gate_M64,dense_gate_M128,dense_down_M1,dense_down_M2,dense_down_M16,dense_down_M64,dense_down_M128
  ;;
round61)  # session 10: the re-tuned decode buckets (pdl M33-64, stages by N): GPU tests, check, A/B against the old buckets, report rows
  step pytest_gpu 200 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or pdl or session_10"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  S=q_b_M1,q_b_M2,q_b_M16,dense_gate_M1,dense_gate_M2,dense_gate_M16,o_proj_M64,dense_down_M64,moe_down_M64,qkv_a_M64,moe_gate_M64,moe_gate_up_M64
  step qmm_ab3 200 python3 perf/bench_pdl_ab.py --rounds 3 --cands 'old_s5=num_stages:5;nopdl=pdl:0' --out "$OUT/qmm_ab3.md" --shapes $S
  step perf_qmm 120 python3 -m perf --device cuda --ops quant_matmul --shapes $S --no-layer --no-dispatch --out "$OUT/perf_qmm"
  ;;
round62)  # session 10: mla_prolog PDL sweep (per launch and all launches); every quant_matmul Triton row re-measured on the current table
  step mla_prolog_sweep 270 python3 perf/bench_mla_prolog.py --sweep --no_bench --budget_s 210 --out "$OUT/mla_prolog_sweep7.md"
  step perf_qmm_all 280 python3 -m perf --device cuda --ops quant_matmul --backends triton --no-layer --no-dispatch --out "$OUT/perf_qmm_all"
  ;;
round63)  # session 10: the layer on the re-tuned quant_matmul table; quant_matmul launches (PDL and the new buckets) under memcheck
  step check_layer 90 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  step sanitize_self_test 60 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 5 python3 tests/gpu/sanitize.py --self-test
  step sanitize_qmm 300 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul --budget-s 260
  ;;
round64)  # session 10: PDL where the next call's programs cannot share an SM (more stages: one program per SM)
  step qmm_ab4 200 python3 perf/bench_pdl_ab.py --rounds 3 --cands 'pdl=pdl:1;s9=num_stages:9;s9pdl=num_stages:9,pdl:1;s10pdl=num_stages:10,pdl:1' --out "$OUT/qmm_ab4.md" --shapes qkv_a_M4,qkv_a_M16,moe_gate_M4,moe_gate_M16
  step qmm_ab5 200 python3 perf/bench_pdl_ab.py --rounds 3 --cands 's5=num_stages:5;s5pdl=num_stages:5,pdl:1;s6pdl=num_stages:6,pdl:1' --out "$OUT/qmm_ab5.md" --shapes qkv_a_M128,moe_gate_M128,qkv_a_M64,moe_gate_M64
  ;;
round65)  # session 10: BN16 tile at 9 stages + PDL; PDL where the producer is a row kernel (pairs); GPU tests incl. the early-trigger control
  step pytest_gpu 240 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or pdl or session_10"
  step pdl_pair 200 python3 perf/bench_pdl_pair.py --rounds 3 --out "$OUT/pdl_pair.md"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step perf_qmm16 80 python3 -m perf --device cuda --ops quant_matmul --shapes qkv_a_M16,moe_gate_M16 --backends triton --no-layer --no-dispatch --out "$OUT/perf_qmm16"
  ;;
round66)  # session 10: PDL in the decode row buckets too: pairs (table column), checks, memcheck of the quant kernels, row-op report rows
  step pytest_gpu 200 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or pdl or session_10"
  step pdl_pair 120 python3 perf/bench_pdl_pair.py --rounds 3 --out "$OUT/pdl_pair.md"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step sanitize_quant 150 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul,dynamic_quant,rms_norm_dynamic_quant --budget-s 120
  step perf_rows 120 python3 -m perf --device cuda --ops dynamic_quant,rms_norm_dynamic_quant --backends triton --no-layer --no-dispatch --out "$OUT/perf_rows"
  ;;
round67)  # session 10 final table: PDL at M 3..16 only (row ops + the BN16 GEMM); pairs, GPU tests, checks, the M64 rows back without PDL
  step pytest_gpu 200 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or pdl or session_10"
  step pdl_pair 120 python3 perf/bench_pdl_pair.py --rounds 3 --out "$OUT/pdl_pair.md"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step perf_rows 120 python3 -m perf --device cuda --ops quant_matmul,dynamic_quant,rms_norm_dynamic_quant --shapes 'qkv_a_M64,moe_gate_M64,moe_gate_up_M64,*_T1,*_T16,*_T64,qkv_a_M16,moe_gate_M16' --backends triton --no-layer --no-dispatch --out "$OUT/perf_rows"
  ;;
round69)  # session 11: bucket key k_batch (batched 3-D dot, one warp per K slice) on the decode tiles
  step kbatch_ab 420 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M16,moe_gate_M16,qkv_a_M4,qkv_a_M32,qkv_a_M64,qkv_a_M128,q_b_M16 --cands 'kb2=k_batch:2;kb4=k_batch:4;kb8=k_batch:8;kb8w8=k_batch:8,num_warps:8;kb4s6=k_batch:4,num_stages:6' --out "$OUT/kbatch_ab.md"
  ;;
round70)  # session 11: k_batch refinements at M 3..16; BN16 + k_batch tiles for M 17..64
  step kb_m16 200 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M16,moe_gate_M16,qkv_a_M4,qkv_a_M8 --cands 'kb4=k_batch:4;kb4s8=k_batch:4,num_stages:8;kb4s10=k_batch:4,num_stages:10;kb4k1024=k_batch:4,BLOCK_K:1024,num_stages:4;kb8k1024=k_batch:8,BLOCK_K:1024,num_stages:4;kb4nopdl=k_batch:4,pdl:0' --out "$OUT/kb_m16.md"
  step kb_m32 150 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M32,moe_gate_M32,qkv_a_M24 --cands 'n16k512s6=BLOCK_N:16,BLOCK_K:512,num_stages:6,k_batch:4,split_k:1;n16k256s9=BLOCK_N:16,BLOCK_K:256,num_stages:9,k_batch:4,split_k:1;n16k512s6pdl=BLOCK_N:16,BLOCK_K:512,num_stages:6,k_batch:4,split_k:1,pdl:1;n32k512s4=BLOCK_N:32,BLOCK_K:512,num_stages:4,k_batch:4,split_k:2' --out "$OUT/kb_m32.md"
  step kb_m64 150 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M64,moe_gate_M64,qkv_a_M48 --cands 'n16k256s6=BLOCK_N:16,BLOCK_K:256,num_stages:6,k_batch:4,split_k:1;n16k512s4=BLOCK_N:16,BLOCK_K:512,num_stages:4,k_batch:4,split_k:1;n16k256s4w8=BLOCK_N:16,BLOCK_K:256,num_stages:4,k_batch:8,num_warps:8,split_k:1;m32n16=BLOCK_M:32,BLOCK_N:16,BLOCK_K:512,num_stages:6,k_batch:4,split_k:1' --out "$OUT/kb_m64.md"
  ;;
round71)  # session 11 table (k_batch at M 3..32, N <= 2560): GPU tests, checks, memcheck, pairs; k_batch tiles for M 33..128
  step pytest_gpu 200 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or pdl or k_batch or session_11"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step sanitize_quant 150 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul --budget-s 120
  step pdl_pair 100 python3 perf/bench_pdl_pair.py --rounds 3 --shapes qkv_a_M16,qkv_a_M24,qkv_a_M32,moe_gate_M32 --out "$OUT/pdl_pair.md"
  step kb_m64 150 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M64,moe_gate_M64,qkv_a_M48 --cands 'n32s4=BLOCK_N:32,BLOCK_K:512,num_stages:4,k_batch:4,split_k:2;n32s4pdl=BLOCK_N:32,BLOCK_K:512,num_stages:4,k_batch:4,split_k:2,pdl:1;n32s3=BLOCK_N:32,BLOCK_K:512,num_stages:3,k_batch:4,split_k:2;m32n32s3=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,num_stages:3,k_batch:4,split_k:2;n64k4s2=BLOCK_N:64,BLOCK_K:512,num_stages:2,k_batch:4,split_k:4' --out "$OUT/kb_m64.md"
  step kb_m128 150 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M128,moe_gate_M128,qkv_a_M96 --cands 'm128n32k4=BLOCK_M:128,BLOCK_N:32,BLOCK_K:512,num_stages:2,k_batch:4,split_k:4;m64n32s2=BLOCK_N:32,BLOCK_K:512,num_stages:2,k_batch:4,split_k:2;m128n32kb2=BLOCK_M:128,BLOCK_N:32,BLOCK_K:256,num_stages:4,k_batch:2,split_k:4;m64n32s4g1=BLOCK_N:32,BLOCK_K:512,num_stages:4,k_batch:4,split_k:2,GROUP_M:1' --out "$OUT/kb_m128.md"
  step perf_rows 120 python3 -m perf --device cuda --ops quant_matmul --shapes 'qkv_a_M16,moe_gate_M16' --backends triton --no-layer --no-dispatch --out "$OUT/perf_rows"
  ;;
round72)  # session 11: row-op PDL at T 17..32? pairs with PDL and non-PDL GEMMs, rows alone back to back; layer check
  step pdl_pair 200 python3 perf/bench_pdl_pair.py --rounds 3 --shapes qkv_a_M16,qkv_a_M24,qkv_a_M32,moe_gate_M32,q_b_M32,o_proj_M32,moe_down_M32,qkv_a_M64 --out "$OUT/pdl_pair.md"
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round73)  # session 11 final table (+ rms_norm_dynamic_quant PDL at T 17..32): GPU tests, checks, layer; k_batch on the BN64 M <= 16 tiles
  step pytest_gpu 200 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or pdl or k_batch or session_11"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  step pdl_pair 100 python3 perf/bench_pdl_pair.py --rounds 3 --shapes qkv_a_M16,qkv_a_M32,moe_gate_M32,q_b_M32 --out "$OUT/pdl_pair.md"
  step kb_bn64 200 python3 perf/bench_pdl_ab.py --rounds 3 --shapes q_b_M16,dense_gate_M16,o_proj_M16,moe_gate_up_M16,moe_down_M16,qkv_a_M16 --cands 'k512kb4s3=BLOCK_K:512,k_batch:4,num_stages:3;k512kb4s4=BLOCK_K:512,k_batch:4,num_stages:4;k1024kb8w8s5=BLOCK_K:1024,k_batch:8,num_warps:8,num_stages:5' --out "$OUT/kb_bn64.md"
  ;;
round74)  # session 11: the 32-row BN16 k_batch tile at M 33..128 with several programs per SM (fewer stages)
  step kb_m64_multi 200 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M64,moe_gate_M64,qkv_a_M128,moe_gate_M128 --cands 'm32s3g2=BLOCK_M:32,BLOCK_N:16,BLOCK_K:512,k_batch:4,split_k:1,num_stages:3,GROUP_M:2,mask_m:1;m32s4g2=BLOCK_M:32,BLOCK_N:16,BLOCK_K:512,k_batch:4,split_k:1,num_stages:4,GROUP_M:2,mask_m:1;m32s5g2=BLOCK_M:32,BLOCK_N:16,BLOCK_K:512,k_batch:4,split_k:1,num_stages:5,GROUP_M:2,mask_m:1;m32s3g4=BLOCK_M:32,BLOCK_N:16,BLOCK_K:512,k_batch:4,split_k:1,num_stages:3,GROUP_M:4,mask_m:1;m64s3=BLOCK_M:64,BLOCK_N:16,BLOCK_K:512,k_batch:4,split_k:1,num_stages:3,GROUP_M:2,mask_m:1;m16s3g4=BLOCK_M:16,BLOCK_N:16,BLOCK_K:512,k_batch:4,split_k:1,num_stages:3,GROUP_M:4,mask_m:1' --out "$OUT/kb_m64_multi.md"
  ;;
round75)  # session 11: Nsight Compute of the decode tiles: qkv_a M64 (64x32 wgmma, 2 splits), M32 and M16 (BN16 k_batch)
  step ncu_qmm_m64 60 ncu --clock-control none -k regex:_qmm_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy python3 tests/gpu/ncu_qmm.py --mkn 64,7168,2112
  step ncu_qmm_m32 60 ncu --clock-control none -k regex:_qmm_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy python3 tests/gpu/ncu_qmm.py --mkn 32,7168,2112
  step ncu_qmm_m16 60 ncu --clock-control none -k regex:_qmm_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy python3 tests/gpu/ncu_qmm.py --mkn 16,7168,2112
  ;;
round76)  # session 11: more warps / programs per SM for the latency-bound decode tiles (ncu: 4 warps per SM, 6.3 cycles per issue)
  step kb_warps 200 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M16,moe_gate_M16,qkv_a_M32,qkv_a_M64,moe_gate_M64 --cands 'w8=num_warps:8;k2s4=split_k:2,num_stages:4;k2s4nopdl=split_k:2,num_stages:4,pdl:0;k2s6=split_k:2,num_stages:6;w8s3=num_warps:8,num_stages:3' --out "$OUT/kb_warps.md"
  ;;
round77)  # session 11: the 32-row BN16 tile with and without mask_m (round 70 timed it without: 7.48 us; the table with: 8.46 in round 76)
  step m32_mask 150 python3 perf/bench_pdl_ab.py --rounds 5 --shapes qkv_a_M32,moe_gate_M32,qkv_a_M24,qkv_a_M17,qkv_a_M16 --cands 'nomask=mask_m:0;nomask2=mask_m:0;same=mask_m:1' --out "$OUT/m32_mask.md"
  ;;
round78)  # session 11 final table (M 17..32 tile wraps rows): GPU tests, checks, memcheck, layer
  step pytest_gpu 200 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or pdl or k_batch or session_11"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step sanitize_quant 150 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul,dynamic_quant,rms_norm_dynamic_quant --budget-s 120
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round79)  # session 11: k_batch 4 on 8 warps (warps [4, 1, 2]: slices x column halves) for the M 33..128 tiles
  step kb_w8 200 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M64,moe_gate_M64,qkv_a_M128,moe_gate_M128 --cands 'n32w8s4=BLOCK_N:32,BLOCK_K:512,k_batch:4,num_warps:8,num_stages:4,split_k:2;n32w8s3=BLOCK_N:32,BLOCK_K:512,k_batch:4,num_warps:8,num_stages:3,split_k:2;n64w8s3k4=BLOCK_N:64,BLOCK_K:512,k_batch:4,num_warps:8,num_stages:3,split_k:4;n32w8s4pdl=BLOCK_N:32,BLOCK_K:512,k_batch:4,num_warps:8,num_stages:4,split_k:2,pdl:1' --out "$OUT/kb_w8.md"
  ;;
round80)  # session 11: report rows at M / T 32 (new spec shapes: the M 17..32 tiles and rms_norm_dynamic_quant PDL there)
  step perf_32 200 python3 -m perf --device cuda --ops quant_matmul,dynamic_quant,rms_norm_dynamic_quant --shapes '*_M32,*_T32' --no-layer --no-dispatch --out "$OUT/perf_32"
  ;;
round81)  # session 11: the T 16 / 32 row-op report rows with and without PDL (DS_OPS_PDL=0), same run
  step perf_rows_pdl 100 python3 -m perf --device cuda --ops dynamic_quant,rms_norm_dynamic_quant --shapes '*_T16,*_T32' --backends triton --no-layer --no-dispatch --out "$OUT/perf_rows_pdl"
  step perf_rows_nopdl 100 env DS_OPS_PDL=0 python3 -m perf --device cuda --ops dynamic_quant,rms_norm_dynamic_quant --shapes '*_T16,*_T32' --backends triton --no-layer --no-dispatch --out "$OUT/perf_rows_nopdl"
  step perf_rows_pdl2 100 python3 -m perf --device cuda --ops dynamic_quant,rms_norm_dynamic_quant --shapes '*_T16,*_T32' --backends triton --no-layer --no-dispatch --out "$OUT/perf_rows_pdl2"
  ;;
round82)  # session 11: memcheck of quant_matmul incl. k_batch configs beyond the table (tails, splits, layouts)
  step sanitize_quant 150 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul --budget-s 120
  ;;
round83)  # session 11 review refactor: the four A/B benches on median_graph_us, PDL GPU tests on pdl_kwargs / pdl_enter
  step pytest_pdl 150 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py tests/test_amla_triton.py -k "gpu or pdl"
  step pdl_ab 60 python3 perf/bench_pdl_ab.py --rounds 1 --shapes qkv_a_M16 --cands 'nopdl=pdl:0'
  step pdl_pair 60 python3 perf/bench_pdl_pair.py --rounds 1 --shapes qkv_a_M16
  step amla_pdl 60 python3 perf/bench_amla_pdl.py --rounds 1 --shapes b1_sq1_n16_l4096
  step gating_ab 60 python3 perf/bench_gating_ab.py --rounds 1
  ;;
round84)  # session 12: qkv_a M 33..128 without K splits: 32x32 / 32x64 k_batch tiles and the 64x32 wgmma tile over row blocks; ncu stall reasons at M64
  step m64 170 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M64,moe_gate_M64,qkv_a_M48 --cands 'm32n32s6=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,k_batch:4,split_k:1,num_stages:6,GROUP_M:2;m32n32s5=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,k_batch:4,split_k:1,num_stages:5,GROUP_M:2;m32n32s4=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,k_batch:4,split_k:1,num_stages:4,GROUP_M:2;m32n32s6g1=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,k_batch:4,split_k:1,num_stages:6,GROUP_M:1;m32n32s6pdl=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,k_batch:4,split_k:1,num_stages:6,GROUP_M:2,pdl:1' --out "$OUT/m64.md"
  step m128 170 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M128,moe_gate_M128,qkv_a_M96 --cands 'm32n32s3g4=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,k_batch:4,split_k:1,num_stages:3,GROUP_M:4;m32n32s4g4=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,k_batch:4,split_k:1,num_stages:4,GROUP_M:4;m32n32s6g4=BLOCK_M:32,BLOCK_N:32,BLOCK_K:512,k_batch:4,split_k:1,num_stages:6,GROUP_M:4;m32n64s4g4=BLOCK_M:32,BLOCK_N:64,BLOCK_K:512,k_batch:4,split_k:1,num_stages:4,GROUP_M:4;m64n32s6g2=BLOCK_M:64,BLOCK_N:32,BLOCK_K:256,split_k:1,num_stages:6,GROUP_M:2' --out "$OUT/m128.md"
  NCU="ncu --clock-control none -k regex:_qmm_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
  step ncu_m64_table 60 $NCU python3 tests/gpu/ncu_qmm.py --mkn 64,7168,2112
  step ncu_m64_m32n32 60 $NCU python3 tests/gpu/ncu_qmm.py --mkn 64,7168,2112 --config '{"max_m": 64, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 512, "k_batch": 4, "split_k": 1, "num_stages": 6, "GROUP_M": 2, "num_warps": 4, "reduce": "atomic"}'
  ;;
round85)  # session 12: around round 84's best M128 candidate (64x32 wgmma, no K split, 6 stages); 64x64 / 128x64 with splits; M64 64x64 split 4, 64x16 no split
  step m128b 200 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M128,moe_gate_M128,qkv_a_M96,qkv_a_M72 --cands 's6g2=BLOCK_M:64,BLOCK_N:32,BLOCK_K:256,split_k:1,num_stages:6,GROUP_M:2;s8g2=BLOCK_M:64,BLOCK_N:32,BLOCK_K:256,split_k:1,num_stages:8,GROUP_M:2;s5g2=BLOCK_M:64,BLOCK_N:32,BLOCK_K:256,split_k:1,num_stages:5,GROUP_M:2;s6g1=BLOCK_M:64,BLOCK_N:32,BLOCK_K:256,split_k:1,num_stages:6,GROUP_M:1;k128s10=BLOCK_M:64,BLOCK_N:32,BLOCK_K:128,split_k:1,num_stages:10,GROUP_M:2;n64sp2=BLOCK_M:64,BLOCK_N:64,BLOCK_K:256,split_k:2,num_stages:5,GROUP_M:2;m128n64sp4=BLOCK_M:128,BLOCK_N:64,BLOCK_K:128,split_k:4,num_stages:6,GROUP_M:1' --out "$OUT/m128b.md"
  step m64b 150 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M64,moe_gate_M64,qkv_a_M40 --cands 'n64sp4=BLOCK_M:64,BLOCK_N:64,BLOCK_K:256,split_k:4,num_stages:5;n16s8=BLOCK_M:64,BLOCK_N:16,BLOCK_K:256,split_k:1,num_stages:8;k128s10sp2=BLOCK_M:64,BLOCK_N:32,BLOCK_K:128,split_k:2,num_stages:10' --out "$OUT/m64b.md"
  ;;
round86)  # session 12: the M 65..128 no-split bucket: GPU quant tests, quick check, memcheck, report rows, layer
  step pytest_gpu 200 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or pdl or k_batch"
  step check_quant_gating 110 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step sanitize_quant 130 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul --budget-s 100
  step perf_128 120 python3 -m perf --device cuda --ops quant_matmul --shapes 'qkv_a_M128,moe_gate_M128' --no-layer --no-dispatch --out "$OUT/perf_128"
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round87)  # session 12: the streaming GEMV (gemv_stream, now only at N <= 2560) on the wide-N GEMMs at M 1 / 2
  step gemv_wide 240 python3 perf/bench_pdl_ab.py --rounds 3 --shapes q_b_M1,o_proj_M1,dense_gate_M1,moe_gate_up_M1,moe_down_M1,q_b_M2,moe_gate_up_M2 --cands 'gs16=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:1,BLOCK_K:1024,num_warps:1,programs_per_sm:16;gs16k512=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:1,BLOCK_K:512,num_warps:1,programs_per_sm:16;gs8=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:1,BLOCK_K:1024,num_warps:1,programs_per_sm:8;gs4w4pf=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:4,BLOCK_K:1024,num_warps:4,programs_per_sm:4,prefetch:1' --out "$OUT/gemv_wide.md"
  ;;
round88)  # session 12: the streaming GEMV at M 2 on the wide-N GEMMs with K >= 2048 (round 87: M 1 gains 13-27 %)
  step gemv_wide_m2 200 python3 perf/bench_pdl_ab.py --rounds 3 --shapes o_proj_M2,dense_gate_M2,moe_gate_up_M2,moe_down_M2,dense_down_M2 --cands 'w4pf=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:4,BLOCK_K:1024,num_warps:4,programs_per_sm:4,prefetch:1;w4=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:4,BLOCK_K:1024,num_warps:4,programs_per_sm:4;w2pf=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:2,BLOCK_K:1024,num_warps:2,programs_per_sm:8,prefetch:1;w1p16=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:1,BLOCK_K:1024,num_warps:1,programs_per_sm:16;w4pf8=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:4,BLOCK_K:1024,num_warps:4,programs_per_sm:8,prefetch:1' --out "$OUT/gemv_wide_m2.md"
  step gemv_dense_down_m1 60 python3 perf/bench_pdl_ab.py --rounds 3 --shapes dense_down_M1 --cands 'gs16=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_N:1,BLOCK_K:1024,num_warps:1,programs_per_sm:16' --out "$OUT/gemv_dense_down_m1.md"
  ;;
round89)  # session 12: the wide streaming-GEMV buckets (M 1 / 2, N > 2560, K >= 2048): checks, memcheck, report rows; narrow M2 at 8 programs per SM
  step check_quant_gating 130 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step sanitize_quant 130 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul --budget-s 100
  step perf_m12 150 python3 -m perf --device cuda --ops quant_matmul --shapes '*_M1,*_M2' --no-layer --no-dispatch --out "$OUT/perf_m12"
  step m2_narrow 60 python3 perf/bench_pdl_ab.py --rounds 3 --shapes qkv_a_M2,moe_gate_M2 --cands 'p8=programs_per_sm:8' --out "$OUT/m2_narrow.md"
  step pytest_gpu 150 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gpu or gemv"
  ;;
round90)  # session 12: the 4-row streaming GEMV at M 3..4 on the wide-N GEMMs (K >= 2048)
  step gemv_wide_m4 200 python3 perf/bench_pdl_ab.py --rounds 3 --shapes o_proj_M4,dense_gate_M4,dense_down_M4,moe_gate_up_M4,moe_down_M4,o_proj_M3,moe_down_M3 --cands 'w4pf8=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_K:1024,BLOCK_N:4,num_warps:4,programs_per_sm:8,prefetch:1;w4pf4=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_K:1024,BLOCK_N:4,num_warps:4,programs_per_sm:4,prefetch:1;w4p8=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_K:1024,BLOCK_N:4,num_warps:4,programs_per_sm:8;w2pf8=mma:gemv_stream,BLOCK_M:4,num_stages:1,split_k:1,dp4a:1,BLOCK_K:1024,BLOCK_N:2,num_warps:2,programs_per_sm:8,prefetch:1' --out "$OUT/gemv_wide_m4.md"
  ;;
round91)  # session 12: one dense decoder layer by CUDA-graph replay, PDL as configured / off / on every decode bucket
  step layer_graph 420 python3 perf/bench_layer_graph.py --rounds 3 --out "$OUT/layer_graph.md"
  ;;
round92)  # session 12: memcheck with the wide-GEMV cases (odd K / N, row-major), check_layer on the layer's inv_freq change
  step sanitize_quant 130 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul --budget-s 100
  step check_layer 60 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round93)  # session 14: what feeds decode quant_matmul at M 16..128 -- the subset kernel vs TMA / warp-specialised Triton (experiment) and cuBLAS
  step feed_limit 400 python3 perf/bench_feed_limit.py --shapes 16,32,64,128 --rounds 3 --out "$OUT/feed_limit.md"
  ;;
round94)  # session 14: mla_prolog against its three GEMMs alone on cuBLAS (bf16 matmul / int8 _int_mm), rotated weights
  step prolog_gemms 300 python3 perf/bench_prolog_gemms.py --T 1,32,128 --modes bf16,a8w8 --rounds 3 --out "$OUT/prolog_gemms.md"
  ;;
round95)  # session 14: mla_prolog A8W8 T <= 2 per-kernel times against the down GEMM's split count
  step probe_prolog_split 200 python3 tests/gpu/probe_prolog_split.py
  ;;
round96)  # session 14: mla_prolog's down GEMM on quant_matmul's streaming GEMV at A8W8 T = 1 (down.gemv_max_t 1): CUDA tests, check, memcheck, report rows
  step pytest_gpu 100 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gemv_stream_int32 or gpu"
  step check_mla_prolog 130 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step sanitize_mla 150 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only mla_prolog --budget-s 120
  step probe_prolog_split 100 python3 tests/gpu/probe_prolog_split.py
  step perf_mla 120 python3 -m perf --device cuda --ops mla_prolog --shapes 't*_n128_*' --no-layer --no-dispatch --out "$OUT/perf_mla"
  ;;
round97)  # session 14: the GEMV kernel's new arguments (w2_ptr, N1, TWO_W) on the quant_matmul paths, and the layer with the A8W8 T = 1 GEMV down
  step check_quant_gating 130 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step sanitize_quant 150 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 30 python3 tests/gpu/sanitize.py --only quant_matmul --budget-s 120
  step check_layer 80 python3 tests/gpu/check_layer.py --out "$OUT/check_layer_report.txt"
  ;;
round98)  # session 14, after the review: gemv_stream_int32 dropping dp4a where illegal, 'down' overrides selecting the down kernel; CUDA tests and the mla_prolog check
  step pytest_gpu 100 python3 -m pytest -q -p no:cacheprovider tests/test_quant_triton.py -k "gemv_stream_int32 or gpu"
  step check_mla_prolog 130 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step probe_prolog_split 100 python3 tests/gpu/probe_prolog_split.py
  ;;
round68)  # session 10: amla with PDL on both launches (table pdl true in the working tree): A/B, then the AMLA check on it
  step amla_pdl 150 python3 perf/bench_amla_pdl.py --rounds 3 --out "$OUT/amla_pdl.md"
  step check_amla 150 python3 tests/gpu/check_amla.py --sweep 4 --out "$OUT/check_amla_report.txt"
  ;;
final)
  step diag_mla_prolog 45 python3 tests/gpu/diag_mla_prolog_cache.py
  step check_amla 105 python3 tests/gpu/check_amla.py --sweep 4 --out "$OUT/check_amla_report.txt"
  step bench_amla 55 python3 perf/bench_amla.py "$OUT/amla_results.md" --quick
  ;;
*)
  step check_quant_gating 100 python3 tests/gpu/check_quant_gating.py --quick --out "$OUT/check_quant_gating_report.txt"
  step check_mla_prolog 75 python3 tests/gpu/check_mla_prolog.py --out "$OUT" --budget_s 30 --warm_timeout_s 40
  step check_amla 170 python3 tests/gpu/check_amla.py --sweep 10 --out "$OUT/check_amla_report.txt"
  step bench_amla 75 python3 perf/bench_amla.py "$OUT/amla_sweep.md" --sweep-only
  step perf 110 python3 -m perf --device cuda --quick --out "$OUT/perf" --budget-s 70
  ;;
esac
ls -la "$OUT" "$OUT/perf" 2>/dev/null
tar czf "$FINAL/gpu_results.tgz" -C "$OUT" . && echo "wrote $FINAL/gpu_results.tgz"
