// The modeled 910B (Atlas A2): memory sizes and the rates of the twin's timing model, with their sources.
// Every time the twin reports is "modeled 910B", never measured.
#pragma once
#include <cstdint>

namespace twin::model {
// On-chip memories per core (notes/ascendc.md §3; hiascend "Hardware architecture / storage units" pages).
constexpr uint32_t UB_BYTES = 192 * 1024;    // Unified Buffer per vector core
constexpr uint32_t L1_BYTES = 512 * 1024;    // L1 per cube core
constexpr uint32_t L0A_BYTES = 64 * 1024;
constexpr uint32_t L0B_BYTES = 64 * 1024;
constexpr uint32_t L0C_BYTES = 128 * 1024;
constexpr uint32_t UB_ALIGN = 32, L1_ALIGN = 32, L0AB_ALIGN = 512, L0C_ALIGN = 64;
constexpr uint32_t MAX_BUFFERS_PER_POSITION = 8;  // TQue buffers per TPosition (InitBuffer constraints)
constexpr uint32_t MAX_BUFFERS_PER_KERNEL = 64;
constexpr uint32_t MAX_EVENT_ID = 8;              // event ids 0..7 per HardEvent
constexpr uint32_t VECTOR_CORES = 40;             // Atlas A2 910B3: 20 AIC / 40 AIV (notes/ascendc.md §3)

// Clock: 1.8 GHz, the figure perf/peaks.py uses for the 910B cube peaks ("clock assumed as in the AMLA
// deployment estimate, unverified"); public figures for the 910B range 1.65-1.85 GHz.
constexpr double CLOCK_GHZ = 1.8;
// HBM: 1.6 TB/s shared by all cores (perf/peaks.py PEAKS["ascend_910b3"].hbm_tbs, a derived third-party figure).
constexpr double HBM_BYTES_PER_NS = 1600.0;       // 1.6e12 B/s
// Vector unit: one 256-byte repeat per cycle per core (256 B/cycle; "one repeat = 8 blocks of 32 B").
constexpr double VECTOR_BYTES_PER_CYCLE = 256.0;
// Transcendental / divide ops: assumed 2 cycles per repeat (no public per-instruction table; assumption).
constexpr double VECTOR_SLOW_CYCLES_PER_REPEAT = 2.0;
// Per-core MTE (DMA) rate: assumed 128 B/cycle (230 GB/s at 1.8 GHz), so that ~7 cores saturate HBM (assumption).
constexpr double MTE_BYTES_PER_CYCLE = 128.0;
// Fixed latencies (assumptions, stated in ascendc/twin/README.md): DMA setup per DataCopy call, vector
// instruction issue-to-first-result, one scalar (S pipe) op, one API call issued by the scalar unit.
constexpr double MTE_LATENCY_CYCLES = 300.0;
constexpr double VECTOR_LATENCY_CYCLES = 16.0;
constexpr double SCALAR_OP_CYCLES = 4.0;
constexpr double ISSUE_CYCLES = 2.0;
constexpr double SYNCALL_CYCLES = 500.0;          // cross-core barrier (assumption)
constexpr double LAUNCH_OVERHEAD_NS = 2000.0;     // kernel launch (assumption; typical few-us NPU launch)

// Cube unit (AIC): perf/peaks.py PEAKS["ascend_910b3"].bf16 = 294.9 TFLOPS over 20 cube cores at 1.8 GHz
// = 8192 FLOP = 4096 MAC per cycle per core (one 16x16x16 fp16/bf16 fractal product per cycle); int8 twice that
// (one 16x32x16 int8 product per cycle; peaks.py int8 = 2 x bf16, HotChips 31). Both derived, not measured.
constexpr uint32_t CUBE_CORES = 20;               // Atlas A2 910B3 AIC count
constexpr double CUBE_FP16_MACS_PER_CYCLE = 4096.0;
constexpr double CUBE_INT8_MACS_PER_CYCLE = 8192.0;
constexpr double CUBE_LATENCY_CYCLES = 32.0;      // Mmad issue-to-result (assumption)
// L1 -> L0A/L0B (MTE1): assumed 256 B/cycle (no public figure; assumption). Fixpipe L0C -> GM streams like an
// MTE DMA through the core's HBM share.
constexpr double MTE1_BYTES_PER_CYCLE = 256.0;

constexpr double cycles_to_ns(double c) { return c / CLOCK_GHZ; }
}  // namespace twin::model
