"""One module per opcode: its fields and encoding, reference semantics, accessed regions and cost
(docs/ADDING_AN_OPCODE.md). engine/instructions/registry.py numbers them."""
