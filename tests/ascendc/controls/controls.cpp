// Negative controls for the twin's rules: each kernel breaks one rule (fixed = 0) or obeys it (fixed = 1).
// twin_control(id, fixed, report) runs control `id` on a 4096-float input "x" and a 4096-float output "y".
#include <vector>
#include "kernel_operator.h"
using namespace AscendC;

namespace {
constexpr uint32_t N = 4096;
struct Gm { GlobalTensor<float> x, y; };
Gm gm(GM_ADDR x, GM_ADDR y) {
    Gm g; g.x.SetGlobalBuffer((__gm__ float*)x, N); g.y.SetGlobalBuffer((__gm__ float*)y, N); return g;
}
using Body = void (*)(GM_ADDR, GM_ADDR, int);

// memories and buffers
void ub_overflow(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 96 * 1024);
    pipe.InitBuffer(b, fixed ? 96 * 1024 : 97 * 1024);
}
void buffers_per_position(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TQue<TPosition::VECIN, 1> q[5];
    for (int i = 0; i < (fixed ? 4 : 5); ++i) pipe.InitBuffer(q[i], 2, 256);
}
void buffers_per_kernel(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; static thread_local TBuf<TPosition::VECCALC> b[65];
    for (int i = 0; i < (fixed ? 64 : 65); ++i) { b[i] = TBuf<TPosition::VECCALC>(); pipe.InitBuffer(b[i], 32); }
}
void alloc_beyond_num(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TQue<TPosition::VECIN, 1> q; pipe.InitBuffer(q, 1, 256);
    auto t = q.AllocTensor<float>();
    if (fixed) q.FreeTensor(t);
    auto u = q.AllocTensor<float>();
    q.FreeTensor(u);
}
void queue_depth(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TQue<TPosition::VECIN, 1> q; pipe.InitBuffer(q, 2, 256);
    auto a = q.AllocTensor<float>(); auto b = q.AllocTensor<float>();
    q.EnQue(a);
    if (fixed) { auto d = q.DeQue<float>(); q.FreeTensor(d); }
    q.EnQue(b);
}
void double_free(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TQue<TPosition::VECIN, 1> q; pipe.InitBuffer(q, 1, 256);
    auto a = q.AllocTensor<float>(); auto copy = a;
    q.FreeTensor(a);
    if (!fixed) q.FreeTensor(copy);
}
void use_after_free(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TQue<TPosition::VECOUT, 1> q; pipe.InitBuffer(q, 1, 256);
    auto a = q.AllocTensor<float>();
    if (!fixed) q.FreeTensor(a);
    Duplicate(a, 1.0f, 64);
    if (fixed) q.FreeTensor(a);
}
void deque_empty(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TQue<TPosition::VECIN, 1> q; pipe.InitBuffer(q, 1, 256);
    if (fixed) { auto a = q.AllocTensor<float>(); q.EnQue(a); }
    auto b = q.DeQue<float>();
    q.FreeTensor(b);
}
// per-call checks
void ub_align(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    auto t = b.Get<float>();
    Duplicate(t[fixed ? 8 : 3], 1.0f, 64);
}
void operand_bounds(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    auto t = b.Get<float>();
    Adds(t, t, 1.0f, fixed ? 256 : 257);
}
void repeat_times(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 256 * 256);
    auto t = b.Get<float>();
    Adds(t, t, 1.0f, 64, fixed ? 255 : 256, UnaryRepeatParams(1, 1, 1, 1));
}
void mask_range(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    auto t = b.Get<float>();
    Adds(t, t, 1.0f, fixed ? 64 : 65, 1, UnaryRepeatParams());
}
void mask_bits(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    auto t = b.Get<float>();
    uint64_t m[2] = {~0ull, fixed ? 0ull : 1ull};
    Muls(t, t, 2.0f, m, 1, UnaryRepeatParams());
}
void dst_stride(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    auto t = b.Get<float>();
    Abs(t, t, 64, 1, UnaryRepeatParams(fixed ? 1 : 0, 1, 8, 8));
}
void count_negative(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b; pipe.InitBuffer(b, 1024);
    auto t = b.Get<float>();
    Muls(t, t, 2.0f, fixed ? 0 : -1);
}
void cast_pair(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b, o; pipe.InitBuffer(b, 1024); pipe.InitBuffer(o, 1024);
    if (fixed) Cast(o.Get<half>(), b.Get<float>(), RoundMode::CAST_RINT, 64);
    else Cast(o.Get<int8_t>(), b.Get<float>(), RoundMode::CAST_RINT, 64);
}
void compare_align(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b, m; pipe.InitBuffer(b, 1024); pipe.InitBuffer(m, 64);
    auto t = b.Get<float>();
    Compare(m.Get<uint8_t>(), t, t, CMPMODE::LT, fixed ? 64 : 40);
}
// data movement
void datacopy_len(GM_ADDR x, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 1024);
    GlobalTensor<half> g; g.SetGlobalBuffer((__gm__ half*)x, 2 * N);
    if (fixed) DataCopyPad(b.Get<half>(), g, DataCopyExtParams(1, 22, 0, 0, 0), DataCopyPadExtParams<half>());
    else DataCopy(b.Get<half>(), g, 11);
}
void datacopy_ub_addr(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y);
    DataCopy(b.Get<float>()[fixed ? 8 : 4], g.x, 64);
}
void datacopy_out_len(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECOUT> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y);
    Duplicate(b.Get<float>(), 0.0f, 64);
    SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
    if (fixed) DataCopyPad(g.y, b.Get<float>(), DataCopyExtParams(1, 13 * 4, 0, 0, 0));
    else DataCopy(g.y, b.Get<float>(), 13);
}
void datacopypad_count(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 160 * 1024);
    auto g = gm(x, y);
    DataCopyPad(b.Get<float>(), g.x, DataCopyExtParams(fixed ? 4095 : 4096, 1, 0, 0, 0), DataCopyPadExtParams<float>());
}
void datacopypad_len(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y);
    DataCopyPad(b.Get<float>(), g.x, DataCopyExtParams(1, fixed ? 4 : 0, 0, 0, 0), DataCopyPadExtParams<float>());
}
void gm_unregistered(GM_ADDR x, GM_ADDR, int fixed) {
    GlobalTensor<float> g;
    g.SetGlobalBuffer((__gm__ float*)x, fixed ? N : N + 1);
}
void gm_tensor_bounds(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y);
    DataCopy(b.Get<float>(), g.x[fixed ? N - 64 : N - 56], 64);
}
void gm_write_input(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECOUT> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y);
    Duplicate(b.Get<float>(), 0.0f, 64);
    SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
    DataCopy(fixed ? g.y : g.x, b.Get<float>(), 64);
}
void gm_canary(GM_ADDR, GM_ADDR y, int fixed) {
    ((__gm__ float*)y)[fixed ? N - 1 : N + 3] = 1.0f;  // a raw pointer store, which the API cannot see
}
void atomic_type(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECOUT> b; pipe.InitBuffer(b, 1024);
    GlobalTensor<half> gh; gh.SetGlobalBuffer((__gm__ half*)y, 2 * N);
    auto g = gm(x, y);
    Duplicate(b.Get<float>(), 1.0f, 64);
    SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
    SetAtomicAdd<float>();
    if (fixed) DataCopy(g.y, b.Get<float>(), 64);
    else DataCopy(gh, b.Get<half>(), 128);
    SetAtomicNone();
}
// pipe hazards
void raw_mte2_v(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y); auto t = b.Get<float>();
    DataCopy(t, g.x, 64);
    if (fixed) { SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0); }
    Adds(t, t, 1.0f, 64);
}
void raw_v_mte3(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECOUT> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y); auto t = b.Get<float>();
    Duplicate(t, 2.0f, 64);
    if (fixed) PipeBarrier<PIPE_ALL>();
    DataCopy(g.y, t, 64);
}
void war_v_mte2(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b, o; pipe.InitBuffer(b, 1024); pipe.InitBuffer(o, 1024);
    auto g = gm(x, y); auto t = b.Get<float>();
    DataCopy(t, g.x, 64);
    SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0);
    Adds(o.Get<float>(), t, 1.0f, 64);
    if (fixed) { SetFlag<HardEvent::V_MTE2>(1); WaitFlag<HardEvent::V_MTE2>(1); }
    DataCopy(t, g.x[64], 64);
}
void raw_v_v(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> a, b; pipe.InitBuffer(a, 1024); pipe.InitBuffer(b, 1024);
    Duplicate(a.Get<float>(), 1.0f, 64);
    if (fixed) PipeBarrier<PIPE_V>();
    Muls(b.Get<float>(), a.Get<float>(), 2.0f, 64);
}
void raw_s_v(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> a; pipe.InitBuffer(a, 1024);
    auto t = a.Get<float>();
    t.SetValue(0, 3.0f);
    if (fixed) { SetFlag<HardEvent::S_V>(0); WaitFlag<HardEvent::S_V>(0); }
    Muls(t, t, 2.0f, 64);
}
void raw_v_s(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> a; pipe.InitBuffer(a, 1024);
    auto t = a.Get<float>();
    Duplicate(t, 1.0f, 64);
    if (fixed) { SetFlag<HardEvent::V_S>(0); WaitFlag<HardEvent::V_S>(0); }
    (void)t.GetValue(5);
}
void transitive_sync(GM_ADDR x, GM_ADDR y, int fixed) {  // MTE2 -> V -> MTE3 chain covers MTE2 -> MTE3
    TPipe pipe; TBuf<TPosition::VECIN> a, o; pipe.InitBuffer(a, 1024); pipe.InitBuffer(o, 1024);
    auto g = gm(x, y);
    DataCopy(a.Get<float>(), g.x, 64);
    if (fixed) { SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0); }
    Duplicate(o.Get<float>(), 1.0f, 64);
    SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
    DataCopy(g.y, a.Get<float>(), 64);
}
void flag_unmatched(GM_ADDR, GM_ADDR, int fixed) {
    if (fixed) SetFlag<HardEvent::MTE2_V>(2);
    WaitFlag<HardEvent::MTE2_V>(2);
}
void event_id(GM_ADDR, GM_ADDR, int fixed) {
    SetFlag<HardEvent::V_MTE3>(fixed ? 7 : 8);
    WaitFlag<HardEvent::V_MTE3>(fixed ? 7 : 8);
}
void queue_sync(GM_ADDR x, GM_ADDR y, int fixed) {  // the TQue protocol orders MTE2 -> V -> MTE3 by itself
    TPipe pipe; TQue<TPosition::VECIN, 1> qi; TQue<TPosition::VECOUT, 1> qo;
    pipe.InitBuffer(qi, 1, 256); pipe.InitBuffer(qo, 1, 256);
    auto g = gm(x, y);
    auto a = qi.AllocTensor<float>(); DataCopy(a, g.x, 64); qi.EnQue(a);
    auto b = fixed ? qi.DeQue<float>() : a;
    auto o = qo.AllocTensor<float>(); Muls(o, b, 2.0f, 64); qo.EnQue(o);
    if (!fixed) qi.DeQue<float>();
    qi.FreeTensor(b);
    auto p = qo.DeQue<float>(); DataCopy(g.y, p, 64); qo.FreeTensor(p);
}
// multi-core
void sync_all_missing(GM_ADDR, GM_ADDR, int fixed) {
    if (!fixed && GetBlockIdx() == 1) return;
    SyncAll();
}
void one_core_fails(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y);
    DataCopy(b.Get<float>(), g.x, (!fixed && GetBlockIdx() == 2) ? 7 : 8);
    SyncAll();
}

void waw_v_mte2(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y); auto t = b.Get<float>();
    Duplicate(t, 0.0f, 64);
    if (fixed) { SetFlag<HardEvent::V_MTE2>(0); WaitFlag<HardEvent::V_MTE2>(0); }
    DataCopy(t, g.x, 64);
}
void release_event(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe;
    event_t id = GetTPipePtr()->AllocEventID<HardEvent::V_S>();
    GetTPipePtr()->ReleaseEventID<HardEvent::V_S>(id);
    if (!fixed) GetTPipePtr()->ReleaseEventID<HardEvent::V_S>(id);
}
void cast_overlap(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b, o; pipe.InitBuffer(b, 1024); pipe.InitBuffer(o, 1024);
    Cast(fixed ? o.Get<half>() : b.Get<half>(), b.Get<float>(), RoundMode::CAST_RINT, 64);
}
void select_mode(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::VECCALC> b, m, o; pipe.InitBuffer(b, 1024); pipe.InitBuffer(m, 64); pipe.InitBuffer(o, 1024);
    Select(o.Get<float>(), m.Get<uint8_t>(), b.Get<float>(), b.Get<float>(),
           fixed ? SELMODE::VSEL_TENSOR_TENSOR_MODE : SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);
}
void gm_setvalue_input(GM_ADDR x, GM_ADDR y, int fixed) {
    auto g = gm(x, y);
    (fixed ? g.y : g.x).SetValue(3, 1.0f);
}

void datacopy_params(GM_ADDR x, GM_ADDR y, int fixed) {
    TPipe pipe; TBuf<TPosition::VECIN> b; pipe.InitBuffer(b, 1024);
    auto g = gm(x, y);
    DataCopy(b.Get<float>(), g.x, DataCopyParams(2, fixed ? 1 : 0, 1, 0));
}

void gm_raw_mte3_mte2(GM_ADDR x, GM_ADDR y, int fixed) {  // write y, read it back on another pipe
    TPipe pipe; TBuf<TPosition::VECOUT> b; TBuf<TPosition::VECIN> c; pipe.InitBuffer(b, 1024); pipe.InitBuffer(c, 1024);
    auto g = gm(x, y);
    Duplicate(b.Get<float>(), 5.0f, 64);
    SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
    DataCopy(g.y[64], b.Get<float>(), 64);
    if (fixed) { SetFlag<HardEvent::MTE3_MTE2>(0); WaitFlag<HardEvent::MTE3_MTE2>(0); }
    DataCopy(c.Get<float>(), g.y[96], 64);
}

struct Control { Body body; uint32_t cores; };
const Control CONTROLS[] = {
    {ub_overflow, 1}, {buffers_per_position, 1}, {buffers_per_kernel, 1}, {alloc_beyond_num, 1}, {queue_depth, 1},
    {double_free, 1}, {use_after_free, 1}, {deque_empty, 1}, {ub_align, 1}, {operand_bounds, 1},
    {repeat_times, 1}, {mask_range, 1}, {mask_bits, 1}, {dst_stride, 1}, {count_negative, 1},
    {cast_pair, 1}, {compare_align, 1}, {datacopy_len, 1}, {datacopy_ub_addr, 1}, {datacopy_out_len, 1},
    {datacopypad_count, 1}, {datacopypad_len, 1}, {gm_unregistered, 1}, {gm_tensor_bounds, 1}, {gm_write_input, 1},
    {gm_canary, 1}, {atomic_type, 1}, {raw_mte2_v, 1}, {raw_v_mte3, 1}, {war_v_mte2, 1},
    {raw_v_v, 1}, {raw_s_v, 1}, {raw_v_s, 1}, {transitive_sync, 1}, {flag_unmatched, 1},
    {event_id, 1}, {queue_sync, 1}, {sync_all_missing, 4}, {one_core_fails, 4}, {waw_v_mte2, 1},
    {release_event, 1}, {cast_overlap, 1}, {select_mode, 1}, {gm_setvalue_input, 1},
    {datacopy_params, 1}, {gm_raw_mte3_mte2, 1},
};
}  // namespace

extern "C" int twin_control_count() { return int(sizeof CONTROLS / sizeof CONTROLS[0]); }
extern "C" int twin_control(int id, int fixed, twin::TwinReportC* out) {
    if (id < 0 || id >= twin_control_count()) return -1;
    std::vector<float> x(N), y(N, NAN);
    for (uint32_t i = 0; i < N; ++i) x[i] = float(i);
    twin::Launch launch(CONTROLS[id].cores);
    GM_ADDR gx = launch.gm_input(x.data(), N * 4, "x");
    GM_ADDR gy = launch.gm_output(y.data(), N * 4, "y");
    launch.run([&] { CONTROLS[id].body(gx, gy, fixed); });
    twin::to_c(launch.report(), out);
    return 0;
}
