"""engine/scheduler package."""
