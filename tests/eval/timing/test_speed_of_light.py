"""Speed-of-light math on CPU: exact FLOP and byte counts, the physical gate, the peaks cache."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch
from torch import nn

from cudal1.eval.timing.speed_of_light import (
    DevicePeaks,
    Work,
    count_work,
    device_name,
    load_or_measure_peaks,
    measure_peaks,
    nominal_peaks,
    physical_gate,
    sol_ms,
    sol_percent,
)
from cudal1.schema import Severity, Stage


class MatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class NeedsValues(nn.Module):
    """``.item()`` has no meaning on meta: count_work must fall back to CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.abs().max().item()
        return self.lin(x) / (scale + 1.0)


class Broken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("cannot run anywhere")


def test_matmul_flops_and_bytes_exact() -> None:
    m, k, n = 16, 32, 8
    work = count_work(MatMul(), [torch.randn(m, k), torch.randn(k, n)])
    assert work.flops == 2 * m * n * k
    assert work.flops_by_dtype == {"float32": 2 * m * n * k}
    assert work.bytes_out == m * n * 4
    assert work.bytes_io == (m * k + k * n + m * n) * 4


def test_bfloat16_flops_by_dtype() -> None:
    a = torch.randn(4, 6, dtype=torch.bfloat16)
    b = torch.randn(6, 2, dtype=torch.bfloat16)
    work = count_work(MatMul(), [a, b])
    assert work.flops_by_dtype == {"bfloat16": 2 * 4 * 2 * 6}
    assert work.bytes_io == (24 + 12 + 8) * 2


def test_conv_linear_parameters_and_buffers_counted_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cudal1.eval.timing.speed_of_light")
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    model.eval()
    x = torch.randn(2, 3, 8, 8)
    work = count_work(model, [x])
    conv = 2 * (2 * 8 * 6 * 6) * (3 * 3 * 3)  # 2 x outputs x MACs per output (bias not counted)
    linear = 2 * 2 * (8 * 6 * 6) * 4
    assert work.flops == conv + linear
    params = sum(p.numel() for p in model.parameters()) * 4
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())  # incl. int64 num_batches_tracked
    assert work.bytes_out == 2 * 4 * 4
    assert work.bytes_io == x.numel() * 4 + params + buffers + work.bytes_out
    assert not caplog.records  # counted on meta, no fallback


def test_launches_count_the_kernels_of_a_call_not_its_views() -> None:
    """A convolution is three kernels under cuDNN (layouts in and out), batch norm and ReLU one
    each; the flatten is a view and launches none; the linear layer's addmm one (its weight's
    transpose is a view)."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    assert count_work(model.eval(), [torch.randn(2, 3, 8, 8)]).launches == 3 + 1 + 1 + 1
    assert count_work(MatMul(), [torch.randn(4, 6), torch.randn(6, 2)]).launches == 1


def test_launches_are_counted_where_meta_cannot_run() -> None:
    """A task that reads values (``.item()``) is counted on CPU copies, as its FLOPs are: abs, max,
    the read of the value, the matmul and the division."""
    assert count_work(NeedsValues(), [torch.randn(3, 8)]).launches == 5


def test_same_tensor_twice_is_read_once() -> None:
    a = torch.randn(8, 8)
    assert count_work(MatMul(), [a, a]).bytes_io == (64 + 64) * 4


def test_meta_failure_falls_back_to_cpu(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cudal1.eval.timing.speed_of_light")
    model = NeedsValues()
    x = torch.randn(3, 8)
    work = count_work(model, [x])
    assert work.flops == 2 * 3 * 8 * 4
    assert work.bytes_out == 3 * 4 * 4
    assert x.device.type == "cpu" and next(model.parameters()).device.type == "cpu"
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["count_work on meta failed"]


def test_total_failure_gives_nan_flops() -> None:
    x = torch.randn(5)
    work = count_work(Broken(), [x])
    assert math.isnan(work.flops) and math.isnan(work.bytes_out)
    assert work.bytes_io == 5 * 4  # the known part: a lower bound


PEAKS = DevicePeaks("fake", bandwidth_Bps=1e12, flops_per_s={"float32": 1e13, "bfloat16": 1e14})


def test_sol_ms_and_percent() -> None:
    work = Work(flops=2e10, bytes_io=1e9, bytes_out=1e8, flops_by_dtype={"float32": 2e10})
    assert sol_ms(work, PEAKS, "float32") == pytest.approx((1.0, 2.0))
    assert sol_ms(work, PEAKS, "bfloat16") == pytest.approx((1.0, 0.2))
    assert sol_percent(4.0, work, PEAKS, "float32") == pytest.approx(50.0)
    assert sol_percent(4.0, work, PEAKS, "bfloat16") == pytest.approx(25.0)
    nan_flops = Work(math.nan, 1e9, math.nan)
    assert sol_percent(2.0, nan_flops, PEAKS, "float32") == pytest.approx(50.0)
    with pytest.raises(KeyError, match="tf32"):
        sol_ms(work, PEAKS, "tf32")


def test_gate_output_floor_always_applies() -> None:
    work = Work(flops=0.0, bytes_io=2e9, bytes_out=1e9)  # 1 ms just to write the output
    finding = physical_gate(0.5, work, PEAKS, l2_bytes=1e12)  # huge L2: only the output bound
    assert finding is not None
    assert finding.code == "faster_than_memory_floor"
    assert finding.severity is Severity.REJECT and finding.stage is Stage.INTEGRITY
    assert finding.evidence["bound"] == "bytes_out"
    assert finding.evidence["floor_ms"] == pytest.approx(1.0)
    assert physical_gate(0.81, work, PEAKS, l2_bytes=1e12) is None


def test_gate_io_floor_only_beyond_twice_l2() -> None:
    work = Work(flops=0.0, bytes_io=1e9, bytes_out=1e6)  # io floor 1 ms, output floor 1 us
    small_l2 = physical_gate(0.5, work, PEAKS, l2_bytes=50e6)
    assert small_l2 is not None and small_l2.evidence["bound"] == "bytes_io"
    assert physical_gate(0.5, work, PEAKS, l2_bytes=0.6e9) is None  # fits in 2x L2: cache may serve it
    assert physical_gate(0.9, work, PEAKS, l2_bytes=50e6) is None


def test_gate_ignores_unknown_work() -> None:
    assert physical_gate(1e-9, Work(math.nan, 0.0, math.nan), PEAKS, l2_bytes=50e6) is None


def test_peaks_cache_round_trip(tmp_path) -> None:
    calls: list[object] = []

    def fake_measure(device: object) -> DevicePeaks:
        calls.append(device)
        return DevicePeaks(device_name("cpu"), 5e10, {"float32": 1e11, "tf32": 1e11}, 0, "measured")

    first = load_or_measure_peaks("cpu", tmp_path, measure=fake_measure)
    second = load_or_measure_peaks("cpu", tmp_path, measure=fake_measure)
    assert first == second
    assert len(calls) == 1
    (cached,) = tmp_path.glob("peaks-*.json")
    assert torch.__version__.split("+")[0] in cached.name
    assert json.loads(cached.read_text())["bandwidth_Bps"] == 5e10

    cached.write_text("{not json")
    load_or_measure_peaks("cpu", tmp_path, measure=fake_measure)
    assert len(calls) == 2


def test_measure_peaks_cpu_is_quick_and_sane() -> None:
    peaks = measure_peaks("cpu")
    assert peaks.bandwidth_Bps > 1e8
    assert set(peaks.flops_per_s) >= {"float32", "tf32", "bfloat16"}
    assert all(v > 0 for v in peaks.flops_per_s.values())
    assert peaks.flops_per_s["tf32"] == peaks.flops_per_s["float32"]


def test_nominal_fallbacks() -> None:
    h100 = nominal_peaks("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.bandwidth_Bps == 3.35e12 and h100.flops_per_s["tf32"] == 494.7e12
    pcie = nominal_peaks("NVIDIA H100 PCIe")
    h200 = nominal_peaks("NVIDIA H200")
    assert pcie is not None and h200 is not None
    assert pcie.bandwidth_Bps < h100.bandwidth_Bps < h200.bandwidth_Bps
    assert nominal_peaks("cpu-x86_64") is None
