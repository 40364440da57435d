// The twin's launcher: register GM tensors (with canaries), run blockDim cores as threads, collect the Report.
//
//   twin::Launch launch(block_dim);
//   GM_ADDR x = launch.gm_input(x_ptr, x_bytes, "x");       // copied in; writes to it are violations
//   GM_ADDR y = launch.gm_output(y_ptr, y_bytes, "y");      // copied in, and back out if the launch is ok
//   GM_ADDR w = launch.gm_workspace(w_bytes, "workspace");  // poisoned scratch
//   launch.run([&] { my_kernel(x, y, w, tiling); });        // the body runs once per core
//   const twin::Report& r = launch.report();                // r.ok, r.violation, r.modeled_ns, ...
#pragma once
#include <functional>
#include <thread>
#include "core.h"

namespace twin {

struct Report {
    bool ok = true;
    std::string violation;      // "[rule] Call: detail (core N)" when !ok
    std::string rule;           // the rule id alone
    uint32_t block_dim = 0;
    double modeled_ns = 0;      // modeled 910B time of the launch (max over cores + launch overhead)
    double pipe_busy_ns[NPI] = {};  // per pipe, max over cores (modeled 910B)
    std::vector<Counters> cores;    // per core
    Counters total() const {
        Counters t;
        for (auto& c : cores) {
            t.mte2_bytes += c.mte2_bytes; t.mte3_bytes += c.mte3_bytes; t.vector_repeats += c.vector_repeats;
            t.vector_calls += c.vector_calls; t.scalar_ops += c.scalar_ops; t.calls += c.calls;
            for (int p = 0; p < NPI; ++p) t.busy_ns[p] += c.busy_ns[p];
            t.end_ns = std::max(t.end_ns, c.end_ns);
        }
        return t;
    }
};

class Launch {
  public:
    // kind: CoreKind::AIV (vector cores, the default), CoreKind::AIC (cube cores) or CoreKind::MIX_AIC_1_2 (block_dim groups
    // of one AIC + two AIV; threads per group in that order; at most 20 groups, the AIC count).
    explicit Launch(uint32_t block_dim, CoreKind kind = CoreKind::AIV) {
        if (block_dim < 1 || block_dim > 1024) throw std::invalid_argument("twin::Launch: block_dim must be in [1, 1024]");
        if (kind == CoreKind::MIX_AIC_1_2 && block_dim > model::CUBE_CORES)
            throw std::invalid_argument("twin::Launch: a MIX_AIC_1_2 launch has at most 20 groups (the AIC count)");
        state_.block_dim = block_dim;
        state_.kind = kind;
        state_.threads = kind == CoreKind::MIX_AIC_1_2 ? 3 * block_dim : block_dim;
        state_.xrecv.assign(state_.threads, std::vector<std::vector<double>>(CROSS_FLAG_IDS));
        report_.block_dim = block_dim;
    }
    GM_ADDR gm_input(const void* host, size_t bytes, const char* name) { return add(host, nullptr, bytes, name, false); }
    GM_ADDR gm_output(void* host, size_t bytes, const char* name) { return add(host, host, bytes, name, true); }
    GM_ADDR gm_workspace(size_t bytes, const char* name) { return add(nullptr, nullptr, bytes, name, true); }

    void run(const std::function<void()>& body) {
        uint32_t n = state_.threads;
        report_.cores.assign(n, Counters{});
        std::vector<std::thread> th;
        th.reserve(n);
        for (uint32_t i = 0; i < n; ++i)
            th.emplace_back([this, i, &body] {
                auto c = std::make_unique<Core>();
                c->idx = i; c->launch = &state_; c->block = i; c->who = "core " + std::to_string(i);
                if (state_.kind == CoreKind::AIC) c->aic = true;
                if (state_.kind == CoreKind::MIX_AIC_1_2) {
                    uint32_t g = i / 3, r = i % 3;
                    c->aic = r == 0; c->sub = r ? r - 1 : 0; c->block = r ? 2 * g + r - 1 : g;
                    c->who = r ? "AIV " + std::to_string(c->block) : "AIC " + std::to_string(g);
                }
                tl_core = c.get();
                try { body(); }
                catch (const Violation& v) { state_.fail(v.what()); }
                catch (const Aborted&) {}
                catch (const std::exception& e) { state_.fail(std::string("[exception] kernel: ") + e.what()); }
                c->cnt.end_ns = c->end_time();
                report_.cores[i] = c->cnt;
                tl_core = nullptr;
                std::lock_guard<std::mutex> g(state_.mu);
                state_.finished++;
                state_.cv.notify_all();
            });
        for (auto& t : th) t.join();
        finish();
    }
    const Report& report() const { return report_; }

  private:
    struct Buf { std::unique_ptr<uint8_t[]> mem; void* host_out; size_t bytes; };
    LaunchState state_;
    std::vector<Buf> bufs_;
    Report report_;

    GM_ADDR add(const void* in, void* out, size_t bytes, const char* name, bool writable) {
        Buf b;
        b.mem.reset(new uint8_t[bytes + 2 * CANARY_BYTES + 64]);
        uint8_t* raw = b.mem.get();
        uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + CANARY_BYTES + 63) & ~uintptr_t(63));
        std::memset(base - CANARY_BYTES, CANARY, CANARY_BYTES);
        std::memset(base + bytes, CANARY, CANARY_BYTES);
        if (in) std::memcpy(base, in, bytes); else std::memset(base, POISON, bytes);
        b.host_out = out; b.bytes = bytes;
        state_.regions.push_back({name, base, bytes, writable});
        bufs_.push_back(std::move(b));
        return base;
    }
    void finish() {
        // canaries: a kernel that wrote around a GM tensor through a raw pointer
        for (auto& r : state_.regions)
            for (size_t i = 0; i < CANARY_BYTES; ++i)
                if (r.base[-1 - ptrdiff_t(i)] != CANARY || r.base[r.bytes + i] != CANARY) {
                    state_.fail("[gm-canary] launch: the " + std::string(r.base[-1 - ptrdiff_t(i)] != CANARY ? "64 B before"
                                : "64 B after") + " GM tensor '" + r.name + "' were overwritten");
                    break;
                }
        report_.ok = state_.first_violation.empty();
        report_.violation = state_.first_violation;
        if (!report_.ok) {
            auto e = report_.violation.find(']');
            report_.rule = report_.violation.substr(1, e == std::string::npos ? 0 : e - 1);
        }
        // modeled time: cores beyond the physical count (40 AIV, 20 AIC) run in waves on the same core; a MIX
        // group takes its slowest core
        uint32_t per = state_.kind == CoreKind::MIX_AIC_1_2 ? 3 : 1;
        std::vector<double> phys(std::min<uint32_t>(state_.block_dim, state_.kind == CoreKind::AIV ? model::VECTOR_CORES
                                                                                                : model::CUBE_CORES), 0.0);
        for (uint32_t b = 0; b < state_.block_dim; ++b) {
            double t = 0;
            for (uint32_t r = 0; r < per; ++r) t = std::max(t, report_.cores[b * per + r].end_ns);
            phys[b % phys.size()] += t;
        }
        report_.modeled_ns = *std::max_element(phys.begin(), phys.end()) + model::LAUNCH_OVERHEAD_NS;
        for (auto& c : report_.cores)
            for (int p = 0; p < NPI; ++p) report_.pipe_busy_ns[p] = std::max(report_.pipe_busy_ns[p], c.busy_ns[p]);
        if (report_.ok)
            for (size_t k = 0; k < bufs_.size(); ++k)
                if (bufs_[k].host_out) std::memcpy(bufs_[k].host_out, state_.regions[k].base, bufs_[k].bytes);
    }
};

// The Report as a C struct for ctypes (mirrored by ops/_ascendc_build.py: TwinReport).
extern "C" {
struct TwinReportC {
    int32_t ok;
    uint32_t block_dim;
    double modeled_ns;                 // modeled 910B
    double pipe_busy_ns[NPI];          // S, V, M, MTE1, MTE2, MTE3, FIX; max over cores
    uint64_t mte2_bytes, mte3_bytes, vector_repeats, vector_calls, scalar_ops, calls;  // sums over cores
    char rule[32];
    char message[1024];
};
}
inline void to_c(const Report& r, TwinReportC* out) {
    if (!out) return;
    std::memset(out, 0, sizeof *out);
    out->ok = r.ok; out->block_dim = r.block_dim; out->modeled_ns = r.modeled_ns;
    for (int p = 0; p < NPI; ++p) out->pipe_busy_ns[p] = r.pipe_busy_ns[p];
    auto t = r.total();
    out->mte2_bytes = t.mte2_bytes; out->mte3_bytes = t.mte3_bytes; out->vector_repeats = t.vector_repeats;
    out->vector_calls = t.vector_calls; out->scalar_ops = t.scalar_ops; out->calls = t.calls;
    std::snprintf(out->rule, sizeof out->rule, "%s", r.rule.c_str());
    std::snprintf(out->message, sizeof out->message, "%s", r.violation.c_str());
}
}  // namespace twin
