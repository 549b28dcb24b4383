"""Lightning's callback names for ember's callbacks (``from ember.lightning.callbacks import ModelCheckpoint``).

Each class is imported when first used; its arguments are ember's (docs/migration.md lists where they differ).
A Lightning name without an ember class that takes the same arguments raises an ``AttributeError`` that says
what to use instead.
"""

from __future__ import annotations

from ember.core.api.callback import Callback
from ember.lightning._names import lazy_names

#: Lightning's name -> (ember module, ember class).
ALIASES = {
    "ModelCheckpoint": ("ember.plugins.callbacks.model_checkpoint", "ModelCheckpoint"),
    "EarlyStopping": ("ember.plugins.callbacks.early_stopping", "EarlyStopping"),
    "LearningRateMonitor": ("ember.plugins.callbacks.lr_monitor", "LearningRateMonitor"),
    "ModelSummary": ("ember.plugins.callbacks.model_summary", "ModelSummary"),
    "Timer": ("ember.plugins.callbacks.timer", "Timer"),
    "StochasticWeightAveraging": ("ember.plugins.callbacks.swa", "SWA"),
    "TQDMProgressBar": ("ember.plugins.progress.tqdm_bar", "TQDMProgressBar"),
    "RichProgressBar": ("ember.plugins.progress.rich_bar", "RichProgressBar"),
    "ProgressBar": ("ember.plugins.progress", "ProgressBar"),
}
#: Lightning callbacks ember has no class for, with the ember way.
MISSING = {
    "GradientAccumulationScheduler": "pass Trainer(accumulate_grad_batches=N)",
    "BackboneFinetuning": "unfreeze layers yourself in on_train_epoch_start",
    "BaseFinetuning": "unfreeze layers yourself in on_train_epoch_start",
    "BatchSizeFinder": "use ember.tuner (`ember tune`, Tuner.scale_batch_size)",
    "LearningRateFinder": "use ember.tuner (Tuner.lr_find)",
    "DeviceStatsMonitor": "log torch.cuda.memory_allocated() yourself with self.log",
    "LambdaCallback": "subclass ember.lightning.Callback",
    "ModelPruning": "call torch.nn.utils.prune in a callback",
    "OnExceptionCheckpoint": "ModelCheckpoint(save_last=True) with resume (ckpt_path='last')",
    "SpikeDetection": "use the nan-guard or loss-check callbacks",
    "ThroughputMonitor": "measure with a callback of your own",
    # these exist in ember with other arguments, so the Lightning name would misread a call
    "BasePredictionWriter": "use ember.plugins.callbacks.PredictionWriter(output_dir, write_interval); its "
                            "write_on_batch_end takes (trainer, prediction, batch_idx, dataloader_idx)",
    "EMAWeightAveraging": "use ember.plugins.callbacks.ema.EMA(decay=, every_n_steps=, start_step=)",
    "WeightAveraging": "use ember.plugins.callbacks.ema.EMA or ember.plugins.callbacks.swa.SWA",
}

__all__ = ["Callback", *ALIASES]


__getattr__ = lazy_names(__name__, ALIASES, MISSING, " callback")
