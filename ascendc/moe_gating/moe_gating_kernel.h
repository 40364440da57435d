// moe_gating_top_k (torch_npu.npu_moe_gating_top_k as reference/moe_gating.py defines it), one token per step.
//
//   s = sigmoid(x) | softmax(x)            vector, written to norm_out through a VECOUT queue
//   b = s + bias                           vector; the selection key (NaN ranks as -inf)
//   group scores (max | top-2 sum), keep k_group groups (ties to the lower group)   scalar over E
//   experts of dropped groups -> -inf; k x (ReduceMax with index, take it, set it to -inf); once the best left is
//   -inf the remaining picks are the lowest unpicked ids of kept groups (the reference's stable order)
//   w = s[idx] (NaN -> 0), / (sum + eps) for sigmoid or renorm, * routed_scaling_factor   scalar
// y and expert_idx are staged for rowBatch tokens and copied out with DataCopyPad.
#pragma once

#include "../common/kernel_util.h"
#include "moe_gating_limits.h"

namespace ds {

template <typename T>
class GatingKernel {
 public:
  __aicore__ inline void Init(GM_ADDR x, GM_ADDR bias, GM_ADDR y, GM_ADDR idx, GM_ADDR normOut, const GatingTiling& t) {
    t_ = t;
    CoreRows(t.rowsPerCore, t.bigCores, start_, count_);
    const uint64_t e = t.experts, first = start_ * e;
    x_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x) + first, count_ * e);
    norm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(normOut) + first, count_ * e);
    y_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y) + start_ * t.k, count_ * t.k);
    idx_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(idx) + start_ * t.k, count_ * t.k);
    pipe_.InitBuffer(inQ_, t.bufferNum, t.inBytes);
    pipe_.InitBuffer(normQ_, t.bufferNum, t.normBytes);
    pipe_.InitBuffer(keyBuf_, t.scoreBytes);
    if (t.hasBias) {
      biasGm_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(bias), e);
      pipe_.InitBuffer(biasBuf_, t.biasBytes);
    }
    pipe_.InitBuffer(reduceBuf_, t.reduceBytes);
    pipe_.InitBuffer(wBuf_, t.wBytes);
    if constexpr (!Same<T, float>::value) pipe_.InitBuffer(yBuf_, t.yBytes);
    pipe_.InitBuffer(idxBuf_, t.idxBytes);
  }

  __aicore__ inline void Process() {
    key_ = keyBuf_.Get<float>();
    res_ = reduceBuf_.Get<float>();
    gres_ = res_[16];
    rwork_ = res_[16 + 8 * kGatingVectorGroups];
    w_ = wBuf_.Get<float>();
    ids_ = idxBuf_.Get<int32_t>();
    if (t_.hasBias) {
      CopyIn(biasBuf_.Get<float>(), biasGm_, t_.experts, true);
      Sync<AscendC::HardEvent::MTE2_V>();
    }
    if (count_ == 0) return;
    Load(0);
    for (uint32_t r = 0; r < count_; ++r) {
      if (r + 1 < count_) Load(r + 1);
      Row(r);
    }
  }

 private:
  static constexpr float kNegInf = -__builtin_inff();

  __aicore__ inline void Load(uint32_t r) {
    AscendC::LocalTensor<T> xin = inQ_.template AllocTensor<T>();
    CopyIn(xin, x_[static_cast<uint64_t>(r) * t_.experts], t_.experts, t_.experts % 32 == 0);
    inQ_.EnQue(xin);
  }

  __aicore__ inline float Reduce(const AscendC::LocalTensor<float>& v, bool max, uint32_t n) {
    if (max) {
      AscendC::ReduceMax(res_, v, rwork_, n, false);
    } else {
      AscendC::ReduceSum(res_, v, rwork_, n);
    }
    Sync<AscendC::HardEvent::V_S>();
    return res_.GetValue(0);
  }

  __aicore__ inline void Row(uint32_t r) {
    const uint32_t E = t_.experts;
    AscendC::LocalTensor<T> xin = inQ_.template DeQue<T>();
    AscendC::LocalTensor<float> s = normQ_.template AllocTensor<float>();
    ToFloat(s, xin, E);
    AscendC::PipeBarrier<PIPE_V>();
    inQ_.FreeTensor(xin);
    if (t_.normType == 1) {
      AscendC::Sigmoid(s, s, E);
    } else {
      const float m = Reduce(s, true, E);
      AscendC::Adds(s, s, -m, E);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Exp(s, s, E);
      AscendC::PipeBarrier<PIPE_V>();
      const float sum = Reduce(s, false, E);
      AscendC::Muls(s, s, 1.0f / sum, E);
    }
    AscendC::PipeBarrier<PIPE_V>();
    if (t_.hasBias) {
      AscendC::Add(key_, s, biasBuf_.Get<float>(), E);
    } else {
      AscendC::Muls(key_, s, 1.0f, E);
    }
    VBarrier();
    Sync<AscendC::HardEvent::V_S>();
    Select(r, s);
    normQ_.EnQue(s);
    s = normQ_.template DeQue<float>();
    CopyOut(norm_[static_cast<uint64_t>(r) * E], s, E, E % 8 == 0);
    normQ_.FreeTensor(s);
  }

  // One row after the vector front end: groups, the k picks, the weights; stages y / expert_idx for the batch.
  __aicore__ inline void Select(uint32_t r, const AscendC::LocalTensor<float>& s) {
    const uint32_t E = t_.experts, G = t_.groupCount, per = E / G, k = t_.k;
    const uint32_t slot = r % t_.rowBatch, base = slot * k;
    if (slot == 0 && r > 0) {
      Sync<AscendC::HardEvent::MTE3_S>();
      Sync<AscendC::HardEvent::MTE3_V>();
    }
    uint8_t kept[kGatingMaxExperts];
    float gscore[kGatingMaxExperts];
    const bool vec = G == 1 || (per % 8 == 0 && G <= kGatingVectorGroups);
    if (vec) {
      GroupScoresVector(gscore, G == 1 ? 1 : G, G == 1 ? E : per);
    } else {
      GroupScoresScalar(gscore, G, per);
    }
    for (uint32_t g = 0; g < G; ++g) kept[g] = G == 1 ? 1 : 0;
    if (G > 1) {
      for (uint32_t n = 0; n < t_.kGroup; ++n) {
        int32_t best = -1;
        for (uint32_t g = 0; g < G; ++g) {
          if (!kept[g] && (best < 0 || gscore[g] > gscore[best])) best = static_cast<int32_t>(g);
        }
        kept[best] = 1;
      }
      Sync<AscendC::HardEvent::S_V>();
      for (uint32_t g = 0; g < G; ++g) {
        if (kept[g]) continue;
        if (vec) {
          AscendC::Duplicate(key_[g * per], kNegInf, per);
        } else {
          for (uint32_t i = 0; i < per; ++i) key_.SetValue(g * per + i, kNegInf);
        }
      }
      if (vec) VBarrier();
    }
    Sync<AscendC::HardEvent::S_V>();
    // the k picks
    bool exhausted = false;
    float sum = 0.0f;
    for (uint32_t j = 0; j < k; ++j) {
      int32_t id = -1;
      if (!exhausted) {
        AscendC::ReduceMax(res_, key_, rwork_, E, true);
        Sync<AscendC::HardEvent::V_S>();
        const float m = res_.GetValue(0);
        if (m == kNegInf) {
          exhausted = true;
        } else {
          id = static_cast<int32_t>(res_.template ReinterpretCast<uint32_t>().GetValue(1));
          key_.SetValue(static_cast<uint32_t>(id), kNegInf);
          Sync<AscendC::HardEvent::S_V>();
        }
      }
      if (exhausted) id = NextUnpicked(kept, per, base, j);
      ids_.SetValue(base + j, id);
      float w = s.GetValue(static_cast<uint32_t>(id));
      if (IsNan(w)) w = 0.0f;
      w_.SetValue(base + j, w);
      sum += w;
    }
    // weights
    const float rsf = BitsToFloat(t_.scaleBits);
    float den = 1.0f;
    if (t_.normType == 1 || t_.renorm == 1) {
      den = sum + BitsToFloat(t_.epsBits);
      if (den == 0.0f) den = 1.0f;
    }
    for (uint32_t j = 0; j < k; ++j) {
      float w = w_.GetValue(base + j);
      if (t_.normType == 1 || t_.renorm == 1) w = w / den;
      w_.SetValue(base + j, w * rsf);
    }
    if (slot + 1 == t_.rowBatch || r + 1 == count_) Flush(r - slot, slot + 1);
  }

  // Group scores with the scalar unit (any group width): NaN keys become -inf, then max or top-2 sum per group.
  __aicore__ inline void GroupScoresScalar(float* gscore, uint32_t G, uint32_t per) {
    for (uint32_t g = 0; g < G; ++g) {
      float top1 = kNegInf, top2 = kNegInf;
      for (uint32_t i = 0; i < per; ++i) {
        float v = key_.GetValue(g * per + i);
        if (IsNan(v)) {
          v = kNegInf;
          key_.SetValue(g * per + i, v);
        }
        if (i == 0 || v > top1) {
          top2 = i == 0 ? kNegInf : top1;
          top1 = v;
        } else if (i == 1 || v > top2) {
          top2 = v;
        }
      }
      const float sc = t_.groupSelectMode == 1 ? top1 + top2 : top1;
      gscore[g] = IsNan(sc) ? kNegInf : sc;
    }
  }

  // Group scores with ReduceMax per group (groups 32 B-aligned, at most kGatingVectorGroups): the top-1 of every
  // group (a group whose max is NaN has its NaN keys set to -inf by the scalar unit and is reduced again), then for
  // top-2 sums the runner-up with the top-1 masked. G = 1 only repairs NaN keys of the whole row.
  __aicore__ inline void GroupScoresVector(float* gscore, uint32_t G, uint32_t per) {
    float top1[kGatingVectorGroups];
    uint32_t at[kGatingVectorGroups];
    uint8_t todo[kGatingVectorGroups];
    for (uint32_t g = 0; g < G; ++g) todo[g] = 1;
    for (bool again = true; again;) {
      for (uint32_t g = 0; g < G; ++g) {
        if (todo[g]) AscendC::ReduceMax(gres_[g * 8], key_[g * per], rwork_, per, true);
      }
      Sync<AscendC::HardEvent::V_S>();
      again = false;
      for (uint32_t g = 0; g < G; ++g) {
        if (!todo[g]) continue;
        top1[g] = gres_.GetValue(g * 8);
        at[g] = gres_.template ReinterpretCast<uint32_t>().GetValue(g * 8 + 1);
        if (IsNan(top1[g])) {
          for (uint32_t i = 0; i < per; ++i) {
            if (IsNan(key_.GetValue(g * per + i))) key_.SetValue(g * per + i, kNegInf);
          }
          again = true;
        } else {
          todo[g] = 0;
        }
      }
      if (again) Sync<AscendC::HardEvent::S_V>();
    }
    if (G == 1) return;
    if (t_.groupSelectMode == 1) {
      for (uint32_t g = 0; g < G; ++g) key_.SetValue(g * per + at[g], kNegInf);
      Sync<AscendC::HardEvent::S_V>();
      for (uint32_t g = 0; g < G; ++g) AscendC::ReduceMax(gres_[g * 8], key_[g * per], rwork_, per, false);
      Sync<AscendC::HardEvent::V_S>();
      for (uint32_t g = 0; g < G; ++g) {
        const float sc = top1[g] + gres_.GetValue(g * 8);
        gscore[g] = IsNan(sc) ? kNegInf : sc;
        key_.SetValue(g * per + at[g], top1[g]);
      }
    } else {
      for (uint32_t g = 0; g < G; ++g) gscore[g] = top1[g];
    }
  }

  // The lowest expert id of a kept group not yet picked for this row.
  __aicore__ inline int32_t NextUnpicked(const uint8_t* kept, uint32_t per, uint32_t base, uint32_t j) {
    for (uint32_t e = 0; e < t_.experts; ++e) {
      if (!kept[e / per]) continue;
      bool taken = false;
      for (uint32_t q = 0; q < j && !taken; ++q) taken = ids_.GetValue(base + q) == static_cast<int32_t>(e);
      if (!taken) return static_cast<int32_t>(e);
    }
    return 0;   // unreachable: k <= k_group * per
  }

  __aicore__ inline void Flush(uint32_t first, uint32_t rows) {
    const uint32_t n = rows * t_.k;
    const uint64_t o = static_cast<uint64_t>(first) * t_.k;
    Sync<AscendC::HardEvent::S_MTE3>();
    CopyOut(idx_[o], ids_, n, false);
    if constexpr (Same<T, float>::value) {
      CopyOut(y_[o], w_, n, false);
    } else {
      Sync<AscendC::HardEvent::S_V>();
      AscendC::LocalTensor<T> y = yBuf_.Get<T>();
      FromFloat(y, w_, n);
      Sync<AscendC::HardEvent::V_MTE3>();
      CopyOut(y_[o], y, n, false);
    }
  }

  AscendC::TPipe pipe_;
  AscendC::TQue<AscendC::TPosition::VECIN, 2> inQ_;
  AscendC::TQue<AscendC::TPosition::VECOUT, 1> normQ_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> keyBuf_, biasBuf_, reduceBuf_, wBuf_, yBuf_, idxBuf_;
  AscendC::GlobalTensor<T> x_, y_;
  AscendC::GlobalTensor<float> norm_, biasGm_;
  AscendC::GlobalTensor<int32_t> idx_;
  AscendC::LocalTensor<float> key_, res_, gres_, rwork_, w_;
  AscendC::LocalTensor<int32_t> ids_;
  GatingTiling t_;
  uint32_t start_ = 0, count_ = 0;
};

}  // namespace ds
