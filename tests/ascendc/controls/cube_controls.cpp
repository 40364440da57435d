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
    Tile t(x, y); TBuf<TPosition::VECCALC> ub; t.pipe.InitBuffer(ub, 512);
    DataCopy(fixed ? t.a1.Get<half>() : ub.Get<half>(), t.x, Nd2NzParams(1, 16, 16, 0, 16, 16, 1, 1));
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

const Body CONTROLS[] = {
    l1_overflow, l0a_overflow, l0c_overflow, l0a_align, nd2nz_params, nd2nz_position, loaddata_fractal,
    loaddata_repeat, loaddata_transpose_int8, mmad_position, mmad_params, mmad_bounds, fixpipe_quant,
    fixpipe_scale_tensor, fixpipe_params, raw_mte2_mte1, raw_mte1_m, raw_m_fix, war_m_mte1, war_fix_m,
    gm_raw_fix_mte2,
};
}  // namespace

extern "C" int twin_cube_control_count() { return int(sizeof CONTROLS / sizeof CONTROLS[0]); }
extern "C" int twin_cube_control(int id, int fixed, twin::TwinReportC* out) {
    if (id < 0 || id >= twin_cube_control_count()) return -1;
    std::vector<float> x(N), y(N, NAN);
    for (uint32_t i = 0; i < N; ++i) x[i] = float(i % 7) - 3.0f;
    twin::Launch launch(1);
    GM_ADDR gx = launch.gm_input(x.data(), N * 4, "x");
    GM_ADDR gy = launch.gm_output(y.data(), N * 4, "y");
    launch.run([&] { CONTROLS[id](gx, gy, fixed); });
    twin::to_c(launch.report(), out);
    return 0;
}
