"""engine/instructions package."""
