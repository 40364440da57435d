// Cross-core synchronisation of separated AIC / AIV cores: CrossCoreSetFlag / CrossCoreWaitFlag
// (atlasascendc_api_07_0273, CrossCoreSetFlag(ISASI); the 8.0.RC2 page atlasascendc_api_07_0268 for mode 2).
// Each flag id is a counter per receiving core: a signal adds one, CrossCoreWaitFlag blocks while it is 0 and then
// takes one. Mode 0: a signal once every core of the caller's type has set; mode 1: once both AIV of the group have
// set; mode 2: an AIC set signals both AIV of its group, the set of both AIV signals the AIC.
#pragma once
#include "sync.h"

namespace twin::mix {
inline std::vector<uint32_t> group_aiv(const LaunchState& L, const Core& c) {
    if (L.kind != CoreKind::MIX_AIC_1_2) return {c.idx};
    uint32_t g = c.idx / 3 * 3;
    return {g + 1, g + 2};
}
inline void set_flag(int mode, Pi pipe, uint16_t id) {
    Core& c = core();
    c.check_abort();
    std::string call = "CrossCoreSetFlag<" + std::to_string(mode) + ", " + pi_name(pipe) + ">";
    if (id >= CROSS_FLAG_IDS)
        c.fail("cross-core-flag", call, "flagId " + std::to_string(id) + " outside [0, " +
               std::to_string(CROSS_FLAG_IDS - 1) + "] (Atlas A2)");
    LaunchState& L = *c.launch;
    std::vector<uint32_t> from, to;
    if (mode == 0) {
        for (uint32_t t = 0; t < L.threads; ++t) {
            bool aic = L.kind == CoreKind::AIC || (L.kind == CoreKind::MIX_AIC_1_2 && t % 3 == 0);
            if (aic == c.aic) from.push_back(t);
        }
        to = from;
    } else if (mode == 1) {
        if (c.aic) c.fail("cross-core-flag", call, "mode 1 synchronises the AIV of a group; called on an AIC");
        from = to = group_aiv(L, c);
    } else {
        if (L.kind != CoreKind::MIX_AIC_1_2)
            c.fail("cross-core-flag", call, "mode 2 (AIC <-> AIV) needs a MIX_AIC_1_2 launch");
        std::vector<uint32_t> aiv = group_aiv(L, c), aic = {c.idx / 3 * 3};
        from = c.aic ? aic : aiv;
        to = c.aic ? aiv : aic;
    }
    c.issue_slot();
    double t = pipe == P_S ? c.t_s : std::max(c.complete(pipe), c.t_s);
    uint64_t key = uint64_t(mode) | uint64_t(from[0]) << 8 | uint64_t(c.aic) << 40 | uint64_t(id) << 48;
    std::lock_guard<std::mutex> g(L.mu);
    auto it = std::find_if(L.xsets.begin(), L.xsets.end(), [&](auto& e) { return e.first == key; });
    if (it == L.xsets.end()) {
        L.xsets.push_back({key, std::vector<std::vector<double>>(from.size())});
        it = L.xsets.end() - 1;
    }
    auto& q = it->second;
    q[std::find(from.begin(), from.end(), c.idx) - from.begin()].push_back(t);
    while (std::all_of(q.begin(), q.end(), [](auto& v) { return !v.empty(); })) {
        double ts = 0;
        for (auto& v : q) { ts = std::max(ts, v.front()); v.erase(v.begin()); }
        for (uint32_t r : to) {
            auto& pend = L.xrecv[r][id];
            if (pend.size() >= CROSS_FLAG_PENDING)
                c.fail("cross-core-flag", call, "flagId " + std::to_string(id) + " already has " +
                       std::to_string(CROSS_FLAG_PENDING) + " sets pending at a receiving core (the counter limit)");
            pend.push_back(ts);
        }
    }
    L.cv.notify_all();
}
inline void wait_flag(Pi pipe, uint16_t id) {
    Core& c = core();
    c.check_abort();
    const char* call = "CrossCoreWaitFlag";
    if (id >= CROSS_FLAG_IDS)
        c.fail("cross-core-flag", call, "flagId " + std::to_string(id) + " outside [0, " +
               std::to_string(CROSS_FLAG_IDS - 1) + "] (Atlas A2)");
    LaunchState& L = *c.launch;
    c.issue_slot();
    std::unique_lock<std::mutex> g(L.mu);
    auto& pend = L.xrecv[c.idx][id];
    while (pend.empty()) {
        if (L.abort.load()) throw Aborted{};
        if (L.xwaiting + 1 + L.finished >= L.threads) {
            g.unlock();
            c.fail("cross-core-flag", call, "flagId " + std::to_string(id) + " can never be set: every other core "
                   "has returned or is waiting (a hang on hardware)");
        }
        L.xwaiting++;
        L.cv.wait(g);
        L.xwaiting--;
    }
    double t = pend.front();
    pend.erase(pend.begin());
    g.unlock();
    if (pipe == P_S) c.t_s = std::max(c.t_s, t);
    else c.ready_t[pipe] = std::max(c.ready_t[pipe], t);
}
}  // namespace twin::mix

namespace AscendC {
template <uint8_t modeId, pipe_t pipe> inline void CrossCoreSetFlag(uint16_t flagId) {
    static_assert(modeId <= 2, "CrossCoreSetFlag: modeId 0, 1 or 2 on Atlas A2");
    static_assert(pipe != PIPE_S && pipe != PIPE_ALL, "CrossCoreSetFlag: PIPE_S and PIPE_ALL are not allowed");
    twin::mix::set_flag(modeId, twin::pi_of(pipe), flagId);
}
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S> inline void CrossCoreWaitFlag(uint16_t flagId) {
    twin::mix::wait_flag(twin::pi_of(pipe), flagId);
}
}  // namespace AscendC
