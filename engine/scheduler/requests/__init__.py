"""Request scheduling: which sequences and tokens run in a step, and their KV pages. Plain Python (no torch);
never imports the stream compiler (engine/scheduler/compiler)."""
