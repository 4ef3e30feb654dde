"""One stable colour per opcode, shared by the HTML Gantt and the PNG (Perfetto hashes names itself)."""
from __future__ import annotations

import colorsys

# Tableau-like qualitative palette: distinguishable, readable on white.
_PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#1f77b4", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94",
)


def opcode_colors(opcode_names: dict[int, str]) -> dict[int, str]:
    """Opcode -> '#rrggbb', by ascending opcode so the same opcode set always gets the same colours."""
    colors: dict[int, str] = {}
    for k, op in enumerate(sorted(opcode_names)):
        if k < len(_PALETTE):
            colors[op] = _PALETTE[k]
        else:  # beyond the palette: golden-ratio hue steps stay distinct for many opcodes
            r, g, b = colorsys.hls_to_rgb((k * 0.618034) % 1.0, 0.55, 0.6)
            colors[op] = f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"
    return colors
