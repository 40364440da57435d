// A one-tile cube matmul on the twin: GM (ND) -> L1 (NZ, Nd2Nz DataCopy) -> L0A (ZZ) / L0B (ZN, LoadData) ->
// Mmad -> Fixpipe (NZ -> ND, with the quant mode) -> GM. Used by test_twin_cube.py against torch.matmul.
#include <vector>
#include "kernel_operator.h"
using namespace AscendC;

namespace {
struct Shape { uint32_t m, n, k, ksplit; int b_trans; QuantMode_t quant; uint64_t deq; };

// a: [m, k] ND; b: [k, n] ND (b_trans = 0, 2-byte types: LoadData transposes each fractal) or [n, k] ND
// (b_trans = 1: the NZ fractals of B^T are ZN fractals of B). scales: one uint64 per column, padded to 4.
template <typename A, typename D, typename O>
void matmul_kernel(GM_ADDR ga, GM_ADDR gb, GM_ADDR gs, GM_ADDR go, Shape s) {
    constexpr uint32_t C0 = 32 / sizeof(A);
    const uint32_t M1 = (s.m + 15) / 16, N1 = (s.n + 15) / 16, K1 = (s.k + C0 - 1) / C0;
    GlobalTensor<A> a, b; GlobalTensor<O> o; GlobalTensor<uint64_t> sc;
    a.SetGlobalBuffer((__gm__ A*)ga, uint64_t(s.m) * s.k);
    b.SetGlobalBuffer((__gm__ A*)gb, uint64_t(s.n) * s.k);
    o.SetGlobalBuffer((__gm__ O*)go, uint64_t(s.m) * s.n);
    TPipe pipe;
    TBuf<TPosition::A1> a1; TBuf<TPosition::B1> b1; TBuf<TPosition::A1> s1;
    TBuf<TPosition::A2> a2; TBuf<TPosition::B2> b2; TBuf<TPosition::CO1> c1;
    pipe.InitBuffer(a1, M1 * K1 * 512); pipe.InitBuffer(b1, N1 * K1 * 512);
    pipe.InitBuffer(a2, M1 * K1 * 512); pipe.InitBuffer(b2, N1 * K1 * 512);
    pipe.InitBuffer(c1, M1 * N1 * 256 * sizeof(D));
    auto la1 = a1.Get<A>(), lb1 = b1.Get<A>(), la2 = a2.Get<A>(), lb2 = b2.Get<A>();
    auto lc = c1.Get<D>();
    DataCopy(la1, a, Nd2NzParams(1, s.m, s.k, 0, s.k, M1 * 16, 1, 1));
    if (s.b_trans) DataCopy(lb1, b, Nd2NzParams(1, s.n, s.k, 0, s.k, N1 * 16, 1, 1));
    else DataCopy(lb1, b, Nd2NzParams(1, s.k, s.n, 0, s.n, K1 * C0, 1, 1));
    bool per_channel = s.quant == VDEQF16 || s.quant == VQS322BF16_PRE;
    LocalTensor<uint64_t> ls;
    if (per_channel) {
        uint32_t n4 = (s.n + 3) / 4 * 4;
        sc.SetGlobalBuffer((__gm__ uint64_t*)gs, n4);
        pipe.InitBuffer(s1, n4 * 8);
        ls = s1.Get<uint64_t>();
        DataCopy(ls, sc, n4);
    }
    SetFlag<HardEvent::MTE2_MTE1>(0); WaitFlag<HardEvent::MTE2_MTE1>(0);
    uint32_t splits[2] = {s.ksplit && s.ksplit < K1 ? s.ksplit : K1, K1};
    for (int pass = 0, kb0 = 0; kb0 < int(K1); kb0 = splits[pass++]) {
        uint32_t kb1 = splits[pass], kp = kb1 - kb0;
        if (pass) { SetFlag<HardEvent::M_MTE1>(0); WaitFlag<HardEvent::M_MTE1>(0); }
        for (uint32_t mb = 0; mb < M1; ++mb)  // L1 fractal (mb, kb) sits at kb*M1 + mb; L0A wants mb*kp + kb
            LoadData(la2[mb * kp * 16 * C0], la1, LoadData2DParams(kb0 * M1 + mb, kp, M1, 0, 0, false, 0));
        if (s.b_trans)  // L1 fractal (nb, kb) at kb*N1 + nb is the L0B fractal (kb, nb)
            LoadData(lb2, lb1, LoadData2DParams(kb0 * N1, kp * N1, 1, 0, 0, false, 0));
        else
            for (uint32_t kb = kb0; kb < kb1; ++kb)  // L1 fractal (kb, nb) at nb*K1 + kb, transposed
                LoadData(lb2[(kb - kb0) * N1 * 16 * C0], lb1, LoadData2DParams(kb, N1, K1, 0, 0, true, 0));
        SetFlag<HardEvent::MTE1_M>(0); WaitFlag<HardEvent::MTE1_M>(0);
        MmadParams mp;
        mp.m = s.m; mp.n = s.n; mp.k = uint16_t(std::min(s.k, kb1 * C0) - kb0 * C0);
        mp.cmatrixInitVal = pass == 0;
        Mmad(lc, la2, lb2, mp);
    }
    SetFlag<HardEvent::M_FIX>(0); WaitFlag<HardEvent::M_FIX>(0);
    if (per_channel) { SetFlag<HardEvent::MTE2_FIX>(0); WaitFlag<HardEvent::MTE2_FIX>(0); }
    FixpipeParamsV220 fp;
    fp.nSize = s.n; fp.mSize = s.m; fp.srcStride = M1 * 16; fp.dstStride = s.n;
    fp.quantPre = s.quant; fp.deqScalar = s.deq;
    if (per_channel) Fixpipe(o, lc, ls, fp);
    else Fixpipe(o, lc, fp);
}

template <typename A, typename D, typename O>
int run(const void* a, const void* b, const uint64_t* scales, void* out, Shape s, twin::TwinReportC* rep) {
    twin::Launch launch(1, twin::CoreKind::AIC);
    uint32_t n4 = (s.n + 3) / 4 * 4;
    GM_ADDR ga = launch.gm_input(a, size_t(s.m) * s.k * sizeof(A), "a");
    GM_ADDR gb = launch.gm_input(b, size_t(s.n) * s.k * sizeof(A), "b");
    GM_ADDR gs = scales ? launch.gm_input(scales, n4 * 8, "scale") : nullptr;
    GM_ADDR go = launch.gm_output(out, size_t(s.m) * s.n * sizeof(O), "out");
    launch.run([&] { matmul_kernel<A, D, O>(ga, gb, gs, go, s); });
    twin::to_c(launch.report(), rep);
    return 0;
}
// MIX_AIC_1_2: group g's AIC computes C = A[16g:16g+16, :k] x B (half -> float) into the workspace with Fixpipe
// and signals its two AIV (mode 2, PIPE_FIX); AIV v (GetBlockIdx) reads rows [8v, 8v+8) of the workspace, adds
// 1 + GetSubBlockIdx() and writes them to out. AIC and AIV exchange data only through GM.
void mix_kernel(GM_ADDR ga, GM_ADDR gb, GM_ADDR gw, GM_ADDR go, uint32_t k) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    const uint32_t groups = GetBlockNum(), K1 = (k + 15) / 16;
    GlobalTensor<float> ws, out;
    ws.SetGlobalBuffer((__gm__ float*)gw, groups * 256); out.SetGlobalBuffer((__gm__ float*)go, groups * 256);
    TPipe pipe;
    if ASCEND_IS_AIC {
        uint32_t g = GetBlockIdx();
        GlobalTensor<half> a, b;
        a.SetGlobalBuffer((__gm__ half*)ga + g * 16 * k, 16 * k); b.SetGlobalBuffer((__gm__ half*)gb, 16 * k);
        TBuf<TPosition::A1> a1; TBuf<TPosition::B1> b1; TBuf<TPosition::A2> a2; TBuf<TPosition::B2> b2;
        TBuf<TPosition::CO1> c1;
        pipe.InitBuffer(a1, K1 * 512); pipe.InitBuffer(b1, K1 * 512); pipe.InitBuffer(a2, K1 * 512);
        pipe.InitBuffer(b2, K1 * 512); pipe.InitBuffer(c1, 1024);
        DataCopy(a1.Get<half>(), a, Nd2NzParams(1, 16, k, 0, k, 16, 1, 1));
        DataCopy(b1.Get<half>(), b, Nd2NzParams(1, 16, k, 0, k, 16, 1, 1));  // b is B^T [16, k]
        SetFlag<HardEvent::MTE2_MTE1>(0); WaitFlag<HardEvent::MTE2_MTE1>(0);
        LoadData(a2.Get<half>(), a1.Get<half>(), LoadData2DParams(0, K1, 1, 0, 0, false, 0));
        LoadData(b2.Get<half>(), b1.Get<half>(), LoadData2DParams(0, K1, 1, 0, 0, false, 0));
        SetFlag<HardEvent::MTE1_M>(0); WaitFlag<HardEvent::MTE1_M>(0);
        MmadParams mp; mp.m = 16; mp.n = 16; mp.k = k;
        Mmad(c1.Get<float>(), a2.Get<half>(), b2.Get<half>(), mp);
        SetFlag<HardEvent::M_FIX>(0); WaitFlag<HardEvent::M_FIX>(0);
        FixpipeParamsV220 fp; fp.nSize = 16; fp.mSize = 16; fp.srcStride = 16; fp.dstStride = 16;
        Fixpipe(ws[g * 256], c1.Get<float>(), fp);
        CrossCoreSetFlag<2, PIPE_FIX>(3);
    }
    if ASCEND_IS_AIV {
        uint32_t v = GetBlockIdx();
        TBuf<TPosition::VECCALC> ub; pipe.InitBuffer(ub, 512);
        auto t = ub.Get<float>();
        CrossCoreWaitFlag(3);
        DataCopy(t, ws[v * 128], 128);
        SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0);
        Adds(t, t, 1.0f + float(GetSubBlockIdx()), 128);
        SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(out[v * 128], t, 128);
    }
}
}  // namespace

// a: [16 groups, k] half; bt: [16, k] half (B^T); out: [16 groups, 16] float.
extern "C" int twin_cube_mix(uint32_t groups, uint32_t k, const void* a, const void* bt, void* out,
                             twin::TwinReportC* rep) {
    twin::Launch launch(groups, twin::CoreKind::MIX_AIC_1_2);
    GM_ADDR ga = launch.gm_input(a, size_t(groups) * 16 * k * 2, "a");
    GM_ADDR gb = launch.gm_input(bt, size_t(16) * k * 2, "bt");
    GM_ADDR gw = launch.gm_workspace(size_t(groups) * 256 * 4, "workspace");
    GM_ADDR go = launch.gm_output(out, size_t(groups) * 256 * 4, "out");
    launch.run([&] { mix_kernel(ga, gb, gw, go, k); });
    twin::to_c(launch.report(), rep);
    return 0;
}

// dtype: 0 int8, 1 half, 2 bfloat16. The output type follows quant: NoQuant float (int32 for int8),
// F322F16 / DEQF16 / VDEQF16 half, F322BF16 / QS322BF16_PRE / VQS322BF16_PRE bfloat16.
extern "C" int twin_cube_matmul(int dtype, int b_trans, int quant, uint32_t m, uint32_t n, uint32_t k, uint32_t ksplit,
                                const void* a, const void* b, const uint64_t* scales, uint64_t deq, void* out,
                                twin::TwinReportC* rep) {
    Shape s{m, n, k, ksplit, b_trans, QuantMode_t(quant), deq};
    auto q = QuantMode_t(quant);
    bool to_h = q == F322F16 || q == DEQF16 || q == VDEQF16, to_bf = q == F322BF16 || q == QS322BF16_PRE || q == VQS322BF16_PRE;
    if (dtype == 0) {
        if (to_h) return run<int8_t, int32_t, half>(a, b, scales, out, s, rep);
        if (to_bf) return run<int8_t, int32_t, bfloat16_t>(a, b, scales, out, s, rep);
        return run<int8_t, int32_t, int32_t>(a, b, scales, out, s, rep);
    }
    if (dtype == 1) {
        if (to_h) return run<half, float, half>(a, b, scales, out, s, rep);
        if (to_bf) return run<half, float, bfloat16_t>(a, b, scales, out, s, rep);
        return run<half, float, float>(a, b, scales, out, s, rep);
    }
    if (dtype == 2) {
        if (to_bf) return run<bfloat16_t, float, bfloat16_t>(a, b, scales, out, s, rep);
        return run<bfloat16_t, float, float>(a, b, scales, out, s, rep);
    }
    return -1;
}
