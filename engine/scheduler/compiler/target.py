"""The GPU a stream is compiled for, as the compiler sees it.

Every stage that depends on the device takes a `TargetDevice` argument: the splits size each op to about
`waves * num_sms` instructions, the cost model gives each SM a fair share of bandwidth and FLOPs, and the
policies fill `num_sms` queues. The kernel's own buffer limits (out / x floats, tensor-core chunk) are the
interpreter's, not the device's: they come in through SplitParams from the backend that checked them.
"""
from __future__ import annotations

from dataclasses import dataclass

# The SM count to compile for when nothing names one (the VM backend, `megakernel profile --backend vm`):
# an H100 or H200 SXM's, the GPUs the kernel targets.
DEFAULT_SIMULATED_SMS = 132


@dataclass(frozen=True)
class TargetDevice:
    num_sms: int  # persistent blocks of one launch: one per SM

    def __post_init__(self) -> None:
        if not isinstance(self.num_sms, int) or self.num_sms < 1:
            raise ValueError(f"TargetDevice.num_sms must be an int >= 1, got {self.num_sms!r}")
