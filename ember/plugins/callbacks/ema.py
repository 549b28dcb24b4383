"""``callback.ema``: an exponential moving average of the weights, updated after every optimizer step."""

from __future__ import annotations

from typing import Any

from torch.optim.swa_utils import get_ema_multi_avg_fn

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins.callbacks.weight_averaging import WeightAveraging


class EMA(WeightAveraging):
    """Keep ``ema = decay * ema + (1 - decay) * weights`` after every ``every_n_steps``-th optimizer step from
    ``start_step`` on (torch's :func:`~torch.optim.swa_utils.get_ema_multi_avg_fn`).

    :param decay: in [0, 1]; closer to 1 averages over more steps.
    :param every_n_steps: update after every n-th optimizer step (``trainer.global_step``).
    :param start_step: the first optimizer step that is averaged; earlier steps are skipped.
    :param use_buffers: average floating-point buffers (BatchNorm statistics) too.
    :param validate_with_averaged: validate with the averaged weights during fit.
    :param apply_at_end: leave the averaged weights in the module when training ends.

    The average is in every full checkpoint (``checkpoint["plugins"]["callback.ema"]``), so resuming gives the
    same average, bit for bit, as a fit that never stopped.
    """

    identity = "callback.ema"

    def __init__(self, decay: float = 0.999, every_n_steps: int = 1, start_step: int = 0, use_buffers: bool = True,
                 validate_with_averaged: bool = True, apply_at_end: bool = True) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ConfigurationError(f"EMA(decay={decay!r}) is invalid: expected a float in [0, 1], e.g. 0.999.")
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ConfigurationError(f"EMA(every_n_steps={every_n_steps!r}) is invalid: expected an int >= 1.")
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ConfigurationError(f"EMA(start_step={start_step!r}) is invalid: expected an int >= 0.")
        super().__init__(use_buffers, validate_with_averaged, apply_at_end)
        self.decay = decay
        self.every_n_steps = every_n_steps
        self.start_step = start_step
        self._avg_fn = get_ema_multi_avg_fn(decay)
        self._last_step = -1

    @hookimpl
    def on_train_start(self, trainer: Any) -> None:
        self._last_step = trainer.global_step

    @hookimpl
    def on_train_batch_end(self, trainer: Any, module: Any) -> None:
        step = trainer.global_step
        if step == self._last_step:  # no optimizer step in this batch (gradient accumulation)
            return
        self._last_step = step
        if step >= self.start_step and (step - self.start_step) % self.every_n_steps == 0:
            self._update(module, self._avg_fn)
