// Synchronisation: SetFlag/WaitFlag ("SetFlag/WaitFlag" page, atlasascendc_api_07_0270), PipeBarrier
// (atlasascendc_api_07_0271), SyncAll ("SyncAll" page), atomics ("SetAtomicAdd"/"SetAtomicNone" pages), and
// the vector mask registers ("SetMaskCount"/"SetMaskNorm"/"SetVectorMask"/"ResetMask" pages).
#pragma once
#include "tensor.h"

namespace AscendC {

// SetFlag<evt>(id): the src pipe signals once everything it was given so far has completed.
template <HardEvent evt> inline void SetFlag(int32_t id) {
    Core& c = core();
    c.check_abort();
    twin::Pi s, d; twin::event_pipes(evt, s, d);
    if (id < 0 || id >= int32_t(twin::model::MAX_EVENT_ID))
        c.fail("event-id", "SetFlag<HardEvent::" + twin::event_name(evt) + ">", "event id " + std::to_string(id) +
               " outside [0, " + std::to_string(twin::model::MAX_EVENT_ID) + ")");
    c.issue_slot();
    c.flags[int(evt)][id].push_back(c.snapshot(s));
}
// WaitFlag<evt>(id): the dst pipe waits for the matching SetFlag (none pending = a hang on hardware: error).
template <HardEvent evt> inline void WaitFlag(int32_t id) {
    Core& c = core();
    c.check_abort();
    twin::Pi s, d; twin::event_pipes(evt, s, d);
    std::string call = "WaitFlag<HardEvent::" + twin::event_name(evt) + ">";
    if (id < 0 || id >= int32_t(twin::model::MAX_EVENT_ID))
        c.fail("event-id", call, "event id " + std::to_string(id) + " outside [0, " +
               std::to_string(twin::model::MAX_EVENT_ID) + ")");
    auto& q = c.flags[int(evt)][id];
    if (q.empty())
        c.fail("flag-unmatched", call, "event id " + std::to_string(id) +
               " was never set (no SetFlag before this WaitFlag: the pipe would wait forever)");
    c.issue_slot();
    c.merge(d, q.front());
    q.erase(q.begin());
}
// PipeBarrier<pipe>: every instruction already issued on `pipe` completes first; PIPE_ALL: on all pipes.
template <pipe_t pipe> inline void PipeBarrier() {
    Core& c = core();
    c.check_abort();
    static_assert(pipe != PIPE_S, "PipeBarrier<PIPE_S> is a hardware error (PipeBarrier page)");
    c.issue_slot();
    if (pipe == PIPE_ALL) { c.barrier_all(); return; }
    twin::Pi p = twin::pi_of(pipe);
    c.vc[p][p] = c.seq[p];
    c.ready_t[p] = std::max(c.ready_t[p], c.complete(p));
}

namespace detail {
inline void sync_all(const char* call) {
    Core& c = core();
    c.check_abort();
    c.barrier_all();
    auto* L = c.launch;
    if (L->kind == twin::CoreKind::MIX_AIC_1_2)
        c.fail("sync-all", call, "SyncAll in a MIX_AIC_1_2 launch is not modeled (use CrossCoreSetFlag/CrossCoreWaitFlag)");
    std::unique_lock<std::mutex> g(L->mu);
    uint32_t gen = L->generation;
    L->barrier_next = std::max(L->barrier_next, c.end_time());
    if (++L->arrived == L->block_dim) {
        L->barrier_t = L->barrier_next + twin::model::cycles_to_ns(twin::model::SYNCALL_CYCLES);
        L->barrier_next = 0; L->arrived = 0; L->generation++;
        L->cv.notify_all();
    } else {
        L->cv.wait(g, [&] { return L->generation != gen || L->abort.load() || L->finished > 0; });
        if (L->abort.load()) throw twin::Aborted{};
        if (L->generation == gen) {
            g.unlock();
            c.fail("sync-all", call, "a core returned from the kernel without reaching this SyncAll "
                   "(the waiting cores would hang)");
        }
    }
    double t = L->barrier_t;
    g.unlock();
    c.t_s = t;
    for (int p = 0; p < twin::NPI; ++p) { c.free_t[p] = std::max(c.free_t[p], t); c.ready_t[p] = t; }
}
}  // namespace detail
// SyncAll: all cores of the launch meet; also a PIPE_ALL barrier on this core.
template <bool isAIVOnly = true> inline void SyncAll() { detail::sync_all("SyncAll"); }
template <bool isAIVOnly = true>
inline void SyncAll(const GlobalTensor<int32_t>&, const LocalTensor<int32_t>&, int32_t = 0) { detail::sync_all("SyncAll"); }

// SetAtomicAdd<T>: later MTE3 writes (DataCopy / DataCopyPad UB->GM) add T elements atomically into GM.
template <typename T> inline void SetAtomicAdd() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, int32_t>,
                  "SetAtomicAdd: the twin supports float, half and int32_t");
    core().atomic_kind = std::is_same_v<T, float> ? 1 : std::is_same_v<T, half> ? 2 : 3;
}
inline void SetAtomicNone() { core().atomic_kind = 0; }

// Mask registers for level-0 vector APIs.
inline void SetMaskCount() { core().mask_counter = true; }
inline void SetMaskNorm() { core().mask_counter = false; }
template <typename T, MaskMode mode = MaskMode::NORMAL> inline void SetVectorMask(uint64_t maskHigh, uint64_t maskLow) {
    core().mask_hi = maskHigh; core().mask_lo = maskLow;
}
template <typename T, MaskMode mode = MaskMode::NORMAL> inline void SetVectorMask(int32_t len) {
    Core& c = core();
    if (mode == MaskMode::COUNTER || c.mask_counter) { c.mask_hi = 0; c.mask_lo = uint64_t(len); return; }
    if (len < 0 || len > 128) c.fail("mask", "SetVectorMask", "length " + std::to_string(len) + " outside [0, 128]");
    c.mask_lo = len >= 64 ? ~0ull : ((1ull << len) - 1);
    c.mask_hi = len >= 128 ? ~0ull : len > 64 ? ((1ull << (len - 64)) - 1) : 0;
}
inline void ResetMask() { core().mask_hi = ~0ull; core().mask_lo = ~0ull; }
inline void SetDeqScale(half scale) { core().deq_scale = float(scale); }
inline void SetDeqScale(float scale) { core().deq_scale = scale; }
}  // namespace AscendC
