// Negative controls for the twin's cube rules: each kernel breaks one rule (fixed = 0) or obeys it (fixed = 1).
// twin_cube_control(id, fixed, report) runs control `id` on a 4096-float input "x" and a 4096-float output "y"
// (the cube kernels read x as half).
#include <vector>
#include "kernel_operator.h"
using namespace AscendC;

namespace {
constexpr uint32_t N = 4096;
using Body = void (*)(GM_ADDR, GM_ADDR, int);

// One 16x16x16 half tile: x (as half) -> L1 -> L0A / L0B -> L0C (float) -> y.
struct Tile {
    TPipe pipe;
    TBuf<TPosition::A1> a1; TBuf<TPosition::B1> b1; TBuf<TPosition::A2> a2; TBuf<TPosition::B2> b2;
    TBuf<TPosition::CO1> c1;
    GlobalTensor<half> x; GlobalTensor<float> y;
    Tile(GM_ADDR gx, GM_ADDR gy) {
        pipe.InitBuffer(a1, 512); pipe.InitBuffer(b1, 512); pipe.InitBuffer(a2, 512); pipe.InitBuffer(b2, 512);
        pipe.InitBuffer(c1, 1024);
        x.SetGlobalBuffer((__gm__ half*)gx, 2 * N); y.SetGlobalBuffer((__gm__ float*)gy, N);
    }
    void copy_in() {
        DataCopy(a1.Get<half>(), x, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 1));
        DataCopy(b1.Get<half>(), x[256], Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 1));
    }
    void load() {
        LoadData(a2.Get<half>(), a1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, false, 0));
        LoadData(b2.Get<half>(), b1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, true, 0));
    }
    void mmad() { Mmad(c1.Get<float>(), a2.Get<half>(), b2.Get<half>(), MmadParams(16, 16, 16, false)); }
    FixpipeParamsV220 fp(QuantMode_t q = NoQuant) {
        FixpipeParamsV220 p; p.nSize = 16; p.mSize = 16; p.srcStride = 16; p.dstStride = 16; p.quantPre = q; return p;
    }
    void fix() { Fixpipe(y, c1.Get<float>(), fp()); }
    void sync_mte2_mte1() { SetFlag<HardEvent::MTE2_MTE1>(0); WaitFlag<HardEvent::MTE2_MTE1>(0); }
    void sync_mte1_m() { SetFlag<HardEvent::MTE1_M>(0); WaitFlag<HardEvent::MTE1_M>(0); }
    void sync_m_fix() { SetFlag<HardEvent::M_FIX>(0); WaitFlag<HardEvent::M_FIX>(0); }
};

// memories
void l1_overflow(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::A1> a, b;
    pipe.InitBuffer(a, 256 * 1024); pipe.InitBuffer(b, fixed ? 256 * 1024 : 256 * 1024 + 32);
}
void l0a_overflow(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TBuf<TPosition::A2> a, b;
    pipe.InitBuffer(a, 32); pipe.InitBuffer(b, fixed ? 64 * 1024 - 512 : 64 * 1024 - 480);  // a takes one 512-B unit
}
void l0c_overflow(GM_ADDR, GM_ADDR, int fixed) {
    TPipe pipe; TQue<TPosition::CO1, 1> q; pipe.InitBuffer(q, 2, fixed ? 64 * 1024 : 64 * 1024 + 32);
}
void l0a_align(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1();
    TBuf<TPosition::A2> big; t.pipe.InitBuffer(big, 2048);
    LoadData(big.Get<half>()[fixed ? 256 : 16], t.a1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, false, 0));
}
// data movement
void nd2nz_params(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y);
    DataCopy(t.a1.Get<half>(), t.x, Nd2NzParams(1, 16, 16, 0, 16, fixed ? 16 : 0, 1, 1));
}
void nd2nz_position(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y);
    DataCopy(fixed ? t.a1.Get<half>() : t.a2.Get<half>(), t.x, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 1));
}
void loaddata_fractal(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); TBuf<TPosition::A1> small; t.pipe.InitBuffer(small, fixed ? 512 : 256);
    DataCopy(small.Get<half>(), t.x, Nd2NzParams(1, fixed ? 16 : 8, 16, 0, 16, fixed ? 16 : 8, 1, 1));
    t.sync_mte2_mte1();
    LoadData(t.a2.Get<half>(), small.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, false, 0));
}
void loaddata_repeat(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1();
    LoadData(t.a2.Get<half>(), t.a1.Get<half>(), LoadData2DParams(0, fixed ? 1 : 0, 0, 0, 0, false, 0));
}
void loaddata_transpose_int8(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1();
    auto src = t.b1.Get<half>().ReinterpretCast<int8_t>(); auto dst = t.b2.Get<half>().ReinterpretCast<int8_t>();
    LoadData(dst, src, LoadData2DParams(0, 1, 0, 0, 0, !fixed, 0));
}
// Mmad
void mmad_position(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m();
    TBuf<TPosition::B2> other; t.pipe.InitBuffer(other, 512);
    auto fm = fixed ? t.a2.Get<half>() : other.Get<half>();
    if (!fixed) { LoadData(fm, t.a1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, false, 0)); t.sync_mte1_m(); }
    Mmad(t.c1.Get<float>(), fm, t.b2.Get<half>(), MmadParams(16, 16, 16, false));
}
void mmad_params(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m();
    Mmad(t.c1.Get<float>(), t.a2.Get<half>(), t.b2.Get<half>(), MmadParams(fixed ? 16 : 4096, 16, 16, false));
}
void mmad_bounds(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m();
    Mmad(t.c1.Get<float>(), t.a2.Get<half>(), t.b2.Get<half>(), MmadParams(16, 16, fixed ? 16 : 32, false));
}
// Fixpipe
void fixpipe_quant(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m(); t.mmad(); t.sync_m_fix();
    Fixpipe(t.y, t.c1.Get<float>(), t.fp(fixed ? NoQuant : F322F16));
}
void fixpipe_scale_tensor(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m(); t.mmad(); t.sync_m_fix();
    GlobalTensor<half> yh; yh.SetGlobalBuffer((__gm__ half*)y, 2 * N);
    Fixpipe(yh, t.c1.Get<int32_t>(), t.fp(fixed ? DEQF16 : VDEQF16));  // L0C read as int32
}
void fixpipe_params(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m(); t.mmad(); t.sync_m_fix();
    auto p = t.fp(); p.srcStride = fixed ? 16 : 8;
    Fixpipe(t.y, t.c1.Get<float>(), p);
}
// pipe hazards of the cube pipes
void raw_mte2_mte1(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); if (fixed) t.sync_mte2_mte1(); t.load();
}
void raw_mte1_m(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); if (fixed) t.sync_mte1_m(); t.mmad();
}
void raw_m_fix(GM_ADDR x, GM_ADDR y, int fixed) {
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m(); t.mmad(); if (fixed) t.sync_m_fix();
    t.fix();
}
void war_m_mte1(GM_ADDR x, GM_ADDR y, int fixed) {  // reload L0A while Mmad may still read it
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m(); t.mmad();
    if (fixed) { SetFlag<HardEvent::M_MTE1>(0); WaitFlag<HardEvent::M_MTE1>(0); }
    LoadData(t.a2.Get<half>(), t.a1.Get<half>(), LoadData2DParams(0, 1, 0, 0, 0, false, 0));
}
void war_fix_m(GM_ADDR x, GM_ADDR y, int fixed) {  // a second Mmad into L0C while Fixpipe may still read it
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m(); t.mmad(); t.sync_m_fix(); t.fix();
    if (fixed) { SetFlag<HardEvent::FIX_M>(0); WaitFlag<HardEvent::FIX_M>(0); }
    t.mmad();
}
void gm_raw_fix_mte2(GM_ADDR x, GM_ADDR y, int fixed) {  // read back what Fixpipe wrote, on MTE2
    Tile t(x, y); t.copy_in(); t.sync_mte2_mte1(); t.load(); t.sync_mte1_m(); t.mmad(); t.sync_m_fix(); t.fix();
    if (fixed) { SetFlag<HardEvent::FIX_MTE2>(0); WaitFlag<HardEvent::FIX_MTE2>(0); }
    SetFlag<HardEvent::MTE1_MTE2>(0); WaitFlag<HardEvent::MTE1_MTE2>(0);
    GlobalTensor<half> yh; yh.SetGlobalBuffer((__gm__ half*)y, 2 * N);
    DataCopy(t.a1.Get<half>(), yh, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 1));
}

void queue_sync_cube(GM_ADDR x, GM_ADDR y, int fixed) {  // TQue<A1> EnQue/DeQue is the MTE2 -> MTE1 sync, and so on
    TPipe pipe; TQue<TPosition::A1, 1> qa1; TQue<TPosition::A2, 1> qa2; TQue<TPosition::B2, 1> qb2;
    TQue<TPosition::CO1, 1> qc;
    pipe.InitBuffer(qa1, 1, 512); pipe.InitBuffer(qa2, 1, 512); pipe.InitBuffer(qb2, 1, 512); pipe.InitBuffer(qc, 1, 1024);
    GlobalTensor<half> gx; gx.SetGlobalBuffer((__gm__ half*)x, 2 * N);
    GlobalTensor<float> gy; gy.SetGlobalBuffer((__gm__ float*)y, N);
    auto a1 = qa1.AllocTensor<half>();
    DataCopy(a1, gx, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 1));
    if (fixed) { qa1.EnQue(a1); a1 = qa1.DeQue<half>(); }
    auto a2 = qa2.AllocTensor<half>(); auto b2 = qb2.AllocTensor<half>();
    LoadData(a2, a1, LoadData2DParams(0, 1, 0, 0, 0, false, 0));
    LoadData(b2, a1, LoadData2DParams(0, 1, 0, 0, 0, true, 0));
    qa2.EnQue(a2); qb2.EnQue(b2); a2 = qa2.DeQue<half>(); b2 = qb2.DeQue<half>();
    auto c = qc.AllocTensor<float>();
    Mmad(c, a2, b2, MmadParams(16, 16, 16, false));
    qc.EnQue(c); c = qc.DeQue<float>();
    FixpipeParamsV220 p; p.nSize = 16; p.mSize = 16; p.srcStride = 16; p.dstStride = 16;
    Fixpipe(gy, c, p);
    qc.FreeTensor(c); qa2.FreeTensor(a2); qb2.FreeTensor(b2); qa1.FreeTensor(a1);
}
// MIX kernels and the core types
void core_memory(GM_ADDR, GM_ADDR, int fixed) {  // a cube core has no UB
    TPipe pipe; TBuf<TPosition::VECCALC> ub; TBuf<TPosition::A1> l1;
    if (fixed) pipe.InitBuffer(l1, 512); else pipe.InitBuffer(ub, 512);
}
void vector_core_memory(GM_ADDR, GM_ADDR, int fixed) {  // a vector core has no L1
    TPipe pipe; TBuf<TPosition::VECCALC> ub; TBuf<TPosition::A1> l1;
    if (fixed) pipe.InitBuffer(ub, 512); else pipe.InitBuffer(l1, 512);
}
void kernel_type(GM_ADDR, GM_ADDR, int fixed) {
    KERNEL_TASK_TYPE_DEFAULT(fixed ? KERNEL_TYPE_MIX_AIC_1_2 : KERNEL_TYPE_AIV_ONLY);
}
void cross_flag_id(GM_ADDR, GM_ADDR, int fixed) {
    uint16_t id = fixed ? 10 : 11;
    if ASCEND_IS_AIC { CrossCoreSetFlag<2, PIPE_FIX>(id); }
    if ASCEND_IS_AIV { CrossCoreWaitFlag(id); }
}
void cross_flag_pending(GM_ADDR, GM_ADDR, int fixed) {
    int n = fixed ? 15 : 16;
    if ASCEND_IS_AIC { for (int i = 0; i < n; ++i) CrossCoreSetFlag<2, PIPE_FIX>(1); }
    if ASCEND_IS_AIV { if (fixed) for (int i = 0; i < n; ++i) CrossCoreWaitFlag(1); }
}
void cross_flag_hang(GM_ADDR, GM_ADDR, int fixed) {  // the AIC waits for both AIV; one never sets
    if ASCEND_IS_AIC { CrossCoreWaitFlag(2); }
    if ASCEND_IS_AIV { if (fixed || GetSubBlockIdx() == 0) CrossCoreSetFlag<2, PIPE_MTE3>(2); }
}
void mix_sync_all(GM_ADDR, GM_ADDR, int fixed) {
    if (fixed) {
        if ASCEND_IS_AIV { CrossCoreSetFlag<2, PIPE_MTE3>(0); }
        if ASCEND_IS_AIC { CrossCoreWaitFlag(0); }
    } else {
        SyncAll<false>();
    }
}

enum Kind : uint8_t { AIV, AIC, MIX };
struct Control { Body body; Kind kind; uint32_t blocks; };
const Control CONTROLS[] = {
    {l1_overflow, AIC, 1}, {l0a_overflow, AIC, 1}, {l0c_overflow, AIC, 1}, {l0a_align, AIC, 1},
    {nd2nz_params, AIC, 1}, {nd2nz_position, AIC, 1}, {loaddata_fractal, AIC, 1}, {loaddata_repeat, AIC, 1},
    {loaddata_transpose_int8, AIC, 1}, {mmad_position, AIC, 1}, {mmad_params, AIC, 1}, {mmad_bounds, AIC, 1},
    {fixpipe_quant, AIC, 1}, {fixpipe_scale_tensor, AIC, 1}, {fixpipe_params, AIC, 1}, {raw_mte2_mte1, AIC, 1},
    {raw_mte1_m, AIC, 1}, {raw_m_fix, AIC, 1}, {war_m_mte1, AIC, 1}, {war_fix_m, AIC, 1},
    {gm_raw_fix_mte2, AIC, 1}, {queue_sync_cube, AIC, 1}, {core_memory, AIC, 1}, {vector_core_memory, AIV, 1}, {kernel_type, MIX, 2},
    {cross_flag_id, MIX, 2}, {cross_flag_pending, MIX, 1}, {cross_flag_hang, MIX, 1}, {mix_sync_all, MIX, 2},
};
}  // namespace

extern "C" int twin_cube_control_count() { return int(sizeof CONTROLS / sizeof CONTROLS[0]); }
extern "C" int twin_cube_control(int id, int fixed, twin::TwinReportC* out) {
    if (id < 0 || id >= twin_cube_control_count()) return -1;
    std::vector<float> x(N), y(N, NAN);
    for (uint32_t i = 0; i < N; ++i) x[i] = float(i % 7) - 3.0f;
    const Control& k = CONTROLS[id];
    twin::Launch launch(k.blocks, k.kind == AIV ? twin::CoreKind::AIV : k.kind == AIC ? twin::CoreKind::AIC
                                                                                  : twin::CoreKind::MIX_AIC_1_2);
    GM_ADDR gx = launch.gm_input(x.data(), N * 4, "x");
    GM_ADDR gy = launch.gm_output(y.data(), N * 4, "y");
    launch.run([&] { k.body(gx, gy, fixed); });
    twin::to_c(launch.report(), out);
    return 0;
}
