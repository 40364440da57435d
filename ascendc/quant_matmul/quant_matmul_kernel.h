// quant_matmul (W8A8) as two passes that meet in a GM int32 workspace acc [M, N]:
//   cube (AIC)  per output tile: x rows GM -> L1 by the Nd2Nz DataCopy, the packed weight GM -> L1 by a strided
//               DataCopy (already fractal), LoadData L1 -> L0A (ZZ) / L0B (ZN), Mmad int8 x int8 -> int32 summed over
//               the K tiles in L0C, Fixpipe (NoQuant, NZ -> ND) to acc.
//   vector (AIV) per row, in column chunks: out = ((fp32(acc) · w_scale[n]) · x_scale[m]) + bias[n], rounded to
//               out's dtype (RINT) — reference/quant.py's fp32 order, so the result is bit-exact.
// The packed weight is FRACTAL_NZ of the [N, K] weight (ops._ascendc.pack_quant_weight): fractal (kb, nb) holds rows
// n in [16nb, 16nb + 16) and columns k in [32kb, 32kb + 32) row-major at (kb · nBlocks + nb) · 512 B, zero padded —
// in L0B order (ZN of the [K, N] operand), so it needs no transpose. Mirrors torch_npu.npu_quant_matmul.
#pragma once

#include "../common/kernel_util.h"

namespace ds {

class QuantMatmulCube {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR wNz, GM_ADDR acc, const QuantMatmulTiling& t) {
    t_ = t;
    x_.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(x), uint64_t(t.m) * t.k);
    w_.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(wNz), uint64_t(t.kBlocks) * t.nBlocks * 512);
    acc_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(acc), uint64_t(t.m) * t.n);
    pipe_.InitBuffer(a1_, t.l1ABytes);
    pipe_.InitBuffer(b1_, t.l1BBytes);
    pipe_.InitBuffer(a2_, t.l0ABytes);
    pipe_.InitBuffer(b2_, t.l0BBytes);
    pipe_.InitBuffer(c1_, t.l0CBytes);
  }

  __aicore__ inline void Process() {
    first_ = true;
    for (uint32_t tile = AscendC::GetBlockIdx(); tile < t_.tiles; tile += t_.usedCubeCores) Tile(tile);
  }

 private:
  __aicore__ inline void Tile(uint32_t tile) {
    const uint32_t m0 = tile / t_.nTiles * t_.baseM, n0 = tile % t_.nTiles * t_.baseN;
    const uint32_t rows = t_.m - m0 < t_.baseM ? t_.m - m0 : t_.baseM;
    const uint32_t cols = t_.n - n0 < t_.baseN ? t_.n - n0 : t_.baseN;
    const uint32_t m1 = CeilDiv(rows, 16), n1 = CeilDiv(cols, 16), nb0 = n0 / 16;
    auto la1 = a1_.Get<int8_t>(), lb1 = b1_.Get<int8_t>(), la2 = a2_.Get<int8_t>(), lb2 = b2_.Get<int8_t>();
    auto lc = c1_.Get<int32_t>();
    for (uint32_t kt = 0; kt < t_.kTiles; ++kt) {
      const uint32_t k0 = kt * t_.baseK, kLen = kt + 1 == t_.kTiles ? t_.tailK : t_.baseK;
      const uint32_t k1 = CeilDiv(kLen, 32);
      if (!first_) Sync<AscendC::HardEvent::MTE1_MTE2>();  // L1 is free once the last LoadData read it
      AscendC::DataCopy(la1, x_[uint64_t(m0) * t_.k + k0],
                        AscendC::Nd2NzParams(1, rows, kLen, 0, t_.k, m1 * 16, 1, 1));
      AscendC::DataCopy(lb1, w_[(uint64_t(k0 / 32) * t_.nBlocks + nb0) * 512],
                        AscendC::DataCopyParams(k1, n1 * 16, (t_.nBlocks - n1) * 16, 0));
      Sync<AscendC::HardEvent::MTE2_MTE1>();
      if (!first_) Sync<AscendC::HardEvent::M_MTE1>();     // L0A / L0B are free once the last Mmad read them
      for (uint32_t mb = 0; mb < m1; ++mb)  // L1 fractal (mb, kb) at kb·m1 + mb; L0A wants mb·k1 + kb
        AscendC::LoadData(la2[mb * k1 * 512], la1, AscendC::LoadData2DParams(mb, k1, m1, 0, 0, false, 0));
      for (uint32_t kb = 0; kb < k1; ++kb)  // L1 fractal (kb, nb) at kb·n1 + nb is the L0B fractal (kb, nb)
        AscendC::LoadData(lb2[kb * n1 * 512], lb1, AscendC::LoadData2DParams(kb * n1, n1, 1, 0, 0, false, 0));
      Sync<AscendC::HardEvent::MTE1_M>();
      if (kt == 0 && !first_) Sync<AscendC::HardEvent::FIX_M>();  // L0C is free once the last Fixpipe read it
      AscendC::MmadParams mp;
      mp.m = rows; mp.n = cols; mp.k = kLen;
      mp.cmatrixInitVal = kt == 0;
      AscendC::Mmad(lc, la2, lb2, mp);
      first_ = false;
    }
    Sync<AscendC::HardEvent::M_FIX>();
    AscendC::FixpipeParamsV220 fp;
    fp.nSize = cols; fp.mSize = rows; fp.srcStride = m1 * 16; fp.dstStride = t_.n;
    fp.quantPre = AscendC::NoQuant;
    AscendC::Fixpipe(acc_[uint64_t(m0) * t_.n + n0], lc, fp);
  }

  QuantMatmulTiling t_;
  bool first_ = true;
  AscendC::TPipe pipe_;
  AscendC::GlobalTensor<int8_t> x_, w_;
  AscendC::GlobalTensor<int32_t> acc_;
  AscendC::TBuf<AscendC::TPosition::A1> a1_;
  AscendC::TBuf<AscendC::TPosition::B1> b1_;
  AscendC::TBuf<AscendC::TPosition::A2> a2_;
  AscendC::TBuf<AscendC::TPosition::B2> b2_;
  AscendC::TBuf<AscendC::TPosition::CO1> c1_;
};

template <typename O>
class QuantMatmulEpilogue {
 public:
  __aicore__ inline void Init(GM_ADDR acc, GM_ADDR wScale, GM_ADDR xScale, GM_ADDR bias, GM_ADDR out,
                              const QuantMatmulTiling& t) {
    t_ = t;
    CoreRows(t.rowsPerCore, t.bigCores, start_, count_);
    const uint64_t first = uint64_t(start_) * t.n, n = uint64_t(count_) * t.n;
    acc_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(acc) + first, n);
    out_.SetGlobalBuffer(reinterpret_cast<__gm__ O*>(out) + first, n);
    xScale_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(xScale) + start_, count_);
    wScale_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(wScale), t.n);
    pipe_.InitBuffer(accBuf_, t.accBytes);
    pipe_.InitBuffer(workBuf_, t.accBytes);
    pipe_.InitBuffer(wsBuf_, t.vecBytes);
    if (t.hasBias) {
      bias_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(bias), t.n);
      pipe_.InitBuffer(biasBuf_, t.vecBytes);
    }
    pipe_.InitBuffer(outBuf_, t.outBytes);
  }

  __aicore__ inline void Process() {
    auto accL = accBuf_.Get<int32_t>();
    auto f = workBuf_.Get<float>(), ws = wsBuf_.Get<float>();
    auto o = outBuf_.Get<O>();
    const bool accAligned = t_.n % 8 == 0, outAligned = (t_.n * sizeof(O)) % kBlockBytes == 0;
    for (uint32_t c = 0; c < t_.numChunks; ++c) {
      const uint32_t n0 = c * t_.chunk, len = c + 1 == t_.numChunks ? t_.tailChunk : t_.chunk;
      Sync<AscendC::HardEvent::V_MTE2>();
      CopyIn(ws, wScale_[n0], len, true);
      if (t_.hasBias) CopyIn(biasBuf_.Get<float>(), bias_[n0], len, true);
      for (uint32_t r = 0; r < count_; ++r) {
        const float xs = xScale_.GetValue(r);
        Sync<AscendC::HardEvent::V_MTE2>();
        CopyIn(accL, acc_[uint64_t(r) * t_.n + n0], len, accAligned);
        Sync<AscendC::HardEvent::MTE2_V>();
        AscendC::Cast(f, accL, AscendC::RoundMode::CAST_RINT, len);
        VBarrier();
        AscendC::Mul(f, f, ws, len);
        VBarrier();
        AscendC::Muls(f, f, xs, len);
        if (t_.hasBias) {
          VBarrier();
          AscendC::Add(f, f, biasBuf_.Get<float>(), len);
        }
        VBarrier();
        Sync<AscendC::HardEvent::MTE3_V>();  // the out chunk is free once the last copy-out read it
        FromFloat(o, f, len);
        Sync<AscendC::HardEvent::V_MTE3>();
        CopyOut(out_[uint64_t(r) * t_.n + n0], o, len, outAligned);
      }
    }
  }

 private:
  QuantMatmulTiling t_;
  uint32_t start_ = 0, count_ = 0;
  AscendC::TPipe pipe_;
  AscendC::GlobalTensor<int32_t> acc_;
  AscendC::GlobalTensor<float> wScale_, xScale_, bias_;
  AscendC::GlobalTensor<O> out_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> accBuf_, workBuf_, wsBuf_, biasBuf_, outBuf_;
};

}  // namespace ds
