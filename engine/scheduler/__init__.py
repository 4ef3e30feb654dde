"""engine/scheduler package: torch-free request scheduling and paged-KV page allocation."""
from engine.scheduler.block_manager import BlockManager
from engine.scheduler.request_scheduler import Scheduler
from engine.scheduler.scheduler_types import ScheduledChunk, SchedulerConfig, SchedulerOutput
from engine.sequence import Sequence, SequenceStatus

__all__ = [
    "BlockManager",
    "Scheduler",
    "SchedulerConfig",
    "ScheduledChunk",
    "SchedulerOutput",
    "Sequence",
    "SequenceStatus",
]
