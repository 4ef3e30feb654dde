"""The instruction-stream compiler: one step's batch shape -> the instruction tensors the interpreter runs.

Stages: `step_builder_splits` (how each op is cut) -> `step_builder` (dependency DAG: waits, signals,
counters) -> `cost_model` (predicted time per instruction) -> `policies` (placement on SMs: static RR/LPT
queues or the dynamic list) -> `step_builder_cache` (compiled streams per batch shape). Every stage takes
the `target.TargetDevice` it compiles for as an argument. Never imports request scheduling
(engine/scheduler/requests).
"""
