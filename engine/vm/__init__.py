"""The reference VM: runs the exact instruction tensors the GPU runs, on the CPU."""
