// LocalTensor / GlobalTensor, TPipe, TQue / TQueBind, TBuf.
// Pages: "LocalTensor", "GlobalTensor", "TPipe" (InitBuffer atlasascendc_api_07_0110-class pages), "TQue"
// (AllocTensor / EnQue / DeQue / FreeTensor), "TBuf" (Get) of the AscendC API reference.
#pragma once
#include <string>
#include "core.h"

namespace AscendC {
using twin::Core;
using twin::core;

inline int mem_of(TPosition p) {
    switch (p) {
        case TPosition::VECIN: case TPosition::VECOUT: case TPosition::VECCALC: case TPosition::CO2: return twin::M_UB;
        case TPosition::A1: case TPosition::B1: case TPosition::C1: case TPosition::TSCM: return twin::M_L1;
        case TPosition::A2: return twin::M_L0A;
        case TPosition::B2: return twin::M_L0B;
        case TPosition::CO1: return twin::M_L0C;
        default: return -1;
    }
}

template <typename T> class LocalTensor {
  public:
    using PrimType = T;
    LocalTensor() = default;
    // operator[]: the sub-tensor starting `offset` elements in (LocalTensor page).
    LocalTensor operator[](uint32_t offset) const {
        if (offset > size_)
            core().fail("operand-bounds", "LocalTensor::operator[]",
                        "offset " + std::to_string(offset) + " beyond the tensor's " + std::to_string(size_) + " elements");
        LocalTensor t = *this; t.addr_ += offset * sizeof(T); t.size_ -= offset; return t;
    }
    // GetValue / SetValue: scalar (PIPE_S) element access (LocalTensor page).
    T GetValue(uint32_t i) const {
        Core& c = core();
        check_elem("LocalTensor::GetValue", i);
        uint32_t call = c.issue("LocalTensor::GetValue", twin::P_S, twin::model::cycles_to_ns(twin::model::SCALAR_OP_CYCLES));
        c.cnt.scalar_ops++;
        c.on_read(call, mem_, addr_ + i * sizeof(T), sizeof(T));
        c.mark_read(call, mem_, addr_ + i * sizeof(T), sizeof(T));
        T v; std::memcpy(&v, c.mem[mem_].get() + addr_ + i * sizeof(T), sizeof(T)); return v;
    }
    void SetValue(uint32_t i, T v) const {
        Core& c = core();
        check_elem("LocalTensor::SetValue", i);
        uint32_t call = c.issue("LocalTensor::SetValue", twin::P_S, twin::model::cycles_to_ns(twin::model::SCALAR_OP_CYCLES));
        c.cnt.scalar_ops++;
        c.on_write(call, mem_, addr_ + i * sizeof(T), sizeof(T));
        c.mark_write(call, mem_, addr_ + i * sizeof(T), sizeof(T));
        std::memcpy(c.mem[mem_].get() + addr_ + i * sizeof(T), &v, sizeof(T));
    }
    uint32_t GetSize() const { return size_; }
    uint32_t GetLength() const { return size_ * sizeof(T); }
    uint64_t GetPhyAddr() const { return addr_; }
    TPosition GetPosition() const { return pos_; }
    template <typename U> LocalTensor<U> ReinterpretCast() const {
        LocalTensor<U> t; t.addr_ = addr_; t.size_ = uint32_t(uint64_t(size_) * sizeof(T) / sizeof(U));
        t.slot_ = slot_; t.gen_ = gen_; t.mem_ = mem_; t.pos_ = pos_; return t;
    }

    // ---- twin internals ----
    uint32_t addr_ = 0, size_ = 0, gen_ = 0;
    int32_t slot_ = -1;
    uint8_t mem_ = twin::M_UB;
    TPosition pos_ = TPosition::VECCALC;
    T* data() const { return reinterpret_cast<T*>(core().mem[mem_].get() + addr_); }
    // Rule: the tensor comes from a live buffer (use after FreeTensor / never allocated = error).
    void check_live(const char* call) const {
        Core& c = core();
        if (slot_ < 0 || slot_ >= int32_t(c.slots.size()))
            c.fail("use-after-free", call, "LocalTensor was never allocated (default-constructed or from another pipe)");
        auto& s = c.slots[slot_];
        if (s.gen != gen_ || s.state == twin::Slot::FREE)
            c.fail("use-after-free", call, "LocalTensor at " + std::string(twin::mem_name(mem_)) + " offset " +
                   std::to_string(addr_) + " was freed (FreeTensor) before this use");
    }
    void check_elem(const char* call, uint32_t i) const {
        check_live(call);
        if (i >= size_)
            core().fail("operand-bounds", call, "index " + std::to_string(i) + " outside the tensor's " +
                        std::to_string(size_) + " elements");
    }
};

template <typename T> class GlobalTensor {
  public:
    using PrimType = T;
    // SetGlobalBuffer: the range must lie inside one GM tensor the launcher registered (GlobalTensor page).
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t count) {
        Core& c = core();
        auto r = c.launch->find(buffer, count * sizeof(T));
        if (!r)
            c.fail("gm-bounds", "GlobalTensor::SetGlobalBuffer",
                   std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
                   " B at this address are not inside any GM tensor registered with the launch");
        ptr_ = buffer; size_ = count; region_ = r;
    }
    void SetGlobalBuffer(__gm__ T* buffer) { SetGlobalBuffer(buffer, 1); size_ = region_avail(); }
    GlobalTensor operator[](uint64_t offset) const {
        if (offset > size_)
            core().fail("gm-bounds", "GlobalTensor::operator[]",
                        "offset " + std::to_string(offset) + " beyond the GlobalTensor's " + std::to_string(size_) + " elements");
        GlobalTensor g = *this; g.ptr_ += offset; g.size_ -= offset; return g;
    }
    T GetValue(uint64_t i) const {
        check("GlobalTensor::GetValue", i, 1, false);
        uint32_t id = core().issue("GlobalTensor::GetValue", twin::P_S, twin::model::cycles_to_ns(twin::model::MTE_LATENCY_CYCLES));
        core().cnt.scalar_ops++;
        core().gm_read(id, ptr_ + i, sizeof(T));
        T v; std::memcpy(&v, ptr_ + i, sizeof(T)); return v;
    }
    void SetValue(uint64_t i, T v) const {
        check("GlobalTensor::SetValue", i, 1, true);
        uint32_t id = core().issue("GlobalTensor::SetValue", twin::P_S, twin::model::cycles_to_ns(twin::model::SCALAR_OP_CYCLES));
        core().cnt.scalar_ops++;
        std::memcpy(ptr_ + i, &v, sizeof(T));
        core().gm_wrote(id, ptr_ + i, sizeof(T));
    }
    uint64_t GetSize() const { return size_; }
    __gm__ T* GetPhyAddr() const { return ptr_; }
    __gm__ T* GetPhyAddr(uint64_t off) const { return ptr_ + off; }
    template <typename H> void SetL2CacheHint(H) {}

    // ---- twin internals ----
    T* ptr_ = nullptr;
    uint64_t size_ = 0;
    const twin::GmRegion* region_ = nullptr;
    uint64_t region_avail() const {
        return (region_->base + region_->bytes - reinterpret_cast<uint8_t*>(ptr_)) / sizeof(T);
    }
    // Rule: GM access inside the GlobalTensor (and so inside a registered tensor); no writes into inputs.
    void check(const char* call, uint64_t first, uint64_t n, bool write) const {
        Core& c = core();
        if (!region_) c.fail("gm-bounds", call, "GlobalTensor used before SetGlobalBuffer");
        if (first + n > size_)
            c.fail("gm-bounds", call, "GM elements [" + std::to_string(first) + ", " + std::to_string(first + n) +
                   ") outside the GlobalTensor's " + std::to_string(size_) + " elements (tensor '" + region_->name + "')");
        if (write && !region_->writable)
            c.fail("gm-write-input", call, "write into GM input tensor '" + region_->name + "'");
    }
    void check_bytes(const char* call, uint64_t byte_off, uint64_t bytes, bool write) const {
        Core& c = core();
        if (!region_) c.fail("gm-bounds", call, "GlobalTensor used before SetGlobalBuffer");
        if (byte_off + bytes > size_ * sizeof(T))
            c.fail("gm-bounds", call, "GM bytes [" + std::to_string(byte_off) + ", " + std::to_string(byte_off + bytes) +
                   ") outside the GlobalTensor's " + std::to_string(size_ * sizeof(T)) + " bytes (tensor '" +
                   region_->name + "')");
        if (write && !region_->writable)
            c.fail("gm-write-input", call, "write into GM input tensor '" + region_->name + "'");
    }
};

class TPipe;
// Which pipes produce and consume a queue's buffers: VECIN MTE2 -> V, VECOUT V -> MTE3, VECIN->VECOUT bind MTE2 -> MTE3.
inline bool queue_pipes(TPosition src, TPosition dst, twin::Pi& prod, twin::Pi& cons) {
    using twin::Pi;
    if (src == TPosition::VECIN && dst == TPosition::VECIN) { prod = twin::P_MTE2; cons = twin::P_V; return true; }
    if (src == TPosition::VECOUT && dst == TPosition::VECOUT) { prod = twin::P_V; cons = twin::P_MTE3; return true; }
    if (src == TPosition::VECIN && dst == TPosition::VECOUT) { prod = twin::P_MTE2; cons = twin::P_MTE3; return true; }
    if (src == TPosition::A1 || src == TPosition::B1) { prod = twin::P_MTE2; cons = twin::P_MTE1; return true; }
    if (src == TPosition::A2 || src == TPosition::B2) { prod = twin::P_MTE1; cons = twin::P_M; return true; }
    if (src == TPosition::CO1) { prod = twin::P_M; cons = twin::P_FIX; return true; }
    return false;
}

// TQueBind<src, dst, depth>: a queue of buffers moving from producer pipe to consumer pipe ("TQueBind" page).
template <TPosition src, TPosition dst, int32_t depth, auto mask = 0> class TQueBind {
  public:
    static constexpr TPosition srcPosition = src, dstPosition = dst;
    // AllocTensor: a free buffer of this queue; the producer pipe waits until its previous user freed it.
    template <typename T> LocalTensor<T> AllocTensor() {
        Core& c = core();
        c.check_abort();
        if (num_ == 0) c.fail("queue-misuse", "TQue::AllocTensor", "queue has no buffers (InitBuffer not called)");
        for (int i = 0; i < num_; ++i) {
            auto& s = c.slots[first_ + (next_alloc_ + i) % num_];
            if (s.state != twin::Slot::FREE) continue;
            int id = first_ + (next_alloc_ + i) % num_;
            next_alloc_ = (next_alloc_ + i + 1) % num_;
            s.state = twin::Slot::ALLOCATED;
            c.merge(prod_, s.freed);
            LocalTensor<T> t; t.addr_ = s.addr; t.size_ = s.len / sizeof(T); t.slot_ = id; t.gen_ = s.gen;
            t.mem_ = s.mem; t.pos_ = src; return t;
        }
        c.fail("queue-misuse", "TQue::AllocTensor", "all " + std::to_string(num_) +
               " buffers given by InitBuffer are in use (AllocTensor without FreeTensor)");
    }
    // EnQue: hand a buffer to the consumer pipe (acts as SetFlag producer->consumer).
    template <typename T> bool EnQue(const LocalTensor<T>& t) {
        Core& c = core();
        c.check_abort();
        t.check_live("TQue::EnQue");
        if (t.slot_ < first_ || t.slot_ >= first_ + num_)
            c.fail("queue-misuse", "TQue::EnQue", "tensor does not belong to this queue");
        auto& s = c.slots[t.slot_];
        if (s.state != twin::Slot::ALLOCATED && s.state != twin::Slot::DEQUEUED)
            c.fail("queue-misuse", "TQue::EnQue", "tensor is already enqueued");
        if (count_ >= depth)
            c.fail("queue-depth", "TQue::EnQue", "queue of depth " + std::to_string(depth) + " is full");
        s.state = twin::Slot::QUEUED;
        s.enq = c.snapshot(prod_);
        fifo_[(head_ + count_) % 8] = t.slot_;
        count_++;
        return true;
    }
    // DeQue: take the oldest enqueued buffer (acts as WaitFlag on the consumer pipe).
    template <typename T> LocalTensor<T> DeQue() {
        Core& c = core();
        c.check_abort();
        if (count_ == 0) c.fail("queue-misuse", "TQue::DeQue", "DeQue on an empty queue (no EnQue before it)");
        int id = fifo_[head_]; head_ = (head_ + 1) % 8; count_--;
        auto& s = c.slots[id];
        s.state = twin::Slot::DEQUEUED;
        c.merge(cons_, s.enq);
        LocalTensor<T> t; t.addr_ = s.addr; t.size_ = s.len / sizeof(T); t.slot_ = id; t.gen_ = s.gen;
        t.mem_ = s.mem; t.pos_ = dst; return t;
    }
    // FreeTensor: return the buffer (the next AllocTensor's producer waits on the consumer pipe here).
    template <typename T> void FreeTensor(LocalTensor<T>& t) {
        Core& c = core();
        c.check_abort();
        if (t.slot_ < first_ || t.slot_ >= first_ + num_)
            c.fail("queue-misuse", "TQue::FreeTensor", "tensor does not belong to this queue");
        auto& s = c.slots[t.slot_];
        if (s.gen != t.gen_ || s.state == twin::Slot::FREE)
            c.fail("double-free", "TQue::FreeTensor", "tensor was already freed");
        if (s.state == twin::Slot::QUEUED)
            c.fail("queue-misuse", "TQue::FreeTensor", "tensor freed while still enqueued (DeQue it first)");
        bool never_queued = s.state == twin::Slot::ALLOCATED;
        s.state = twin::Slot::FREE;
        s.gen = ++c.gen_counter;
        // the consumer used it last; without an EnQue the producer did (alloc -> free): wait for that pipe
        s.freed = c.snapshot(never_queued ? prod_ : cons_);
    }
    bool VacantInQue() const { return count_ < depth; }
    bool HasTensorInQue() const { return count_ > 0; }
    int32_t GetTensorCountInQue() const { return count_; }

    // ---- twin internals ----
    int first_ = 0, num_ = 0, next_alloc_ = 0, head_ = 0, count_ = 0;
    int fifo_[8] = {};
    twin::Pi prod_ = twin::P_MTE2, cons_ = twin::P_V;
};
template <TPosition pos, int32_t depth = 1, auto mask = 0> class TQue : public TQueBind<pos, pos, depth, mask> {};

// TBuf: a plain buffer with no queue semantics (synchronisation is the kernel's job).
template <TPosition pos = TPosition::VECCALC> class TBuf {
  public:
    template <typename T> LocalTensor<T> Get() { return Get<T>(len_ / sizeof(T)); }
    template <typename T> LocalTensor<T> Get(uint32_t count) {
        Core& c = core();
        if (slot_ < 0) c.fail("queue-misuse", "TBuf::Get", "TBuf has no buffer (InitBuffer not called)");
        if (uint64_t(count) * sizeof(T) > len_)
            c.fail("operand-bounds", "TBuf::Get", std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
                   " B exceed the buffer's " + std::to_string(len_) + " B");
        auto& s = c.slots[slot_];
        LocalTensor<T> t; t.addr_ = s.addr; t.size_ = count; t.slot_ = slot_; t.gen_ = s.gen; t.mem_ = s.mem;
        t.pos_ = pos; return t;
    }
    int slot_ = -1;
    uint32_t len_ = 0;
};

// TPipe: owns the on-chip memory of the kernel; InitBuffer allocates (rounded up to 32 B) and fails on overflow.
class TPipe {
  public:
    TPipe() { core().pipe_obj = this; }
    ~TPipe() { if (twin::tl_core && twin::tl_core->pipe_obj == this) twin::tl_core->pipe_obj = nullptr; }
    template <class Q> void InitBuffer(Q& que, uint8_t num, uint32_t len) {
        Core& c = core();
        constexpr TPosition sp = Q::srcPosition, dp = Q::dstPosition;
        const char* call = "TPipe::InitBuffer";
        if (!queue_pipes(sp, dp, que.prod_, que.cons_))
            c.fail("queue-misuse", call, "TQue at this TPosition is not supported (use TBuf for VECCALC)");
        if (num == 0) c.fail("queue-misuse", call, "num = 0 buffers");
        if (que.num_ != 0) c.fail("queue-misuse", call, "InitBuffer called twice on one queue");
        if (c.pos_buffers[int(sp)] + num > twin::model::MAX_BUFFERS_PER_POSITION)
            c.fail("buffer-count", call, "more than " + std::to_string(twin::model::MAX_BUFFERS_PER_POSITION) +
                   " queue buffers at one TPosition");
        c.pos_buffers[int(sp)] += num;
        que.first_ = int(c.slots.size());
        que.num_ = num;
        for (int i = 0; i < num; ++i) alloc(c, call, mem_of(sp), len, twin::Slot::FREE);
    }
    template <TPosition pos> void InitBuffer(TBuf<pos>& buf, uint32_t len) {
        Core& c = core();
        if (buf.slot_ >= 0) c.fail("queue-misuse", "TPipe::InitBuffer", "InitBuffer called twice on one TBuf");
        buf.slot_ = alloc(c, "TPipe::InitBuffer", mem_of(pos), len, twin::Slot::TBUF);
        buf.len_ = c.slots[buf.slot_].len;
    }
    // Reset / Destroy: release every buffer (tensors from them become invalid).
    void Reset() {
        Core& c = core();
        for (auto& s : c.slots) { s.gen = ++c.gen_counter; s.state = twin::Slot::FREE; }
        c.slots.clear();
        for (auto& a : c.arena_next) a = 0;
        for (auto& p : c.pos_buffers) p = 0;
        c.buffers = 0;
    }
    void Destroy() { Reset(); }
    // Event ids (TPipe::FetchEventID / AllocEventID / ReleaseEventID pages).
    event_t FetchEventID(HardEvent evt) {
        Core& c = core();
        for (uint32_t i = 0; i < twin::model::MAX_EVENT_ID; ++i)
            if (!(c.event_alloc[int(evt)] >> i & 1)) return event_t(i);
        c.fail("event-id", "TPipe::FetchEventID", "no free event id for HardEvent::" + twin::event_name(evt));
    }
    template <HardEvent evt> event_t FetchEventID() { return FetchEventID(evt); }
    template <HardEvent evt> event_t AllocEventID() {
        event_t id = FetchEventID(evt);
        core().event_alloc[int(evt)] |= uint8_t(1u << id);
        return id;
    }
    template <HardEvent evt> void ReleaseEventID(event_t id) {
        Core& c = core();
        if (id < 0 || id >= int(twin::model::MAX_EVENT_ID) || !(c.event_alloc[int(evt)] >> id & 1))
            c.fail("event-id", "TPipe::ReleaseEventID", "event id " + std::to_string(id) + " of HardEvent::" +
                   twin::event_name(evt) + " was not allocated");
        c.event_alloc[int(evt)] &= uint8_t(~(1u << id));
    }

  private:
    static int alloc(Core& c, const char* call, int m, uint32_t len, twin::Slot::State st) {
        if (m < 0) c.fail("queue-misuse", call, "TPosition has no on-chip memory");
        if (c.aic == (m == twin::M_UB))
            c.fail("core-memory", call, std::string(twin::mem_name(m)) + " is not on this " +
                   (c.aic ? "cube (AIC) core: AIC has L1/L0A/L0B/L0C" : "vector (AIV) core: AIV has UB only") +
                   "; AIC and AIV exchange data only through GM");
        c.ensure_mem(m);
        if (c.buffers + 1 > twin::model::MAX_BUFFERS_PER_KERNEL)
            c.fail("buffer-count", call, "more than " + std::to_string(twin::model::MAX_BUFFERS_PER_KERNEL) +
                   " buffers in one kernel");
        uint32_t al = twin::mem_align(m);
        uint32_t rounded = (len + 31) / 32 * 32;
        uint32_t start = (c.arena_next[m] + al - 1) / al * al;
        if (uint64_t(start) + rounded > twin::mem_bytes(m))
            c.fail("ub-overflow", call, std::string(twin::mem_name(m)) + " overflow: " + std::to_string(rounded) +
                   " B requested at offset " + std::to_string(start) + ", capacity " +
                   std::to_string(twin::mem_bytes(m)) + " B");
        c.arena_next[m] = start + rounded;
        c.buffers++;
        twin::Slot s; s.gen = ++c.gen_counter; s.mem = uint8_t(m); s.addr = start; s.len = rounded; s.state = st;
        c.slots.push_back(s);
        return int(c.slots.size() - 1);
    }
};
inline TPipe* GetTPipePtr() {
    auto p = static_cast<TPipe*>(core().pipe_obj);
    if (!p) core().fail("queue-misuse", "GetTPipePtr", "no TPipe alive on this core");
    return p;
}

// Block / core ids (GetBlockIdx, GetBlockNum pages).
// MIX_AIC_1_2 (GetBlockIdx page atlasascendc_api_07_0185): AIC in [0, blockDim), AIV in [0, 2 blockDim);
// GetSubBlockIdx is 0 / 1 for the two AIV of a group (0 on AIC); GetTaskRation 2 on AIV of a MIX launch, else 1.
inline int64_t GetBlockIdx() { return core().block; }
inline int64_t GetBlockNum() { return core().launch->block_dim; }
inline int64_t GetSubBlockIdx() { return core().sub; }
inline int64_t GetTaskRation() { return core().launch->kind == twin::CoreKind::MIX_AIC_1_2 && !core().aic ? 2 : 1; }
inline int64_t GetTaskRatio() { return GetTaskRation(); }
}  // namespace AscendC
