"""The kill-during-a-background-sharded-write job of tests/test_distributed_resume.py (2 processes, FSDP).

``python sharded_kill_job.py OUT N``: a fit that saves a sharded checkpoint at every epoch end
(``ModelCheckpoint``: the epoch's directory, then ``last.ckpt``). The N-th directory written in the background
stops on every rank once DCP has written its files into the temporary directory: the rank writes
``OUT/hanging-rank<r>`` (holding the writer thread's name) and sleeps until the test kills the job.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fsdp_job import Blocks, loader  # noqa: E402

import ember  # noqa: E402
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint  # noqa: E402


class HangInBackgroundWrite:
    def __init__(self, out: str, nth: int) -> None:
        self.out, self.nth = out, nth

    def setup(self, trainer: Any) -> None:
        import torch.distributed.checkpoint as dcp

        real_save, count = dcp.save, [0]

        def save(*args: Any, **kwargs: Any) -> Any:
            if not trainer.checkpointing.writer.on_writer_thread():
                return real_save(*args, **kwargs)
            count[0] += 1
            result = real_save(*args, **kwargs)
            if count[0] == self.nth:
                with open(os.path.join(self.out, f"hanging-rank{trainer.global_rank}"), "w") as marker:
                    marker.write(threading.current_thread().name)
                time.sleep(600)
            return result

        dcp.save = save


def main(out: str, nth: int) -> None:
    ember.seed_everything(0)
    trainer = ember.Trainer(accelerator="cpu", strategy="fsdp", devices=2, max_epochs=4, num_sanity_val_steps=0,
                            logger=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), save_last=True),
                                       HangInBackgroundWrite(out, nth)])
    trainer.fit(Blocks(), loader(4))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
