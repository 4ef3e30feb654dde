"""The look-ahead's token feed (engine/backends/step_feed.py): the Backend default fills the fed slots before the
step runs, and the cuda backend's device-side index copy into the step args (DeviceStream.feed_tokens) writes the
same slots, checked here on CPU tensors."""
from __future__ import annotations

import torch

from engine.backends.base import Backend
from engine.backends.step_feed import TokenFeed
from engine.cuda.device_stream import DeviceStream
from engine.instructions.layout import ModelDims
from engine.instructions.step_args import StepArgsView
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config
from models.llama.step_batch import StepBatch

PAGE = 16


def _batch() -> StepBatch:
    # a decode (placeholder 0), a prompt chunk, another decode (placeholder 0)
    return StepBatch.build([[0], [5, 6, 7], [0]], [4, 0, 9], [[0], [1], [2]], page_size=PAGE)


class _Echo(Backend):
    """Logits that are one-hot on each sequence's last new token: `greedy` returns what the step was fed."""

    def forward(self, batch: StepBatch) -> torch.Tensor:
        last = batch.token_ids[batch.query_start[1:] - 1]
        return torch.nn.functional.one_hot(last, 64).float()


def test_the_default_launch_reads_the_fed_ids() -> None:
    prev_ids = torch.tensor([41, 17, 23])
    feed = TokenFeed(prev_ids, src=(2, 0), dst=(0, 4))
    handle = _Echo().launch_step(_batch(), greedy=True, feed=feed)
    handle.wait()
    assert handle.ids is not None and handle.ids.tolist() == [23, 7, 41]
    assert feed.apply(_batch()).token_ids.tolist() == [23, 5, 6, 7, 41]
    assert TokenFeed(prev_ids, (), ()).apply(_batch()).token_ids.tolist() == [0, 5, 6, 7, 0]


def test_device_stream_feeds_the_step_args_token_slots() -> None:
    dims = ModelDims.from_config(preset_config("tiny"))
    batch = _batch()
    cs = compile_stream(dims, batch, PAGE, BuildParams.of("lpt"), TargetDevice(num_sms=4))
    ds = DeviceStream.create(cs, dims, torch.device("cpu"), err_words=4, ring_pages=9)
    ds.upload_step_args()
    feed = TokenFeed(torch.tensor([41, 17, 23], dtype=torch.int32), src=(2, 0), dst=(0, 4))
    ds.feed_tokens(feed.ids, *feed.index(torch.device("cpu")))
    view = StepArgsView.decode(ds.step_args)
    assert view.token_ids[:5].tolist() == [23, 5, 6, 7, 41]
    assert view.positions[:5].tolist() == StepArgsView.decode(cs.step_args).positions[:5].tolist()
