"""Which instructions each instruction waited for, read from the instruction words (docs/INSTRUCTIONS.md).

A wait (counter c, target t) holds until c has received t signal units in the step. The instructions that
satisfied it are the ones signalling c in the same step, taken in the order they finished (end time) until
their amounts reach t; the last of them released the wait (its *critical* producer). The scheduler's waits
target every signal of a counter, so there this is simply "all producers of c".

Producers are kept as groups, one per (step, counter), sorted by end time; a wait is a prefix of one group.
That keeps the data linear in the record's size even when each of 132 instructions waits for 132 others.
A record of several steps is their records back to back, instruction ids restarting at each step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.record import (MAX_WAITS, W_ID, W_NUM_WAITS, W_SIGNAL, W_SIGNAL_AMOUNT, W_WAITS,
                             ProfileRecord)


@dataclass(frozen=True)
class Dependencies:
    """Waits of instruction i (record order): entries wait_ptr[i]:wait_ptr[i+1] of wait_group / wait_count;
    wait k needs the first wait_count[k] members of producer group wait_group[k]."""

    group_ptr: np.ndarray  # int64 [G + 1]
    group_members: np.ndarray  # int64: record indices, each group sorted by end time
    wait_ptr: np.ndarray  # int64 [N + 1]
    wait_group: np.ndarray  # int64 [W]
    wait_count: np.ndarray  # int64 [W], >= 1

    @property
    def num_waits(self) -> int:
        return int(self.wait_group.shape[0])

    def producers(self, i: int) -> list[int]:
        """Every instruction whose signal counted towards one of i's waits (ascending)."""
        out: set[int] = set()
        for k in range(int(self.wait_ptr[i]), int(self.wait_ptr[i + 1])):
            a = int(self.group_ptr[self.wait_group[k]])
            out.update(self.group_members[a : a + int(self.wait_count[k])].tolist())
        return sorted(out)

    def critical_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(producer, consumer) per wait: the producer whose signal released it; duplicate pairs dropped."""
        consumer = np.repeat(np.arange(self.wait_ptr.shape[0] - 1), np.diff(self.wait_ptr))
        producer = self.group_members[self.group_ptr[self.wait_group] + self.wait_count - 1]
        pairs = np.unique(np.stack([producer, consumer], axis=1), axis=0) if consumer.size else np.zeros((0, 2), int)
        return pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)


def step_index(record: ProfileRecord) -> np.ndarray:
    """Step number of each instruction: a new step begins where the instruction id goes down."""
    ids = record.words[:, W_ID] if record.words.shape[1] > W_ID else np.zeros(record.num_instructions, np.int32)
    return np.concatenate([[0], np.cumsum(np.diff(ids.astype(np.int64)) < 0)]).astype(np.int64)


def has_dependency_words(record: ProfileRecord) -> bool:
    return record.words.shape[1] > W_SIGNAL_AMOUNT and record.num_instructions > 0


def _empty(n: int) -> Dependencies:
    z = np.zeros(0, np.int64)
    return Dependencies(np.zeros(1, np.int64), z, np.zeros(n + 1, np.int64), z, z)


def dependencies(record: ProfileRecord) -> Dependencies:
    """The record's dependency structure; empty when its words carry no waits (e.g. narrow synthetic words)."""
    n = record.num_instructions
    if not has_dependency_words(record):
        return _empty(n)
    w = record.words.astype(np.int64)
    step = step_index(record)
    signal, amount = w[:, W_SIGNAL], w[:, W_SIGNAL_AMOUNT]
    prod = np.flatnonzero((signal >= 0) & (amount > 0))
    if prod.size == 0:
        return _empty(n)
    nw = np.clip(w[:, W_NUM_WAITS], 0, MAX_WAITS)
    counters = w[:, W_WAITS : W_WAITS + 2 * MAX_WAITS : 2]
    width = int(max(signal.max(), counters.max(initial=0))) + 1  # key = step * width + counter
    members = prod[np.lexsort((record.end_ns[prod], signal[prod], step[prod]))]
    keys = step[members] * width + signal[members]
    first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    group_ptr = np.append(first, members.size).astype(np.int64)
    group_keys = keys[first]
    group_of_member = np.repeat(np.arange(first.size), np.diff(group_ptr))
    # Signal units received so far within each group, made globally increasing by a per-group offset so one
    # searchsorted finds, for every wait at once, how many of its group's producers it needed.
    cum = np.cumsum(amount[members])
    cum_in_group = cum - np.concatenate([[0], cum])[group_ptr[:-1]][group_of_member]
    stride = int(amount[members].sum()) + 1
    glob = cum_in_group + group_of_member * stride
    rows, grp, cnt = [], [], []
    for k in range(MAX_WAITS):
        i = np.flatnonzero(nw > k)
        c, t = w[i, W_WAITS + 2 * k], w[i, W_WAITS + 2 * k + 1]
        g = np.searchsorted(group_keys, step[i] * width + c)
        g_ok = np.minimum(g, group_keys.size - 1)
        found = (g < group_keys.size) & (group_keys[g_ok] == step[i] * width + c) & (c >= 0)
        i, g, t = i[found], g[found], t[found]
        need = np.searchsorted(glob, g * stride + np.maximum(t, 1), side="left") - group_ptr[g] + 1
        rows.append(i), grp.append(g), cnt.append(np.clip(need, 1, np.diff(group_ptr)[g]))
    i, g, c = (np.concatenate(a) for a in (rows, grp, cnt))
    order = np.argsort(i, kind="stable")
    wait_ptr = np.searchsorted(i[order], np.arange(n + 1)).astype(np.int64)
    return Dependencies(group_ptr, members.astype(np.int64), wait_ptr, g[order].astype(np.int64),
                        c[order].astype(np.int64))
