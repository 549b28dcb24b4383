"""Lightning's callback names for ember's callbacks (``from ember.lightning.callbacks import ModelCheckpoint``).

Each class is imported when first used; its arguments are ember's (docs/migration.md lists where they differ).
A Lightning name without an ember class that takes the same arguments imports, and raises an error that says
what to use instead when it is used.
"""

from __future__ import annotations

from ember.core.api.callback import Callback
from ember.lightning._names import lazy_names

#: Lightning's name -> (ember module, ember class).
ALIASES = {
    "ModelCheckpoint": ("ember.lightning.pytorch.callbacks.model_checkpoint", "ModelCheckpoint"),
    "EarlyStopping": ("ember.plugins.callbacks.early_stopping", "EarlyStopping"),
    "LearningRateMonitor": ("ember.plugins.callbacks.lr_monitor", "LearningRateMonitor"),
    "ModelSummary": ("ember.plugins.callbacks.model_summary", "ModelSummary"),
    "Timer": ("ember.plugins.callbacks.timer", "Timer"),
    "StochasticWeightAveraging": ("ember.plugins.callbacks.swa", "SWA"),
    "TQDMProgressBar": ("ember.lightning.pytorch.callbacks.progress.tqdm_progress", "TQDMProgressBar"),
    "RichProgressBar": ("ember.plugins.progress.rich_bar", "RichProgressBar"),
    "ProgressBar": ("ember.plugins.progress", "ProgressBar"),
    # built for Lightning's names, on ember's hooks (ember.lightning.pytorch.callbacks.*)
    "Checkpoint": ("ember.lightning.pytorch.callbacks.checkpoint", "Checkpoint"),
    "LambdaCallback": ("ember.lightning.pytorch.callbacks.lambda_function", "LambdaCallback"),
    "BasePredictionWriter": ("ember.lightning.pytorch.callbacks.prediction_writer", "BasePredictionWriter"),
    "OnExceptionCheckpoint": ("ember.lightning.pytorch.callbacks.on_exception_checkpoint", "OnExceptionCheckpoint"),
    "GradientAccumulationScheduler": ("ember.lightning.pytorch.callbacks.gradient_accumulation_scheduler",
                                      "GradientAccumulationScheduler"),
    "BaseFinetuning": ("ember.lightning.pytorch.callbacks.finetuning", "BaseFinetuning"),
    "BackboneFinetuning": ("ember.lightning.pytorch.callbacks.finetuning", "BackboneFinetuning"),
    "LearningRateFinder": ("ember.lightning.pytorch.callbacks.finders", "LearningRateFinder"),
    "BatchSizeFinder": ("ember.lightning.pytorch.callbacks.finders", "BatchSizeFinder"),
    "DeviceStatsMonitor": ("ember.lightning.pytorch.callbacks.monitors", "DeviceStatsMonitor"),
    "ThroughputMonitor": ("ember.lightning.pytorch.callbacks.monitors", "ThroughputMonitor"),
    "SpikeDetection": ("ember.lightning.pytorch.callbacks.monitors", "SpikeDetection"),
    "ModelPruning": ("ember.lightning.pytorch.callbacks.pruning", "ModelPruning"),
    "RichModelSummary": ("ember.lightning.pytorch.callbacks.rich_model_summary", "RichModelSummary"),
}
#: Lightning callbacks ember has no class for with Lightning's arguments: the name imports, and using it says
#: the ember way.
MISSING = {
    "EMAWeightAveraging": "use ember.plugins.callbacks.ema.EMA(decay=, every_n_steps=, start_step=)",
    "WeightAveraging": "use ember.plugins.callbacks.ema.EMA or ember.plugins.callbacks.swa.SWA",
}

__all__ = ["Callback", *ALIASES, *MISSING]


__getattr__ = lazy_names(__name__, ALIASES, MISSING, " callback")
