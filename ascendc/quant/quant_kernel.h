// dynamic_quant and rms_norm_dynamic_quant as one kernel class (RMS selects the RmsNorm front end).
//
// Per token row (H elements), split into UB chunks by the host tiling:
//   pass A  y = x·smooth (dynamic_quant) | s = x + residual, residual_out = RINT(s), Σs² (rms)
//   pass B  (rms) n = s / sqrt(Σs²/H + eps) · gamma · smooth
//   absmax of y|n → scale = absmax / 127 (one fp32 division; NaN row → NaN, zero row → 0)
//   pass Q  q = int8(y / scale) through fp32 →(RINT) int16 →(exact) fp16 →(exact) int8: round half to even
//           (int16 rather than int32: half the bytes through the vector unit for the same exact result)
// With `resident` the fp32 row stays in UB, so x is read once; otherwise each pass re-reads its chunk from GM.
// GM loads run one chunk ahead of the vector work (input queues of depth 2); stores drain through VECOUT queues.
// Mirrors torch_npu.npu_dynamic_quant / npu_add_rms_norm_dynamic_quant as reference/quant.py defines them.
#pragma once

#include "../common/kernel_util.h"

namespace ds {

template <typename T, bool RMS>
class QuantKernel {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR residual, GM_ADDR gamma, GM_ADDR smooth, GM_ADDR y, GM_ADDR scale,
                              GM_ADDR residualOut, const QuantTiling& t) {
    t_ = t;
    CoreRows(t.rowsPerCore, t.bigCores, start_, count_);
    const uint64_t h = t.cols, first = start_ * h, n = count_ * h;
    x_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x) + first, n);
    y_.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(y) + first, n);
    scale_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(scale) + start_, count_);
    pipe_.InitBuffer(inQ_, t.bufferNum, t.inBytes);
    pipe_.InitBuffer(outQ_, t.bufferNum, t.outBytes);
    if (t.hasSmooth) {
      smoothGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(smooth), h);
      pipe_.InitBuffer(smoothBuf_, t.vecBytes);
    }
    if constexpr (RMS) {
      gammaGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(gamma), h);
      pipe_.InitBuffer(gammaBuf_, t.vecBytes);
      resOut_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(residualOut) + first, n);
      pipe_.InitBuffer(resOutQ_, t.bufferNum, t.inBytes);
      if (t.hasResidual) {
        res_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(residual) + first, n);
        pipe_.InitBuffer(resQ_, t.bufferNum, t.inBytes);
      }
    }
    if (t.resident) {
      pipe_.InitBuffer(rowBuf_, t.rowBytes);
    } else {
      pipe_.InitBuffer(workBuf_, t.workBytes);
      if (RMS) pipe_.InitBuffer(rmsBuf_, t.workBytes);
    }
    pipe_.InitBuffer(tmpBuf_, t.workBytes);
    pipe_.InitBuffer(bcastBuf_, t.workBytes);
    pipe_.InitBuffer(halfBuf_, t.halfBytes);
    pipe_.InitBuffer(reduceBuf_, t.reduceBytes);
    pipe_.InitBuffer(scaleBuf_, t.scaleBytes);
  }

  __aicore__ inline void Process() {
    LoadVectors();
    tmp_ = tmpBuf_.Get<float>();
    bcast_ = bcastBuf_.Get<float>();
    if (t_.resident) {
      row_ = rowBuf_.Get<float>();
      rmsB_ = bcast_;
    } else {
      work_ = workBuf_.Get<float>();
      rmsB_ = RMS ? rmsBuf_.Get<float>() : bcast_;
    }
    half_ = halfBuf_.Get<half>();
    red_ = reduceBuf_.Get<float>();
    rwork_ = red_[16];
    scales_ = scaleBuf_.Get<float>();
    const uint32_t passes = t_.resident ? 1 : (RMS ? 3 : 2);
    perRow_ = passes * t_.numChunks;
    const uint32_t jobs = count_ * perRow_;
    if (jobs == 0) return;
    Load(0);
    for (uint32_t j = 0; j < jobs; ++j) {
      if (j + 1 < jobs) Load(j + 1);
      Compute(j);
    }
  }

 private:
  enum Mode : uint32_t { kNormal = 0, kClamp = 1, kZero = 2 };

  __aicore__ inline uint32_t Len(uint32_t c) const { return c + 1 == t_.numChunks ? t_.tailChunk : t_.chunk; }
  __aicore__ inline uint64_t Off(uint32_t r, uint32_t c) const {
    return static_cast<uint64_t>(r) * t_.cols + static_cast<uint64_t>(c) * t_.chunk;
  }
  __aicore__ inline AscendC::LocalTensor<float> Row(uint32_t c) const { return row_[c * t_.chunk]; }

  __aicore__ inline void LoadVectors() {
    if (!t_.hasSmooth && !RMS) return;
    for (uint32_t c = 0; c < t_.numChunks; ++c) {
      const uint32_t o = c * t_.chunk;
      if (t_.hasSmooth) CopyIn(smoothBuf_.Get<float>()[o], smoothGm_[o], Len(c), true);
      if constexpr (RMS) CopyIn(gammaBuf_.Get<float>()[o], gammaGm_[o], Len(c), true);
    }
    Sync<AscendC::HardEvent::MTE2_V>();
  }

  __aicore__ inline void Load(uint32_t j) {
    const uint32_t r = j / perRow_, c = j % t_.numChunks, n = Len(c);
    AscendC::LocalTensor<T> xin = inQ_.template AllocTensor<T>();
    CopyIn(xin, x_[Off(r, c)], n, t_.gmAligned);
    inQ_.EnQue(xin);
    if constexpr (RMS) {
      if (t_.hasResidual) {
        AscendC::LocalTensor<T> rin = resQ_.template AllocTensor<T>();
        CopyIn(rin, res_[Off(r, c)], n, t_.gmAligned);
        resQ_.EnQue(rin);
      }
    }
  }

  // The row's first stage into v: y = x·smooth (dynamic_quant) or s = x + residual (rms), from the queued chunk.
  __aicore__ inline void Front(const AscendC::LocalTensor<float>& v, uint32_t c, uint32_t n) {
    AscendC::LocalTensor<T> xin = inQ_.template DeQue<T>();
    ToFloat(v, xin, n);
    if constexpr (RMS) {
      if (t_.hasResidual) {
        AscendC::LocalTensor<T> rin = resQ_.template DeQue<T>();
        ToFloat(tmp_, rin, n);
        VBarrier();
        resQ_.FreeTensor(rin);
        AscendC::Add(v, v, tmp_, n);
        VBarrier();
      } else {
        VBarrier();
      }
    } else {
      VBarrier();
      if (t_.hasSmooth) {
        AscendC::Mul(v, v, smoothBuf_.Get<float>()[c * t_.chunk], n);
        VBarrier();
      }
    }
    inQ_.FreeTensor(xin);
  }

  // rms: n = s / rms · gamma · smooth in place.
  __aicore__ inline void Norm(const AscendC::LocalTensor<float>& v, uint32_t c, uint32_t n) {
    const uint32_t o = c * t_.chunk;
    AscendC::Div(v, v, rmsB_, n);
    VBarrier();
    AscendC::Mul(v, v, gammaBuf_.Get<float>()[o], n);
    VBarrier();
    if (t_.hasSmooth) {
      AscendC::Mul(v, v, smoothBuf_.Get<float>()[o], n);
      VBarrier();
    }
  }

  __aicore__ inline void Compute(uint32_t j) {
    const uint32_t r = j / perRow_, p = (j % perRow_) / t_.numChunks, c = j % t_.numChunks, n = Len(c);
    const bool last = c + 1 == t_.numChunks;
    if (j % perRow_ == 0) {
      amax_ = 0.0f;
      sumsq_ = 0.0f;
    }
    const AscendC::LocalTensor<float> v = t_.resident ? Row(c) : work_;
    Front(v, c, n);
    if constexpr (!RMS) {
      if (p == 0) {
        Absmax(v, n);
        if (last) FinishAbsmax(r);
        if (last && t_.resident) {
          for (uint32_t q = 0; q < t_.numChunks; ++q) Quantise(Row(q), r, q, Len(q));
        }
      } else {
        Quantise(v, r, c, n);
      }
    } else {
      if (p == 0) {
        ResidualOut(v, r, c, n);
        AscendC::Mul(tmp_, v, v, n);
        VBarrier();
        AscendC::ReduceSum(red_, tmp_, rwork_, n);
        Sync<AscendC::HardEvent::V_S>();
        sumsq_ += red_.GetValue(0);
        if (last) FinishSumsq();
        if (last && t_.resident) {
          for (uint32_t q = 0; q < t_.numChunks; ++q) {
            Norm(Row(q), q, Len(q));
            Absmax(Row(q), Len(q));
          }
          FinishAbsmax(r);
          for (uint32_t q = 0; q < t_.numChunks; ++q) Quantise(Row(q), r, q, Len(q));
        }
      } else if (p == 1) {
        Norm(v, c, n);
        Absmax(v, n);
        if (last) FinishAbsmax(r);
      } else {
        Norm(v, c, n);
        Quantise(v, r, c, n);
      }
    }
  }

  __aicore__ inline void ResidualOut(const AscendC::LocalTensor<float>& s, uint32_t r, uint32_t c, uint32_t n) {
    AscendC::LocalTensor<T> o = resOutQ_.template AllocTensor<T>();
    FromFloat(o, s, n);
    resOutQ_.EnQue(o);
    o = resOutQ_.template DeQue<T>();
    CopyOut(resOut_[Off(r, c)], o, n, t_.gmAligned);
    resOutQ_.FreeTensor(o);
  }

  // rms = sqrt(Σs²/H + eps) (vector Sqrt, IEEE), broadcast for the divisions of pass B.
  __aicore__ inline void FinishSumsq() {
    const float v = sumsq_ / static_cast<float>(t_.cols) + BitsToFloat(t_.epsilonBits);
    AscendC::Duplicate(red_, v, 8);
    VBarrier();
    AscendC::Sqrt(red_, red_, 8);
    Sync<AscendC::HardEvent::V_S>();
    AscendC::Duplicate(rmsB_, red_.GetValue(0), t_.chunk);
    VBarrier();
  }

  // absmax over the chunk (ReduceMax returns NaN when the chunk holds one: the row's scale becomes NaN).
  __aicore__ inline void Absmax(const AscendC::LocalTensor<float>& v, uint32_t n) {
    AscendC::Abs(tmp_, v, n);
    VBarrier();
    AscendC::ReduceMax(red_, tmp_, rwork_, n, false);
    Sync<AscendC::HardEvent::V_S>();
    const float m = red_.GetValue(0);
    if (IsNan(m) || m > amax_) amax_ = IsNan(amax_) ? amax_ : m;
  }

  // scale = absmax / 127; choose how pass Q treats the row and broadcast the divisor.
  __aicore__ inline void FinishAbsmax(uint32_t r) {
    const float scale = amax_ / 127.0f;
    mode_ = kNormal;
    if (!IsFinite(scale) || scale == 0.0f) {
      mode_ = kZero;               // NaN / inf / zero row: q = 0 (the reference's zero-row and NaN rules)
    } else if (scale < 1.17549435e-38f) {
      mode_ = kClamp;              // subnormal scale: y / scale may pass 127, clamp like the reference
    }
    const uint32_t i = r % t_.scaleBatch;
    if (i == 0 && r > 0) Sync<AscendC::HardEvent::MTE3_S>();
    scales_.SetValue(i, scale);
    if (i + 1 == t_.scaleBatch || r + 1 == count_) {
      Sync<AscendC::HardEvent::S_MTE3>();
      CopyOut(scale_[r - i], scales_, i + 1, false);
    }
    if (mode_ != kZero) {
      AscendC::Duplicate(bcast_, scale, t_.chunk);
      VBarrier();
    }
  }

  // q = int8(v / scale); v is consumed (divided in place).
  __aicore__ inline void Quantise(const AscendC::LocalTensor<float>& v, uint32_t r, uint32_t c, uint32_t n) {
    AscendC::LocalTensor<int8_t> q = outQ_.template AllocTensor<int8_t>();
    if (mode_ == kZero) {
      AscendC::Duplicate(v, 0.0f, n);
    } else {
      AscendC::Div(v, v, bcast_, n);
      if (mode_ == kClamp) {
        VBarrier();
        AscendC::Maxs(v, v, -127.0f, n);
        VBarrier();
        AscendC::Mins(v, v, 127.0f, n);
      }
    }
    VBarrier();
    AscendC::LocalTensor<int16_t> i16 = tmp_.ReinterpretCast<int16_t>();
    AscendC::Cast(i16, v, AscendC::RoundMode::CAST_RINT, n);
    VBarrier();
    AscendC::Cast(half_, i16, AscendC::RoundMode::CAST_NONE, n);
    VBarrier();
    AscendC::Cast(q, half_, AscendC::RoundMode::CAST_TRUNC, n);
    outQ_.EnQue(q);
    q = outQ_.template DeQue<int8_t>();
    CopyOut(y_[Off(r, c)], q, n, t_.gmAligned);
    outQ_.FreeTensor(q);
  }

  AscendC::TPipe pipe_;
  AscendC::TQue<AscendC::TPosition::VECIN, 2> inQ_, resQ_;
  AscendC::TQue<AscendC::TPosition::VECOUT, 1> outQ_, resOutQ_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf_, smoothBuf_, gammaBuf_, workBuf_, rmsBuf_, tmpBuf_, bcastBuf_,
      halfBuf_, reduceBuf_, scaleBuf_;
  AscendC::GlobalTensor<T> x_, res_, resOut_;
  AscendC::GlobalTensor<float> smoothGm_, gammaGm_, scale_;
  AscendC::GlobalTensor<int8_t> y_;
  AscendC::LocalTensor<float> row_, work_, tmp_, bcast_, rmsB_, red_, rwork_, scales_;
  AscendC::LocalTensor<half> half_;
  QuantTiling t_;
  uint32_t start_ = 0, count_ = 0, perRow_ = 1, mode_ = 0;
  float amax_ = 0.0f, sumsq_ = 0.0f;
};

}  // namespace ds
