"""``lightning.pytorch.callbacks.progress.tqdm_progress``: ``TQDMProgressBar`` with Lightning's behaviour and
attributes, and ``Tqdm``, a tqdm bar whose numbers keep their width (``1.000``, ``0.100``) so that a postfix does not
flicker as values change.

Lightning's bar differs from ember's default (``progress.tqdm``): it draws on any output, a log file or a pipe too,
keeps its bars in ``train_progress_bar``, ``val_progress_bar``, ``test_progress_bar`` and ``predict_progress_bar``
(tqdm objects made by the ``init_*_tqdm`` methods, which a subclass may override), restarts the evaluation bar for
each dataloader (``Validation DataLoader 1``), and with ``leave=False`` (the default) reuses one training bar for
every epoch. Its bars are made from this module's ``Tqdm`` when they are needed, so patching that name changes them.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from tqdm.auto import tqdm as _tqdm

from ember.core.hooks.plugin_manager import EVENT_HOOKS
from ember.core.hooks.positional import add_base_hooks
from ember.plugins.progress.tqdm_bar import TQDMProgressBar as _EmberTQDM

__all__ = ["TQDMProgressBar", "Tqdm", "convert_inf"]

_WIDTH = 5  # the characters a padded number takes: "1.000"
_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"


class Tqdm(_tqdm):  # type: ignore[misc,valid-type]
    @staticmethod
    def format_num(n: int | float | str) -> str:
        """``n`` as tqdm writes it; a float, or a string of a number, padded with zeros to five characters
        (``1.0`` -> ``1.000``); numbers in exponent notation and other strings as they are."""
        pad = isinstance(n, (float, str))
        text = n if isinstance(n, str) else _tqdm.format_num(n)
        if not pad or "e" in text:
            return text
        try:
            float(text)
        except ValueError:
            return text
        if "." not in text and len(text) < _WIDTH:
            text += "."
        return text + "0" * (_WIDTH - len(text))


def convert_inf(x: int | float | None) -> int | float | None:
    """None for an infinite total (tqdm's spelling of "unknown"), else ``x``."""
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return x


_KINDS = ("train", "val", "test", "predict")


def _bar_property(kind: str) -> property:
    def get(self: TQDMProgressBar) -> Any:
        bar = self._bars[kind]
        if bar is None:
            raise TypeError(f"{type(self).__name__}.{kind}_progress_bar is not made yet: it is made when its stage "
                            "starts.")
        return bar

    def put(self: TQDMProgressBar, bar: Any) -> None:
        self._bars[kind] = bar

    return property(get, put, doc=f"The tqdm bar of the {kind} stage (made when the stage first starts).")


def _at(counts: Any, index: int) -> Any:
    if isinstance(counts, (list, tuple)):
        return counts[index] if index < len(counts) else 0
    return counts


class TQDMProgressBar(_EmberTQDM):
    """Lightning's tqdm progress bar (see the module's docstring).

    :param refresh_rate: update a bar every this many batches, and at its last batch (0: draw nothing); 20 for the
        default on Google Colab, at least ``TQDM_MINITERS`` where that is set.
    :param process_position: the line of the first bar, for several processes drawing at once.
    :param leave: keep each epoch's training bar on screen (a new bar per epoch) instead of reusing one.
    """

    train_progress_bar = _bar_property("train")
    val_progress_bar = _bar_property("val")
    test_progress_bar = _bar_property("test")
    predict_progress_bar = _bar_property("predict")

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__(refresh_rate)
        self.process_position = process_position
        self.leave = leave
        self._bars: dict[str, Any] = dict.fromkeys(_KINDS)
        self._dataloader: int | None = None  # the dataloader the evaluation bar counts now
        self.trainer: Any = None

    def __getstate__(self) -> dict:  # tqdm bars and the trainer do not pickle
        state = super().__getstate__()
        state["_bars"] = dict.fromkeys(_KINDS)
        state["trainer"] = None
        return state

    # -- the bars ------------------------------------------------------------------------------------------
    def _make(self, description: str, leave: bool, line: int = 0, **extra: Any) -> Any:
        return Tqdm(desc=description, position=2 * self.process_position + line, disable=self.is_disabled,
                    leave=leave, dynamic_ncols=True, file=sys.stdout, bar_format=_FORMAT, **extra)

    def init_sanity_tqdm(self) -> Any:
        return self._make("Sanity Checking", leave=False)

    def init_train_tqdm(self) -> Any:
        return self._make("Training", leave=True, smoothing=0)

    def init_validation_tqdm(self) -> Any:
        in_fit = self.trainer is not None and self.trainer.state.fn != "validate"
        return self._make("Validation", leave=not in_fit, line=int(in_fit))

    def init_test_tqdm(self) -> Any:
        return self._make("Testing", leave=True)

    def init_predict_tqdm(self) -> Any:
        return self._make("Predicting", leave=True, smoothing=0)

    @property
    def total_train_batches(self) -> int | float:
        return self.train_total(self.trainer)

    @property
    def total_val_batches(self) -> int | float:
        """The validation batches of all loaders; in a fit, 0 in an epoch that does not validate
        (``check_val_every_n_epoch``)."""
        trainer = self.trainer
        counts = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
        every = trainer.check_val_every_n_epoch
        if not trainer.sanity_checking and trainer.state.fn == "fit" and every and (trainer.current_epoch + 1) % every:
            return 0
        return sum(counts) if isinstance(counts, (list, tuple)) else counts

    def _restart(self, bar: Any, total: Any, description: str) -> None:
        bar.reset()
        bar.total = convert_inf(total)
        bar.initial = 0
        bar.set_description(description)

    def _update_bar(self, bar: Any, n: int) -> bool:
        """Show ``n`` batches done where it is due (every ``refresh_rate`` batches, and at the last); whether it was."""
        if bar is None or not self.is_enabled or not (n % self.refresh_rate == 0 or n == bar.total):
            return False
        if not bar.disable:
            bar.n = n
            bar.refresh()
        return True

    def _new_dataloader(self, index: int) -> bool:
        changed, self._dataloader = self._dataloader != index, index
        return changed

    def _close_bar(self, kind: str) -> None:
        bar = self._bars[kind]
        if bar is not None:
            bar.close()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Write a line above the bars (``tqdm.write``), or ``print`` it when no bar is drawn."""
        bar = next((b for b in self._bars.values() if b is not None and not b.disable), None)
        if bar is None:
            print(*args, **kwargs)
        else:
            sep = kwargs.pop("sep", " ")
            bar.write(sep.join(map(str, args)), **kwargs)

    # -- events (Lightning's arguments, by position) ----------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.trainer = trainer
        if not trainer.is_global_zero:
            self.disable()

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.val_progress_bar = self.init_sanity_tqdm()
        self.train_progress_bar = Tqdm(disable=True)  # no training yet: a bar that draws nothing

    def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_bar("val")
        self._close_bar("train")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.train_progress_bar = self.init_train_tqdm()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.leave:
            self.train_progress_bar = self.init_train_tqdm()
        self._restart(self.train_progress_bar, self.total_train_batches, f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self._bars["train"]
        if self._update_bar(bar, batch_idx + 1):
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
        if self.leave:
            self._close_bar("train")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_bar("train")

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.val_progress_bar = self.init_validation_tqdm()

    def _evaluation_batch_start(self, kind: str, description: str, counts: Any, index: int) -> None:
        if self._new_dataloader(index):
            self._restart(self._bars[kind], _at(counts, index), f"{description} DataLoader {index}")

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        sanity = trainer.sanity_checking
        self._evaluation_batch_start("val", "Sanity Checking" if sanity else "Validation",
                                     trainer.num_sanity_val_batches if sanity else trainer.num_val_batches,
                                     dataloader_idx)

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self._update_bar(self._bars["val"], batch_idx + 1)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_bar("val")
        self._dataloader = None
        if self._bars["train"] is not None and trainer.state.fn == "fit":
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self.test_progress_bar = self.init_test_tqdm()

    def on_test_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._evaluation_batch_start("test", "Testing", trainer.num_test_batches, dataloader_idx)

    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self._update_bar(self._bars["test"], batch_idx + 1)

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_bar("test")
        self._dataloader = None

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self.predict_progress_bar = self.init_predict_tqdm()

    def on_predict_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        self._evaluation_batch_start("predict", "Predicting", trainer.num_predict_batches, dataloader_idx)

    def on_predict_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        self._update_bar(self._bars["predict"], batch_idx + 1)

    def on_predict_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_bar("predict")
        self._dataloader = None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        for kind in _KINDS:
            self._close_bar(kind)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._dataloader = None


# the other events as no-ops (never registered), so that a subclass's override may call super() as in Lightning
add_base_hooks(TQDMProgressBar, sorted(EVENT_HOOKS - {"prepare_data", "configure_model"}))
