"""Host side of the CUDA megakernel: limits, per-stream device state, launches, errors, bench runner."""
