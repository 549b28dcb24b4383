"""One evaluation loop for validation (in a fit, alone, and as the sanity check), test and predict.

Events of one run, ``<stage>`` being ``validation``, ``test`` or ``predict``::

    model.eval() -> on_<stage>_model_eval
    on_<stage>_start -> on_<stage>_epoch_start
    per loader, per batch:
        batch to device -> on_<stage>_batch_start -> <stage>_step -> on_<stage>_batch_end
    on_<stage>_epoch_end -> (epoch metrics to the loggers) -> on_<stage>_end
    each submodule back to its mode -> on_validation_model_train / on_test_model_train
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING, Any

import torch

from ember.core.hooks.defaults import check_dataloader_idx
from ember.core.loop.data import length, set_sampler_epoch
from ember.core.loop.results import Results
from ember.core.loop.state import EPOCH_HOOK, EVAL_STEP, EvalCounts

if TYPE_CHECKING:
    from ember.core.loop.parts import LoopsLike

_HOOK_STAGE = {"validate": "validation", "test": "test", "predict": "predict"}
_EVENTS = ("start", "end", "epoch_start", "epoch_end", "batch_start", "batch_end", "model_eval")  # on_<stage>_...
#: Each stage's event hooks by event: ``_EVENT_HOOKS["validate"]["start"] == "on_validation_start"``.
_EVENT_HOOKS = {stage: {k: f"on_{name}_{k}" for k in _EVENTS} for stage, name in _HOOK_STAGE.items()}


class EvaluationLoop:
    """Runs one evaluation epoch of a stage over its loaders."""

    def __init__(self, loop: LoopsLike) -> None:
        self.loop = loop
        #: The batches each evaluation loop ran, by loop: ``"fit"`` (the fit's validation and its sanity check),
        #: ``"validate"``, ``"test"``, ``"predict"`` (read by ``trainer.fit_loop`` and the other loop views).
        self.counts = {name: EvalCounts() for name in ("fit", "validate", "test", "predict")}

    def run(self, stage: str, loaders: list[Any], nums: list[float],
            predictions: list[list[Any]] | None = None) -> dict[str, torch.Tensor]:
        """Evaluate ``nums[i]`` batches of each of ``loaders``; returns the epoch metrics, left on their device
        (none for predict; :func:`by_dataloader` splits and reads them). ``predictions``: one list per loader that
        collects what ``predict_step`` returns."""
        loop, t = self.loop, self.loop.t
        h, module = t.hook, t.module
        events = {k: getattr(h, hook, None) for k, hook in _EVENT_HOOKS[stage].items()}
        check_dataloader_idx(module, stage, len(loaders))
        results = None if stage == "predict" else Results(stage)
        if stage == "validate":
            loop.val_results = results  # type: ignore[assignment]  # not None for validate
        elif stage == "test":
            loop.test_results = results  # type: ignore[assignment]
        t.state.stage = "sanity_check" if t.state.sanity_checking else stage
        ctx = loop.log_context
        ctx.enter(results, len(loaders), EPOCH_HOOK)
        model = t.model
        modes = [(m, m.training) for m in model.modules()]  # each submodule's mode, put back afterwards
        model.eval()
        if events["model_eval"] is not None:  # no self.log in the mode hooks (Lightning)
            ctx.call_refusing(_EVENT_HOOKS[stage]["model_eval"], events["model_eval"], trainer=t, module=module)
        values: dict[str, torch.Tensor] = {}
        counts = self.counts["fit" if t.state.fn == "fit" else stage]
        counts.start_run()
        with _grad_context(t.config.inference_mode):
            if events["start"] is not None:
                events["start"](trainer=t, module=module)
            if events["epoch_start"] is not None:
                events["epoch_start"](trainer=t, module=module)
            for dl_idx, (loader, n) in enumerate(zip(loaders, nums)):
                set_sampler_epoch(loader, t.current_epoch)
                if n:
                    self._batches(stage, events, dl_idx, loader, n, predictions, counts)
            ctx.batch = None
            ctx.defaults = EPOCH_HOOK
            ctx.num_dataloaders = 1  # the epoch's end is no dataloader's: no suffix (Lightning)
            if results is not None:  # before on_<stage>_epoch_end, which reads them, as in Lightning
                loop.metrics.publish_epoch(results)
            if events["epoch_end"] is not None:
                events["epoch_end"](trainer=t, module=module)  # what it logs is published as it is logged
            if results is not None:
                values = loop.metrics.epoch_results(results)
                loop.metrics.drop_step_values(results)
                if h.log_metrics is not None:  # the loggers have the epoch's values before on_<stage>_end runs
                    loop.metrics.write_epoch(results)
            if events["end"] is not None:  # nothing logged there would reach a logger: refused (Lightning)
                ctx.call_refusing(_EVENT_HOOKS[stage]["end"], events["end"], trainer=t, module=module)
        for submodule, training in modes:  # a frozen submodule stays in eval mode, as in Lightning
            submodule.training = training
        if results is None:
            return values
        if stage == "validate" and h.on_validation_model_train is not None:  # after trainer.validate() too
            ctx.call_refusing("on_validation_model_train", h.on_validation_model_train, trainer=t, module=module)
        elif stage == "test" and h.on_test_model_train is not None:
            ctx.call_refusing("on_test_model_train", h.on_test_model_train, trainer=t, module=module)
        return values

    def _batches(self, stage: str, events: dict[str, Any], dl_idx: int, loader: Any, n: float,
                 predictions: list[list[Any]] | None, counts: EvalCounts) -> None:
        loop, t = self.loop, self.loop.t
        ctx, transfer, step = loop.log_context, loop.transfer, t.hook.step
        model, module = t.model, t.module
        start, end = events["batch_start"], events["batch_end"]
        ctx.dataloader_idx = dl_idx
        limited = n < length(loader)  # else the loader ends by itself, as in a for-loop
        for batch_idx, batch in enumerate(loader):
            counts.batch_idx = batch_idx
            ctx.defaults = EVAL_STEP
            batch = transfer(batch, dl_idx)
            if start is not None:
                start(batch=batch, batch_idx=batch_idx, dataloader_idx=dl_idx, trainer=t, module=module)
            out = step(trainer=t, model=model, module=module, batch=batch, batch_idx=batch_idx,
                       dataloader_idx=dl_idx, stage=stage)
            if predictions is not None:
                predictions[dl_idx].append(out)
                if out is None:
                    warnings.warn(f"predict returned None for batch {batch_idx} (dataloader {dl_idx}): its entry in "
                                  "trainer.predict()'s outputs is None; if that is on purpose, ignore this warning.",
                                  UserWarning, stacklevel=2)
            if end is not None:
                end(outputs=out, batch=batch, batch_idx=batch_idx, dataloader_idx=dl_idx, trainer=t, module=module)
            if limited and batch_idx + 1 >= n:
                break
        counts.done, counts.batch_idx = counts.current[1] + (counts.batch_idx >= 0), -1  # this loader's batches


def by_dataloader(results: Results, values: dict[str, torch.Tensor], num_loaders: int) -> list[dict[str, float]]:
    """The epoch metrics ``values`` of an evaluation run as one dict of floats per dataloader (what ``validate``
    and ``test`` return): a name belongs to the dict of the dataloader it was logged in (suffixed, or logged with
    ``add_dataloader_idx=False``)."""
    owner = {e.epoch_key: e.dataloader_idx for e in results.entries.values() if e.dataloader_idx is not None}
    return [{k: float(v) for k, v in values.items() if owner.get(k, i) == i and
             ("/dataloader_idx_" not in k or k.endswith(f"/dataloader_idx_{i}"))} for i in range(num_loaders)]


def _grad_context(inference_mode: bool) -> contextlib.AbstractContextManager:
    return torch.inference_mode() if inference_mode and not _gloo_process_group() else torch.no_grad()


def _gloo_process_group() -> bool:
    """gloo fills a collective's output tensors outside inference mode, which torch refuses for tensors made in
    it (torchmetrics' syncs, ``sync_dist``); so under a gloo process group evaluation runs under ``no_grad``, as
    in Lightning."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo"
