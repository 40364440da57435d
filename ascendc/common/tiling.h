// POD tiling structs shared by the host tiling (ascendc/<op>/<op>_tiling.cpp), the kernels and the bindings.
//
// Every field is a 32-bit word, so the kernel copies a struct word by word from GM (CopyTiling in kernel_util.h)
// and Python reads it as a uint32 array whose field names come from ds_*_tiling_fields() (bindings/twin.cpp).
// Byte sizes here are the exact lengths passed to TPipe::InitBuffer; the host sums them against the UB size.
#pragma once

#include <stdint.h>

namespace ds {

constexpr uint32_t kBlockBytes = 32;        // UB start-address / DataCopy length granularity (notes/ascendc.md §3)
constexpr uint32_t kRepeatBytes = 256;      // one vector repeat
constexpr uint32_t kDataCopyPadMaxBytes = 65535;   // DataCopyPad blockLen limit (notes/ascendc.md §3)
constexpr uint32_t kUbBytes910B = 196608;   // UB per vector core on Atlas A2 (192 KiB)
constexpr uint32_t kCores910B = 40;         // vector cores on Atlas A2 (910B3)

enum DType : uint32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// dynamic_quant (rms = 0) and rms_norm_dynamic_quant (rms = 1): one token per row, rows split over cores.
struct QuantTiling {
  uint32_t rows;          // T (tokens)
  uint32_t cols;          // H (hidden)
  uint32_t rms;           // 1: residual add + RmsNorm before the quant
  uint32_t dtype;         // DType of x (and residual / residual_out)
  uint32_t hasSmooth;     // smooth_scales given
  uint32_t hasResidual;   // residual given (rms only)
  uint32_t epsilonBits;   // RmsNorm epsilon, fp32 bits
  uint32_t usedCores;     // blockDim
  uint32_t rowsPerCore;   // every core takes rowsPerCore rows ...
  uint32_t bigCores;      // ... and the first bigCores cores one more
  uint32_t chunk;         // elements per UB chunk (a multiple of 64 unless it is the whole row)
  uint32_t numChunks;     // ceil(cols / chunk)
  uint32_t tailChunk;     // elements in the last chunk, 1..chunk
  uint32_t resident;      // 1: the fp32 row stays in UB between passes (x read once), 0: re-read per pass
  uint32_t bufferNum;     // queue depth of the GM<->UB chunk queues (2 = double buffering)
  uint32_t gmAligned;     // 1: cols is a multiple of 32, so every GM row starts 32 B-aligned (DataCopy allowed)
  uint32_t scaleBatch;    // per-token scales buffered in UB before one DataCopyPad to GM
  // InitBuffer lengths in bytes (0 = not allocated)
  uint32_t inBytes;       // x chunk, per queue buffer (also residual in / residual_out queues when rms)
  uint32_t outBytes;      // int8 chunk, per queue buffer
  uint32_t rowBytes;      // resident fp32 row
  uint32_t vecBytes;      // smooth (and gamma) fp32 vectors, each, loaded once per core
  uint32_t workBytes;     // each fp32 chunk scratch: tmp (also the int32 step), bcast; streaming: work (+ rms)
  uint32_t halfBytes;     // fp16 chunk of the int8 cast chain
  uint32_t reduceBytes;   // ReduceMax / ReduceSum work space + result
  uint32_t scaleBytes;    // per-token scale staging
  uint32_t ubUsed;        // total of the above as InitBuffer rounds them
};

// moe_gating_top_k: one token per row, rows split over cores; every row is whole in UB.
struct GatingTiling {
  uint32_t rows;          // T
  uint32_t experts;       // E
  uint32_t k;
  uint32_t kGroup;
  uint32_t groupCount;
  uint32_t groupSelectMode;  // 0 = group max, 1 = top-2 sum
  uint32_t renorm;
  uint32_t normType;      // 0 = softmax, 1 = sigmoid
  uint32_t hasBias;
  uint32_t dtype;         // DType of x and y
  uint32_t scaleBits;     // routed_scaling_factor, fp32 bits
  uint32_t epsBits;       // eps, fp32 bits
  uint32_t usedCores;
  uint32_t rowsPerCore;
  uint32_t bigCores;
  uint32_t bufferNum;     // depth of the logits / norm_out queues
  uint32_t rowBatch;      // rows of y / expert_idx staged in UB per DataCopyPad
  uint32_t ePad;          // E rounded up to 64 (one fp32 repeat)
  // InitBuffer lengths in bytes
  uint32_t inBytes;       // logits row, per queue buffer
  uint32_t normBytes;     // norm_out row (fp32), per queue buffer
  uint32_t scoreBytes;    // each fp32 row scratch (s, choice key)
  uint32_t biasBytes;     // fp32 bias, loaded once per core
  uint32_t reduceBytes;   // reduction work space + result
  uint32_t wBytes;        // fp32 weights of rowBatch rows
  uint32_t yBytes;        // y of rowBatch rows in x's dtype
  uint32_t idxBytes;      // expert_idx of rowBatch rows
  uint32_t ubUsed;
};

// quant_matmul (W8A8): the cube pass tiles out [M, N] into baseM x baseN tiles, tile t = mt * nTiles + nt, spread
// round-robin over the cube cores (core c takes t = c, c + usedCubeCores, ...); each tile sums kTiles steps of baseK
// (the last holds tailK). The epilogue pass splits the M rows over the vector cores and walks N in chunks.
struct QuantMatmulTiling {
  uint32_t m, n, k;       // x_int8 [M, K], weight [K, N]
  uint32_t outDtype;      // DType of out
  uint32_t hasBias;       // bias given (fp32, prepared by the binding)
  uint32_t kBlocks;       // ceil(K / 32): the packed weight's K1 (32-column int8 fractals)
  uint32_t nBlocks;       // ceil(N / 16): the packed weight's N1 (16-row fractals of the [N, K] image)
  uint32_t baseM, baseN, baseK;   // tile sizes: multiples of 16, 16, 32
  uint32_t mTiles, nTiles, kTiles, tailK;
  uint32_t tiles;         // mTiles * nTiles
  uint32_t usedCubeCores; // cube blockDim (<= the cube cores)
  uint32_t tilesPerCore;  // ceil(tiles / usedCubeCores): the most tiles one cube core takes
  // cube InitBuffer lengths in bytes
  uint32_t l1ABytes, l1BBytes, l0ABytes, l0BBytes, l0CBytes;
  // epilogue (vector cores)
  uint32_t usedVecCores, rowsPerCore, bigCores;
  uint32_t chunk, numChunks, tailChunk;   // columns per UB chunk (a multiple of 64 unless all of N)
  uint32_t accBytes, vecBytes, outBytes;  // int32 acc / fp32 work, fp32 scale & bias chunks, out chunk
  uint32_t ubUsed;
};

inline uint32_t AlignUp(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }
inline uint32_t CeilDiv(uint32_t v, uint32_t a) { return (v + a - 1) / a; }
// fp32 workLocal elements of ReduceMax / ReduceSum over `count` elements (the ReduceMax page's minimum work space:
// the first round's (value, index) pairs in whole 32 B blocks, plus every later round's with calIndex).
inline uint32_t ReduceWorkElems(uint32_t count, bool calIndex) {
  uint32_t rep = CeilDiv(count, 64), out = rep * 2, need = AlignUp(out, 8);
  if (calIndex) {
    while (out > 2) {
      rep = CeilDiv(out, 64);
      out = rep * 2;
      need += AlignUp(out, 8);
    }
  }
  return need < 8 ? 8 : need;
}
inline uint32_t DTypeBytes(uint32_t dt) { return dt == kFloat32 ? 4u : 2u; }
// `rows` spread over at most `cores` cores as evenly as possible: the first `big` cores take `per` + 1 rows, the
// others `per` (the kernels' CoreRows reads it back); 0 rows use no core.
inline void SplitRows(uint32_t rows, uint32_t cores, uint32_t* used, uint32_t* per, uint32_t* big) {
  *used = rows < cores ? rows : cores;
  *per = *used ? rows / *used : 0;
  *big = *used ? rows % *used : 0;
}

}  // namespace ds
