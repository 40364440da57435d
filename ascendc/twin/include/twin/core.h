// The twin's per-core state: memories, buffer slots, pipe-hazard tracking (vector clocks), the timing model,
// counters; and the launch-wide state shared by the cores (GM registry, abort flag, SyncAll barrier).
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_910b.h"
#include "types.h"

namespace twin {

// A broken rule. what() = "[rule] Call: detail (core N)".
struct Violation : std::runtime_error {
    std::string rule, call;
    Violation(const std::string& r, const std::string& c, const std::string& msg)
        : std::runtime_error("[" + r + "] " + c + ": " + msg), rule(r), call(c) {}
};
// Thrown on the other cores once one core has failed; never reported.
struct Aborted {};

// Compact pipe index used by the tracker.
enum Pi : uint8_t { P_S = 0, P_V, P_M, P_MTE1, P_MTE2, P_MTE3, P_FIX, NPI };
inline const char* pi_name(int p) {
    static const char* n[] = {"PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_FIX"};
    return n[p];
}
inline Pi pi_of(pipe_t p) {
    switch (p) {
        case PIPE_S: return P_S; case PIPE_V: return P_V; case PIPE_M: return P_M; case PIPE_MTE1: return P_MTE1;
        case PIPE_MTE2: return P_MTE2; case PIPE_MTE3: return P_MTE3; case PIPE_FIX: return P_FIX;
        default: return NPI;
    }
}
inline void event_pipes(AscendC::HardEvent e, Pi& src, Pi& dst) {
    using H = AscendC::HardEvent;
    switch (e) {
        case H::MTE2_MTE1: src = P_MTE2; dst = P_MTE1; return; case H::MTE1_MTE2: src = P_MTE1; dst = P_MTE2; return;
        case H::MTE1_M: src = P_MTE1; dst = P_M; return;       case H::M_MTE1: src = P_M; dst = P_MTE1; return;
        case H::MTE2_V: src = P_MTE2; dst = P_V; return;       case H::V_MTE2: src = P_V; dst = P_MTE2; return;
        case H::MTE3_V: src = P_MTE3; dst = P_V; return;       case H::V_MTE3: src = P_V; dst = P_MTE3; return;
        case H::M_V: src = P_M; dst = P_V; return;             case H::V_M: src = P_V; dst = P_M; return;
        case H::V_V: src = P_V; dst = P_V; return;             case H::MTE3_MTE1: src = P_MTE3; dst = P_MTE1; return;
        case H::MTE1_MTE3: src = P_MTE1; dst = P_MTE3; return; case H::MTE1_V: src = P_MTE1; dst = P_V; return;
        case H::MTE2_M: src = P_MTE2; dst = P_M; return;       case H::M_MTE2: src = P_M; dst = P_MTE2; return;
        case H::V_MTE1: src = P_V; dst = P_MTE1; return;       case H::M_FIX: src = P_M; dst = P_FIX; return;
        case H::FIX_M: src = P_FIX; dst = P_M; return;         case H::MTE3_MTE2: src = P_MTE3; dst = P_MTE2; return;
        case H::MTE2_MTE3: src = P_MTE2; dst = P_MTE3; return; case H::S_V: src = P_S; dst = P_V; return;
        case H::V_S: src = P_V; dst = P_S; return;             case H::S_MTE2: src = P_S; dst = P_MTE2; return;
        case H::MTE2_S: src = P_MTE2; dst = P_S; return;       case H::S_MTE3: src = P_S; dst = P_MTE3; return;
        case H::MTE3_S: src = P_MTE3; dst = P_S; return;       case H::MTE2_FIX: src = P_MTE2; dst = P_FIX; return;
        case H::FIX_MTE2: src = P_FIX; dst = P_MTE2; return;   case H::FIX_S: src = P_FIX; dst = P_S; return;
        case H::M_S: src = P_M; dst = P_S; return;             case H::FIX_MTE3: src = P_FIX; dst = P_MTE3; return;
    }
    src = dst = NPI;
}
inline std::string event_name(AscendC::HardEvent e) {
    Pi s, d; event_pipes(e, s, d);
    auto strip = [](const char* n) { return std::string(n + 5); };
    return strip(pi_name(s)) + "_" + strip(pi_name(d));
}

// What a flag / queue event carries: the producer pipe's knowledge (vector clock) and its completion time.
struct Snap {
    uint32_t vc[NPI] = {};
    double t = 0;
};

// One registered GM tensor. `base` points past the leading canary.
struct GmRegion {
    std::string name;
    uint8_t* base = nullptr;
    size_t bytes = 0;
    bool writable = false;
};
constexpr size_t CANARY_BYTES = 64;
constexpr uint8_t CANARY = 0xA5;
constexpr uint8_t POISON = 0xFF;  // NaN in fp32/fp16/bf16, -1 in ints

// What a launch runs: vector cores only, cube cores only, or groups of one AIC + two AIV (MIX_AIC_1_2).
enum class CoreKind : uint8_t { AIV, AIC, MIX_AIC_1_2 };
constexpr uint32_t CROSS_FLAG_IDS = 11;      // CrossCoreSetFlag flagId 0..10 on Atlas A2 (atlasascendc_api_07_0273)
constexpr uint32_t CROSS_FLAG_PENDING = 15;  // sets pending per flag id and receiving core (see README)

// Launch-wide shared state.
struct LaunchState {
    uint32_t block_dim = 1, threads = 1;
    CoreKind kind = CoreKind::AIV;
    // cross-core flags: per receiving thread and flag id, the completion times of the sets it may consume; per
    // (mode, scope, flag id) key, per participant, the times of sets not yet combined into a signal
    std::vector<std::vector<std::vector<double>>> xrecv;
    std::vector<std::pair<uint64_t, std::vector<std::vector<double>>>> xsets;
    uint32_t xwaiting = 0;
    std::vector<GmRegion> regions;
    std::atomic<bool> abort{false};
    std::mutex mu;
    std::string first_violation;
    // SyncAll barrier
    std::condition_variable cv;
    uint32_t arrived = 0, generation = 0, finished = 0;
    double barrier_t = 0, barrier_next = 0;

    // cores streaming from HBM at once (physical cores in use: 40 AIV, 20 AIC on Atlas A2)
    double active_cores() const {
        if (kind == CoreKind::AIV) return std::min<double>(block_dim, model::VECTOR_CORES);
        if (kind == CoreKind::AIC) return std::min<double>(block_dim, model::CUBE_CORES);
        return std::min<double>(block_dim, model::CUBE_CORES) * 3;
    }
    const GmRegion* find(const void* p, size_t bytes) const {
        auto a = reinterpret_cast<const uint8_t*>(p);
        for (auto& r : regions)
            if (a >= r.base && a + bytes <= r.base + r.bytes) return &r;
        return nullptr;
    }
    void fail(const std::string& msg) {
        std::lock_guard<std::mutex> g(mu);
        if (first_violation.empty()) first_violation = msg;
        abort = true;
        cv.notify_all();
    }
};

// Memories a LocalTensor can live in.
enum Mem : uint8_t { M_UB = 0, M_L1, M_L0A, M_L0B, M_L0C, NMEM };
inline const char* mem_name(int m) { static const char* n[] = {"UB", "L1", "L0A", "L0B", "L0C"}; return n[m]; }
inline uint32_t mem_bytes(int m) {
    using namespace model;
    static const uint32_t b[] = {UB_BYTES, L1_BYTES, L0A_BYTES, L0B_BYTES, L0C_BYTES};
    return b[m];
}
inline uint32_t mem_align(int m) {
    using namespace model;
    static const uint32_t a[] = {UB_ALIGN, L1_ALIGN, L0AB_ALIGN, L0AB_ALIGN, L0C_ALIGN};
    return a[m];
}

// A buffer handed out by TPipe::InitBuffer (one per queue buffer, one per TBuf).
struct Slot {
    enum State : uint8_t { FREE, ALLOCATED, QUEUED, DEQUEUED, TBUF };
    uint8_t mem = M_UB;
    uint32_t addr = 0, len = 0, gen = 1;
    State state = FREE;
    Snap freed;     // FreeTensor's event (what the next AllocTensor waits on)
    Snap enq;       // EnQue's event (what DeQue waits on)
    const void* owner = nullptr;
};

// Hazard record of one 32-byte block of on-chip memory.
struct BlockMeta {
    uint8_t wpipe = NPI;
    uint32_t wseq = 0, wcall = 0;
    uint32_t rseq[NPI] = {}, rcall[NPI] = {};
};

// A GM range this core wrote (MTE3 copy or scalar store) that some reader pipe may not be synced with yet.
struct GmWrite {
    uintptr_t lo, hi;
    uint32_t seq, call;
    uint8_t pipe;
};

struct CallRec {
    const char* name;
    uint8_t pipe;
};

struct Counters {
    uint64_t mte2_bytes = 0, mte3_bytes = 0, vector_repeats = 0, vector_calls = 0, scalar_ops = 0, calls = 0;
    double busy_ns[NPI] = {};
    double end_ns = 0;
};

struct Core {
    uint32_t idx = 0;           // thread index in the launch
    bool aic = false;           // a cube core (L1/L0 memories) rather than a vector core (UB)
    uint32_t block = 0, sub = 0;  // GetBlockIdx, GetSubBlockIdx
    std::string who = "core 0";
    LaunchState* launch = nullptr;
    std::unique_ptr<uint8_t[]> mem[NMEM];
    std::vector<BlockMeta> meta[NMEM];
    uint32_t arena_next[NMEM] = {};
    std::vector<Slot> slots;
    uint32_t buffers = 0, pos_buffers[16] = {};
    void* pipe_obj = nullptr;
    // vector clocks: vc[R][W] = highest W-seq known complete to pipe R; seq[W] = calls issued on W
    uint32_t vc[NPI][NPI] = {}, seq[NPI] = {};
    std::vector<CallRec> calls;
    std::vector<GmWrite> gm_writes;
    std::vector<Snap> flags[64][model::MAX_EVENT_ID];  // pending SetFlags per HardEvent and id (FIFO)
    uint8_t event_alloc[64] = {};                      // AllocEventID bitmap per HardEvent
    // timing
    // free_t: when pipe p can start its next instruction; done_t: when everything issued on p has completed
    // (DMA latency overlaps later DMAs of the same pipe).
    double free_t[NPI] = {}, done_t[NPI] = {}, ready_t[NPI] = {}, t_s = 0;
    std::vector<std::pair<double, double>> hbm_busy;  // sorted, disjoint busy intervals of this core's HBM share
    Counters cnt;
    // vector mask state (SetMaskCount/SetMaskNorm/SetVectorMask)
    bool mask_counter = false;
    uint64_t mask_hi = ~0ull, mask_lo = ~0ull;
    // atomic mode for MTE3 writes to GM: 0 none, else sizeof(T) with a kind tag
    int atomic_kind = 0;
    float deq_scale = 1.0f;
    uint32_t gen_counter = 1;

    Core() { calls.push_back({"<none>", NPI}); }
    // On-chip memories are created (poisoned) the first time a buffer is placed in them.
    void ensure_mem(int m) {
        if (mem[m]) return;
        mem[m].reset(new uint8_t[mem_bytes(m)]);
        std::memset(mem[m].get(), POISON, mem_bytes(m));
        meta[m].resize(mem_bytes(m) / 32);
    }

    [[noreturn]] void fail(const std::string& rule, const std::string& call, const std::string& msg) {
        throw Violation(rule, call, msg + " (" + who + ")");
    }
    void check_abort() { if (launch && launch->abort.load(std::memory_order_relaxed)) throw Aborted{}; }

    // ---- issue + timing -------------------------------------------------------------------------------
    // One API call leaves the scalar unit: counted, and the issue clock moves on; returns when it was issued.
    double issue_slot() {
        cnt.calls++;
        double t = t_s;
        t_s += model::cycles_to_ns(model::ISSUE_CYCLES);
        return t;
    }
    // A call on pipe p: the launch may have been aborted by another core; the call is numbered on its pipe and
    // remembered (hazard messages name it); returns its issue time.
    double record_call(const char* name, Pi p) {
        check_abort();
        seq[p]++;
        calls.push_back({name, uint8_t(p)});
        return issue_slot();
    }
    // Records one API call on pipe p with modeled duration dur_ns; returns its call index.
    uint32_t issue(const char* name, Pi p, double dur_ns) {
        double issue_t = record_call(name, p);
        if (p == P_S) {
            double start = std::max(t_s, ready_t[P_S]);
            t_s = start + dur_ns;
            free_t[P_S] = t_s;
        } else {
            double start = std::max({free_t[p], ready_t[p], issue_t});
            free_t[p] = start + dur_ns;
        }
        cnt.busy_ns[p] += dur_ns;
        return uint32_t(calls.size() - 1);
    }
    // A DMA of `bytes` on an MTE pipe: it streams at the per-core MTE rate, through this core's share of HBM
    // (HBM bandwidth / active cores, shared by MTE2, MTE3 and FIX), and completes a fixed latency after it streams.
    uint32_t issue_dma(const char* name, Pi p, uint64_t bytes) {
        double issue_t = record_call(name, p);
        double active = launch ? launch->active_cores() : 1;
        double stream = double(bytes) / (model::MTE_BYTES_PER_CYCLE * model::CLOCK_GHZ);
        double share = double(bytes) / (model::HBM_BYTES_PER_NS / active);
        double start = std::max({free_t[p], ready_t[p], issue_t});
        double streamed = std::max(start + stream, hbm_reserve(start, share));
        free_t[p] = streamed;
        done_t[p] = std::max(done_t[p], streamed + model::cycles_to_ns(model::MTE_LATENCY_CYCLES));
        cnt.busy_ns[p] += streamed - start;
        return uint32_t(calls.size() - 1);
    }
    // Reserve `need` ns of this core's HBM share from `start` on, filling idle gaps first (a fluid model of a
    // shared channel: MTE2 and MTE3 transfers interleave); returns when the last byte has passed.
    double hbm_reserve(double start, double need) {
        // no later DMA can start before this (pipes start no earlier than free/ready and the scalar issue clock)
        double lo = std::min({std::max({free_t[P_MTE2], ready_t[P_MTE2], t_s}), std::max({free_t[P_MTE3], ready_t[P_MTE3], t_s}),
                              std::max({free_t[P_FIX], ready_t[P_FIX], t_s})});
        size_t keep = 0;
        while (keep < hbm_busy.size() && hbm_busy[keep].second < std::min(lo, start)) ++keep;
        hbm_busy.erase(hbm_busy.begin(), hbm_busy.begin() + keep);
        std::vector<std::pair<double, double>> add;
        double t = start, left = need;
        size_t i = 0;
        while (i < hbm_busy.size() && hbm_busy[i].second <= t) ++i;
        constexpr double EPS = 1e-6;  // ns: gaps shorter than this are skipped (keeps the loop finite in floating point)
        while (left > EPS) {
            if (i < hbm_busy.size() && hbm_busy[i].first <= t + EPS) { t = std::max(t, hbm_busy[i].second); ++i; continue; }
            double gap_end = i < hbm_busy.size() ? hbm_busy[i].first : t + left;
            double use = std::min(left, gap_end - t);
            add.push_back({t, t + use});
            left -= use; t += use;
        }
        hbm_busy.insert(hbm_busy.end(), add.begin(), add.end());
        std::sort(hbm_busy.begin(), hbm_busy.end());
        std::vector<std::pair<double, double>> merged;
        for (auto& iv : hbm_busy) {
            if (!merged.empty() && iv.first <= merged.back().second + EPS) merged.back().second = std::max(merged.back().second, iv.second);
            else merged.push_back(iv);
        }
        hbm_busy.swap(merged);
        return t;
    }
    double complete(int p) const { return std::max(free_t[p], done_t[p]); }
    Snap snapshot(Pi w) const {
        Snap s;
        for (int x = 0; x < NPI; ++x) s.vc[x] = vc[w][x];
        s.vc[w] = seq[w];
        s.t = w == P_S ? t_s : std::max(complete(w), t_s);
        return s;
    }
    void merge(Pi r, const Snap& s) {
        for (int x = 0; x < NPI; ++x) vc[r][x] = std::max(vc[r][x], s.vc[x]);
        if (r == P_S) t_s = std::max(t_s, s.t);
        else ready_t[r] = std::max(ready_t[r], s.t);
    }
    void barrier_all() {
        double t = t_s;
        for (int p = 0; p < NPI; ++p) t = std::max(t, complete(p));
        for (int r = 0; r < NPI; ++r) {
            for (int x = 0; x < NPI; ++x) vc[r][x] = seq[x];
            ready_t[r] = t;
        }
        t_s = t;
    }
    double end_time() const {
        double t = t_s;
        for (int p = 0; p < NPI; ++p) t = std::max(t, complete(p));
        return t;
    }

    // ---- hazards ----------------------------------------------------------------------------------------
    std::string call_desc(uint32_t c) const {
        return std::string(calls[c].name) + " [" + (calls[c].pipe < NPI ? pi_name(calls[c].pipe) : "-") +
               ", call #" + std::to_string(c) + "]";
    }
    std::string sync_hint(int w, int r) const {
        if (w == r) return "PipeBarrier<" + std::string(pi_name(r)) + ">";
        std::string ws = pi_name(w) + 5, rs = pi_name(r) + 5;
        return "EnQue/DeQue, SetFlag/WaitFlag<HardEvent::" + ws + "_" + rs + "> or PipeBarrier<PIPE_ALL>";
    }
    // kind: RAW (read after an unsynced write), WAW (overwrite of an unsynced write), WAR (overwrite of an
    // unsynced read). `other` is the earlier call, on pipe w; this call is on pipe r.
    [[noreturn]] void hazard(const char* kind, uint32_t call, int m, uint32_t blk, uint32_t other, int w, int r) {
        char where[96];
        std::snprintf(where, sizeof where, "%s bytes [%u, %u)", mem_name(m), blk * 32, blk * 32 + 32);
        std::string k = kind;
        std::string verb = k == "RAW" ? " reads " : " overwrites ";
        std::string role = k == "WAR" ? " still being read by " : " last written by ";
        fail("pipe-hazard", calls[call].name, k + ": " + call_desc(call) + verb + where + role + call_desc(other) +
             " with no " + sync_hint(w, r) + " between them");
    }
    // Same-pipe RAW is a hazard only on PIPE_V (the PipeBarrier page: dependent vector instructions need
    // PipeBarrier<PIPE_V>); MTE and scalar pipes execute their own instructions in order.
    bool needs_sync(int w, int r) const { return w != r || r == P_V; }
    void on_read(uint32_t call, int m, uint32_t addr, uint32_t bytes) {
        if (bytes == 0) return;
        int r = calls[call].pipe;
        auto& mt = meta[m];
        for (uint32_t b = addr / 32, e = (addr + bytes + 31) / 32; b < e; ++b) {
            auto& bm = mt[b];
            if (bm.wpipe < NPI && needs_sync(bm.wpipe, r) && bm.wseq > vc[r][bm.wpipe] && bm.wcall != call)
                hazard("RAW", call, m, b, bm.wcall, bm.wpipe, r);
        }
    }
    void on_write(uint32_t call, int m, uint32_t addr, uint32_t bytes) {
        if (bytes == 0) return;
        int r = calls[call].pipe;
        auto& mt = meta[m];
        for (uint32_t b = addr / 32, e = (addr + bytes + 31) / 32; b < e; ++b) {
            auto& bm = mt[b];
            if (bm.wpipe < NPI && bm.wpipe != r && bm.wseq > vc[r][bm.wpipe])
                hazard("WAW", call, m, b, bm.wcall, bm.wpipe, r);
            // scalar reads complete before the scalar unit issues the next instruction: no WAR from PIPE_S
            for (int x = 1; x < NPI; ++x)
                if (x != r && bm.rseq[x] > vc[r][x] && bm.rcall[x] != call)
                    hazard("WAR", call, m, b, bm.rcall[x], x, r);
        }
    }
    // GM hazards within one core: a GM read (MTE2 copy, scalar load) of bytes this core wrote on another pipe
    // (MTE3 copy, scalar store) needs a sync between the two pipes (e.g. SetFlag/WaitFlag<MTE3_MTE2>).
    void gm_wrote(uint32_t call, const void* p, uint64_t bytes) {
        if (!bytes) return;
        uint8_t w = calls[call].pipe;
        auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
        if (!gm_writes.empty()) {
            auto& b = gm_writes.back();
            if (b.pipe == w && b.hi == lo) { b.hi = hi; b.seq = seq[w]; b.call = call; return; }
        }
        gm_writes.push_back({lo, hi, seq[w], call, w});
        if (gm_writes.size() > 64) {
            std::vector<GmWrite> live;
            for (auto& e : gm_writes)
                if (e.seq > vc[P_MTE2][e.pipe] || e.seq > vc[P_S][e.pipe] || e.seq > vc[P_MTE1][e.pipe]) live.push_back(e);
            gm_writes.swap(live);
        }
    }
    void gm_read(uint32_t call, const void* p, uint64_t bytes) {
        int r = calls[call].pipe;
        auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
        for (auto& e : gm_writes)
            if (e.pipe != r && e.lo < hi && lo < e.hi && e.seq > vc[r][e.pipe]) {
                std::string ws = pi_name(e.pipe) + 5, rs = pi_name(r) + 5;
                fail("pipe-hazard", calls[call].name, "RAW on GM: " + call_desc(call) + " reads GM bytes this core "
                     "wrote with " + call_desc(e.call) + " with no SetFlag/WaitFlag<HardEvent::" + ws + "_" + rs +
                     "> or PipeBarrier<PIPE_ALL> between them");
            }
    }
    void mark_read(uint32_t call, int m, uint32_t addr, uint32_t bytes) {
        int r = calls[call].pipe;
        auto& mt = meta[m];
        for (uint32_t b = addr / 32, e = (addr + bytes + 31) / 32; b < e; ++b) {
            mt[b].rseq[r] = seq[r]; mt[b].rcall[r] = call;
        }
    }
    void mark_write(uint32_t call, int m, uint32_t addr, uint32_t bytes) {
        int r = calls[call].pipe;
        auto& mt = meta[m];
        for (uint32_t b = addr / 32, e = (addr + bytes + 31) / 32; b < e; ++b) {
            mt[b].wpipe = uint8_t(r); mt[b].wseq = seq[r]; mt[b].wcall = call;
        }
    }
};

inline thread_local Core* tl_core = nullptr;
inline Core& core() {
    if (!tl_core) throw std::logic_error("AscendC API called outside twin::Launch::run");
    return *tl_core;
}
inline bool core_is_aic() { return core().aic; }
// KERNEL_TASK_TYPE_DEFAULT(t): the kernel's declared type must match what the launch runs.
inline void check_kernel_type(KernelMetaType t) {
    Core& c = core();
    CoreKind k = c.launch->kind;
    bool ok = (k == CoreKind::AIV && (t == KERNEL_TYPE_AIV_ONLY || t == KERNEL_TYPE_MIX_AIV_1_0)) ||
              (k == CoreKind::AIC && (t == KERNEL_TYPE_AIC_ONLY || t == KERNEL_TYPE_MIX_AIC_1_0)) ||
              (k == CoreKind::MIX_AIC_1_2 && t == KERNEL_TYPE_MIX_AIC_1_2);
    static const char* kn[] = {"vector-only", "cube-only", "MIX_AIC_1_2"};
    if (!ok)
        c.fail("kernel-type", "KERNEL_TASK_TYPE_DEFAULT", "kernel type " + std::to_string(int(t)) +
               " does not match the launch (" + kn[int(k)] + ")");
}

}  // namespace twin
