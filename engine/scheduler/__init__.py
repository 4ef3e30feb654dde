"""engine/scheduler: what runs in a step, and how the step runs on the GPU's SMs.

Two sub-packages, with a one-way street between them and nothing else:
- `requests/`: request scheduling (admission, token budget, KV pages, preemption); plain Python, no torch.
- `compiler/`: the instruction-stream compiler (splits -> dependency DAG -> cost model -> placement ->
  cached instruction tensors) for one step's batch shape on a `TargetDevice`.
Neither imports the other: the engine hands the requests' `StepBatch` to a backend, which compiles it.
"""
