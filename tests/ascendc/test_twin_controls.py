"""Negative controls: every rule of the twin fires, naming the rule and the call, and the fixed kernel passes.

The kernels are in controls/controls.cpp (same order as CONTROLS below); README.md lists the rules.
"""

import pytest
from tests.ascendc.twin_fixtures import assert_breaks, assert_fixed_passes, report, twin_lib  # noqa: F401 (fixtures)

pytestmark = pytest.mark.ascendc

# (kernel, rule id, text the message must contain: the call, and the detail)
CONTROLS = [
    ("ub_overflow", "ub-overflow", "TPipe::InitBuffer: UB overflow"),
    ("buffers_per_position", "buffer-count", "more than 8 queue buffers at one TPosition"),
    ("buffers_per_kernel", "buffer-count", "more than 64 buffers in one kernel"),
    ("alloc_beyond_num", "queue-misuse", "TQue::AllocTensor: all 1 buffers"),
    ("queue_depth", "queue-depth", "TQue::EnQue: queue of depth 1 is full"),
    ("double_free", "double-free", "TQue::FreeTensor: tensor was already freed"),
    ("use_after_free", "use-after-free", "Duplicate: LocalTensor at UB offset 0 was freed"),
    ("deque_empty", "queue-misuse", "TQue::DeQue: DeQue on an empty queue"),
    ("ub_align", "ub-align", "Duplicate: UB address 12 is not 32-byte aligned"),
    ("operand_bounds", "operand-bounds", "Adds: 1028 B exceed the LocalTensor's 1024 B"),
    ("repeat_times", "repeat-times", "Adds: repeatTimes 256 outside [0, 255]"),
    ("mask_range", "mask", "Adds: continuous mask 65 outside [1, 64]"),
    ("mask_bits", "mask", "Muls: mask[1] must be 0 for 32-bit data"),
    ("dst_stride", "stride", "Abs: dst block stride 0"),
    ("count_negative", "count-negative", "Muls: count -1 < 0"),
    ("cast_pair", "cast-pair", "Cast: Cast float -> int8_t with CAST_RINT is not a documented Atlas A2 conversion"),
    ("compare_align", "count-align", "Compare: 40 elements = 160 B, not a multiple of 256 B"),
    ("datacopy_len", "datacopy-align", "DataCopy(GM->UB): 22 B is not a multiple of 32 B"),
    ("datacopy_ub_addr", "ub-align", "DataCopy(GM->UB): UB address 16 is not 32-byte aligned"),
    ("datacopy_out_len", "datacopy-align", "DataCopy(UB->GM): 52 B is not a multiple of 32 B"),
    ("datacopypad_count", "datacopypad-range", "DataCopyPad(GM->UB): blockCount 4096 outside [1, 4095]"),
    ("datacopypad_len", "datacopypad-range", "DataCopyPad(GM->UB): blockLen 0 B outside [1, 65535]"),
    ("gm_unregistered", "gm-bounds", "GlobalTensor::SetGlobalBuffer: 4097 elements"),
    ("gm_tensor_bounds", "gm-bounds", "DataCopy(GM->UB): GM elements [0, 64) outside the GlobalTensor's 56"),
    ("gm_write_input", "gm-write-input", "DataCopy(UB->GM): write into GM input tensor 'x'"),
    ("gm_canary", "gm-canary", "the 64 B after GM tensor 'y' were overwritten"),
    ("atomic_type", "atomic-type", "DataCopy(UB->GM): SetAtomicAdd element size 4 B"),
    ("raw_mte2_v", "pipe-hazard", "RAW: Adds [PIPE_V, call #2] reads UB bytes [0, 32) last written by "
                                  "DataCopy(GM->UB) [PIPE_MTE2, call #1]"),
    ("raw_v_mte3", "pipe-hazard", "RAW: DataCopy(UB->GM) [PIPE_MTE3, call #2] reads UB bytes [0, 32) last written "
                                  "by Duplicate [PIPE_V, call #1]"),
    ("war_v_mte2", "pipe-hazard", "WAR: DataCopy(GM->UB) [PIPE_MTE2, call #3] overwrites UB bytes [0, 32) still "
                                  "being read by Adds [PIPE_V, call #2]"),
    ("raw_v_v", "pipe-hazard", "RAW: Muls [PIPE_V, call #2] reads UB bytes [0, 32) last written by Duplicate "
                               "[PIPE_V, call #1] with no PipeBarrier<PIPE_V>"),
    ("raw_s_v", "pipe-hazard", "last written by LocalTensor::SetValue [PIPE_S, call #1] with no EnQue/DeQue, "
                               "SetFlag/WaitFlag<HardEvent::S_V>"),
    ("raw_v_s", "pipe-hazard", "RAW: LocalTensor::GetValue [PIPE_S, call #2] reads UB bytes [0, 32) last written "
                               "by Duplicate"),
    ("transitive_sync", "pipe-hazard", "RAW: DataCopy(UB->GM) [PIPE_MTE3, call #3] reads UB bytes [0, 32) last "
                                       "written by DataCopy(GM->UB) [PIPE_MTE2, call #1]"),
    ("flag_unmatched", "flag-unmatched", "WaitFlag<HardEvent::MTE2_V>: event id 2 was never set"),
    ("event_id", "event-id", "SetFlag<HardEvent::V_MTE3>: event id 8 outside [0, 8)"),
    ("queue_sync", "pipe-hazard", "RAW: Muls [PIPE_V, call #2] reads UB bytes [0, 32) last written by "
                                  "DataCopy(GM->UB) [PIPE_MTE2, call #1]"),
    ("sync_all_missing", "sync-all", "SyncAll: a core returned from the kernel without reaching this SyncAll"),
    ("one_core_fails", "datacopy-align", "DataCopy(GM->UB): 28 B is not a multiple of 32 B (the hardware moves "
                                         "whole 32-byte blocks; use DataCopyPad for unaligned lengths) (core 2)"),
    ("waw_v_mte2", "pipe-hazard", "WAW: DataCopy(GM->UB) [PIPE_MTE2, call #2] overwrites UB bytes [0, 32) last "
                                  "written by Duplicate [PIPE_V, call #1]"),
    ("release_event", "event-id", "TPipe::ReleaseEventID: event id 0 of HardEvent::V_S was not allocated"),
    ("cast_overlap", "operand-overlap", "Cast: in-place Cast between types of different widths"),
    ("select_mode", "select-mode", "Select: SELMODE does not match the operands"),
    ("gm_setvalue_input", "gm-write-input", "GlobalTensor::SetValue: write into GM input tensor 'x'"),
    ("datacopy_params", "datacopy-params", "DataCopy(GM->UB, DataCopyParams): blockLen 0"),
    ("gm_raw_mte3_mte2", "pipe-hazard", "RAW on GM: DataCopy(GM->UB) [PIPE_MTE2, call #3] reads GM bytes this core "
                                        "wrote with DataCopy(UB->GM) [PIPE_MTE3, call #2]"),
]


def test_every_control_is_listed(twin_lib):
    assert twin_lib.twin_control_count() == len(CONTROLS)


@pytest.mark.parametrize("index", range(len(CONTROLS)), ids=[c[0] for c in CONTROLS])
def test_control_breaks_the_rule(twin_lib, report, index):
    _, rule, text = CONTROLS[index]
    assert_breaks(lambda fixed, rep: twin_lib.twin_control(index, fixed, rep), report, rule, text)


@pytest.mark.parametrize("index", range(len(CONTROLS)), ids=[c[0] for c in CONTROLS])
def test_fixed_control_passes(twin_lib, report, index):
    assert_fixed_passes(lambda fixed, rep: twin_lib.twin_control(index, fixed, rep), report)
