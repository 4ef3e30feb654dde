"""Request scheduler: admission, token-budget batching, chunked prefill, preemption. Plain Python.

Policy (vLLM-v1 style, one token budget per step):
1. RUNNING sequences first, in admission order: each gets its pending tokens (a decode is 1 token; a
   partially prefilled prompt gets a chunk of what is left of the budget, minus one token reserved for
   every running decode still to come, so a long prefill never starves decodes). When more sequences are ready
   to decode than the budget holds, they take turns, served longest ago first, and a waiting prompt gets half
   of the budget (`_decode_turn`): every request advances, and a new one starts before a running one ends.
2. Then WAITING sequences FCFS while seats (max_num_seqs), budget and KV pages allow. With chunked prefill
   a long prompt gets a budget-sized chunk and continues next step; without it the whole prompt must fit.
   No admission in a step that had to preempt (admitting would just thrash the cache).
3. KV pages for a chunk are ensured before it is scheduled. If a running sequence cannot get its pages,
   the most recently admitted *not yet scheduled* running sequence is preempted (recompute policy: pages
   freed, progress dropped, it goes to the FRONT of the waiting queue); if none is left, the sequence
   preempts itself. Already-scheduled sequences are never victims, so no chunk of this step ever points
   at a freed page.
Liveness: the oldest running sequence can always evict everyone after it and every sequence fits the
cache on its own (`add` checks), so it always progresses.
"""
from __future__ import annotations

from collections import deque

from engine.scheduler.requests.block_manager import BlockManager
from engine.scheduler.requests.scheduler_types import SchedulerConfig, ScheduledChunk, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus

__all__ = ["Scheduler", "SchedulerConfig", "ScheduledChunk", "SchedulerOutput"]


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        if not isinstance(config, SchedulerConfig):
            raise ValueError(f"Scheduler: config must be a SchedulerConfig, got {type(config).__name__}")
        self.config = config
        self.block_manager = BlockManager(config.num_pages, config.page_size)
        self.max_seq_len = config.max_seq_len
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []  # admission order: the last one is the first victim
        self._seqs: dict[str, Sequence] = {}
        # When more sequences wait to decode than the token budget holds, they take turns: those served longest ago
        # go first (the number of each sequence's last chunk, counting every chunk ever served).
        self._last_served: dict[str, int] = {}
        self._served = 0

    # ---- queries -----------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def has_unfinished(self) -> bool:
        return bool(self._running or self._waiting)

    def get(self, seq_id: str) -> Sequence | None:
        return self._seqs.get(seq_id)

    def running(self) -> list[Sequence]:
        return list(self._running)

    def waiting(self) -> list[Sequence]:
        return list(self._waiting)

    # ---- lifecycle ---------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue `seq` (FCFS). Raises ValueError if it can never be scheduled."""
        if not isinstance(seq, Sequence):
            raise ValueError(f"Scheduler.add: expected a Sequence, got {type(seq).__name__}")
        sid = seq.seq_id
        if sid in self._seqs:
            raise ValueError(f"Scheduler.add: sequence id {sid!r} is already scheduled")
        if seq.status is not SequenceStatus.WAITING or seq.num_computed_tokens != 0:
            raise ValueError(
                f"Scheduler.add: sequence {sid!r} must be fresh (WAITING, num_computed_tokens=0), "
                f"got {seq.status.name}, num_computed_tokens={seq.num_computed_tokens}"
            )
        n = seq.num_tokens
        if n == 0:
            raise ValueError(f"Scheduler.add: sequence {sid!r} has an empty prompt")
        cfg = self.config
        if n > cfg.max_model_len:
            raise ValueError(
                f"Scheduler.add: sequence {sid!r} has {n} tokens, more than max_model_len={cfg.max_model_len}"
            )
        if n > cfg.capacity_tokens:
            raise ValueError(
                f"Scheduler.add: sequence {sid!r} has {n} tokens but the whole KV cache holds "
                f"{cfg.capacity_tokens} ({cfg.num_pages} pages x {cfg.page_size})"
            )
        if not cfg.chunked_prefill and n > cfg.max_num_batched_tokens:
            raise ValueError(
                f"Scheduler.add: sequence {sid!r} has {n} tokens, more than max_num_batched_tokens="
                f"{cfg.max_num_batched_tokens}, and chunked_prefill is off"
            )
        self._seqs[sid] = seq
        self._waiting.append(seq)

    def finish(self, seq_id: str, status: SequenceStatus) -> None:
        """Remove `seq_id` from the queues with a finished `status` and free its pages."""
        if not isinstance(status, SequenceStatus) or not status.is_finished:
            raise ValueError(f"Scheduler.finish: status must be a FINISHED_* SequenceStatus, got {status!r}")
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise ValueError(f"Scheduler.finish: unknown sequence id {seq_id!r}")
        if seq.status is SequenceStatus.RUNNING:
            self._running.remove(seq)
        else:
            self._waiting.remove(seq)
        self._last_served.pop(seq_id, None)
        self.block_manager.free(seq_id)
        seq.status = status

    def abort(self, seq_id: str) -> bool:
        """Finish `seq_id` as FINISHED_ABORTED. Returns False if it is unknown (e.g. already finished)."""
        if seq_id not in self._seqs:
            return False
        self.finish(seq_id, SequenceStatus.FINISHED_ABORTED)
        return True

    # ---- one step ----------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        decodes: list[ScheduledChunk] = []
        prefills: list[ScheduledChunk] = []
        preempted: list[Sequence] = []
        finished: list[Sequence] = []
        running = self._running

        turn = self._decode_turn(budget)
        # One token reserved per running decode of this turn not yet reached, so prefill chunks cannot starve them.
        decodes_left = len(turn)
        i = 0
        while i < len(running):
            seq = running[i]
            pending = self._pending(seq)
            if pending <= 0:
                if seq.num_computed_tokens >= self.max_seq_len:
                    # It can never advance (the engine did not finish it at its length limit): finish it
                    # here rather than hold its pages forever.
                    running.pop(i)
                    self._retire(seq, SequenceStatus.FINISHED_LENGTH)
                    finished.append(seq)
                else:
                    i += 1  # all known tokens computed, waiting for on_step_done's sampled token
                continue
            if pending == 1:
                if seq.seq_id not in turn:  # another sequence's turn to decode
                    i += 1
                    continue
                decodes_left -= 1
                n = 1 if budget >= 1 else 0
            else:
                n = min(pending, budget - decodes_left, seq.max_chunk or pending)
            if n <= 0:
                i += 1
                continue
            ok, decode_victims = self._reserve_pages(i, seq.num_computed_tokens + n, preempted)
            if not ok:
                continue  # `seq` preempted itself; nothing runs after it, so the loop ends
            decodes_left -= decode_victims  # their reserved tokens are free again
            budget -= n
            (decodes if pending == 1 else prefills).append(self._chunk(seq, n))
            i += 1

        if not preempted:
            self._admit(budget, prefills)
        # Any 1-token chunk is computed like a decode (one query against the cache), including the last
        # token of a prefill or a 1-token admission chunk, so all of them go in the decode group.
        chunks = decodes + [c for c in prefills if c.is_decode] + [c for c in prefills if not c.is_decode]
        # One number per chunk served, in the order the served ones had waited: the turns stay a queue.
        for c in sorted(chunks, key=lambda c: self._last_served.get(c.seq_id, 0)):
            self._served += 1
            self._last_served[c.seq_id] = self._served
        return SchedulerOutput(chunks=tuple(chunks), preempted=tuple(preempted), finished=tuple(finished))

    def _decode_turn(self, budget: int) -> set[str]:
        """The running sequences ready to decode that this step serves: all of them when the budget holds them
        (and a token for a waiting prompt).
        Else they take turns, the ones served longest ago first, so every one advances instead of the oldest
        alone; and where a prompt waits to be computed (a waiting request, a running one mid-prompt), the decodes'
        turn is half the budget, the rest goes to prompts: with more decoding sequences than tokens per step, a new request would otherwise not start
        before a running one finished."""
        ready = [s for s in self._running if self._pending(s) == 1]
        prompts_wait = bool(self._waiting) or any(self._pending(s) > 1 for s in self._running)
        if len(ready) <= budget - prompts_wait:  # room for every decode (and a prompt token)
            return {s.seq_id for s in ready}
        seats = -(-budget // 2) if prompts_wait else budget
        order = sorted(range(len(ready)), key=lambda k: (self._last_served.get(ready[k].seq_id, 0), k))
        return {ready[k].seq_id for k in order[:max(0, seats)]}

    def on_step_done(self, output: SchedulerOutput, sampled: dict[str, int]) -> None:
        """Record that `output`'s chunks were computed: advance `num_computed_tokens` and append the sampled
        token of every chunk with `samples=True`. Entries of `sampled` for other chunks are ignored.
        Chunks of sequences finished/aborted since `schedule()` are skipped."""
        for chunk in output.chunks:
            seq = chunk.seq
            if self._seqs.get(seq.seq_id) is not seq or seq.status is not SequenceStatus.RUNNING:
                continue  # aborted (or finished and its id reused) while the step ran
            if seq.num_computed_tokens != chunk.start_pos:
                raise ValueError(
                    f"Scheduler.on_step_done: chunk of {seq.seq_id!r} starts at {chunk.start_pos} but "
                    f"{seq.num_computed_tokens} tokens are computed (stale output or applied twice?)"
                )
            seq.num_computed_tokens += len(chunk.token_ids)
            if chunk.samples:
                if seq.seq_id not in sampled:
                    raise ValueError(f"Scheduler.on_step_done: no sampled token for {seq.seq_id!r}")
                seq.append_token(sampled[seq.seq_id])

    def reserve_decode_steps(self, output: SchedulerOutput, steps: int) -> list[tuple[int, ...]] | None:
        """Block tables that let every chunk of `output`, all decodes, run `steps` decode steps in a row
        (positions start_pos .. start_pos + steps - 1), or None if the cache cannot hold them now (no one is
        preempted for them). Pages already taken stay with their sequence: its next steps would take them."""
        tables: list[tuple[int, ...]] = []
        for chunk in output.chunks:
            if not (chunk.is_decode and chunk.samples):
                return None
            if not self.block_manager.ensure_capacity(chunk.seq_id, chunk.start_pos + steps):
                return None
            tables.append(tuple(self.block_manager.block_table(chunk.seq_id)))
        return tables

    # ---- internals ---------------------------------------------------------------------------
    def _pending(self, seq: Sequence) -> int:
        """Tokens that may be computed next: never past max_seq_len (max_model_len, cache capacity)."""
        return min(seq.num_tokens, self.max_seq_len) - seq.num_computed_tokens

    def _chunk(self, seq: Sequence, n: int) -> ScheduledChunk:
        start = seq.num_computed_tokens
        return ScheduledChunk(
            seq=seq,
            token_ids=seq.token_slice(start, start + n),
            start_pos=start,
            block_table=tuple(self.block_manager.block_table(seq.seq_id)),
            samples=start + n == seq.num_tokens,
        )

    def _reserve_pages(self, i: int, num_tokens: int, preempted: list[Sequence]) -> tuple[bool, int]:
        """Ensure running[i] holds `num_tokens` tokens, preempting unscheduled running sequences (those
        after i, newest first) and finally running[i] itself. Returns (False, _) if running[i] was
        preempted, else (True, number of preempted victims that were ready to decode)."""
        running = self._running
        seq = running[i]
        decode_victims = 0
        while not self.block_manager.ensure_capacity(seq.seq_id, num_tokens):
            victim = running.pop()  # the newest; it is `seq` itself when nothing is left after it
            if victim is seq:
                self._preempt(victim)
                preempted.append(victim)
                return False, decode_victims
            decode_victims += self._pending(victim) == 1
            self._preempt(victim)
            preempted.append(victim)
        return True, decode_victims

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free(seq.seq_id)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        # Front of the queue: it was admitted before anything still waiting. Victims are taken newest
        # first, so repeated appendleft leaves them in their original admission order.
        self._waiting.appendleft(seq)

    def _retire(self, seq: Sequence, status: SequenceStatus) -> None:
        del self._seqs[seq.seq_id]
        self._last_served.pop(seq.seq_id, None)
        self.block_manager.free(seq.seq_id)
        seq.status = status

    def _admit(self, budget: int, prefills: list[ScheduledChunk]) -> None:
        """Admit waiting sequences FCFS into `prefills`. Stops at the first that does not fit (no
        skipping ahead: a big prompt must not be starved by a stream of small ones)."""
        cfg = self.config
        while self._waiting and len(self._running) < cfg.max_num_seqs and budget > 0:
            seq = self._waiting[0]
            pending = self._pending(seq)
            n = min(pending, budget, seq.max_chunk or pending)
            if n < pending and not cfg.chunked_prefill and seq.max_chunk is None:
                break
            if not self.block_manager.ensure_capacity(seq.seq_id, seq.num_computed_tokens + n):
                break
            self._waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self._running.append(seq)
            budget -= n
            prefills.append(self._chunk(seq, n))
