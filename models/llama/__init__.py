"""models/llama package."""
