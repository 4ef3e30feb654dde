"""engine/backends package."""
