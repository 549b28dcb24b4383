"""The smallest multi-process fit that ends like a user's script: ``ember run --nproc-per-node 2 exit_status_job.py``.

Two optimizer steps of a 2-process DDP fit on gloo; the model and the trainer stay referenced until the
interpreter exits, as in a script that ends after ``fit``. The process must end with status 0 (an abort at
interpreter exit is what tests/test_process_group_exit.py's 20-run test looks for).
"""

from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset

model = TinyClassifier()
trainer = ember.Trainer(accelerator="cpu", strategy="ddp", max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(model, DataLoader(tiny_dataset(16), batch_size=4))
