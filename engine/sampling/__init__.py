"""Token sampling on the logits' device: per-row settings as tensors, counter-based seeded noise, penalties from
device-resident counts, logprobs; one step or a whole run of decode steps without the host in between."""
