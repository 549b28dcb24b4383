"""When a fit asks for its loaders, and what the evaluation loop checks of them: as in Lightning 2.6.

Lightning calls ``configure_optimizers`` before any ``*_dataloader()``; it asks for the validation loaders when
validation first runs (the sanity check, or before ``on_train_start`` when the first epoch validates) and for the
training loader when training starts (or earlier, when ``estimated_stepping_batches`` needs its length); with
``reload_dataloaders_every_n_epochs`` each is asked for again when that many epochs have passed since it was
last read, the validation loaders only in an epoch that validates.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.core.errors import StepSignatureError
from ember.lightning.pytorch.utilities import CombinedLoader
from ember.lightning.pytorch.utilities.model_helpers import is_overridden

QUIET = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
             enable_model_summary=False)


def loader(batches: int, seed: int = 0) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(2 * batches, 4, generator=g),
                                    torch.randint(0, 2, (2 * batches,), generator=g)), batch_size=2)


class Recorded(ember.Module):
    def __init__(self, calls: list[Any], estimate: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.calls, self.estimate = calls, estimate

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.calls.append(("validation_step", self.current_epoch, self.trainer.sanity_checking))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        self.calls.append("configure_optimizers")
        if self.estimate:
            self.calls.append(("estimated_stepping_batches", self.trainer.estimated_stepping_batches))
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        self.calls.append(("train_dataloader", self.current_epoch))
        return loader(3)

    def val_dataloader(self) -> DataLoader:
        self.calls.append(("val_dataloader", self.current_epoch, self.trainer.sanity_checking))
        return loader(2, seed=1)


class Events(ember.Callback):
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        self.calls.append("on_fit_start")

    def on_sanity_check_start(self, trainer: Any, module: Any) -> None:
        self.calls.append("on_sanity_check_start")

    def on_sanity_check_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("on_sanity_check_end")

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.calls.append("on_train_start")


def fit(estimate: bool = False, **kwargs: Any) -> list[Any]:
    calls: list[Any] = []
    trainer = ember.Trainer(**{**QUIET, "max_epochs": 1, **kwargs}, callbacks=[Events(calls)])
    trainer.fit(Recorded(calls, estimate))
    return [c for c in calls if c[0] != "validation_step"]


def test_optimizers_first_then_validation_loaders_in_the_sanity_check_then_the_training_loader() -> None:
    assert fit(num_sanity_val_steps=1) == [
        "configure_optimizers", "on_fit_start", "on_sanity_check_start", ("val_dataloader", 0, True),
        "on_sanity_check_end", ("train_dataloader", 0), "on_train_start"]


def test_without_a_sanity_check_the_validation_loaders_are_read_before_training_starts() -> None:
    assert fit(num_sanity_val_steps=0) == [
        "configure_optimizers", "on_fit_start", ("train_dataloader", 0), ("val_dataloader", 0, False),
        "on_train_start"]
    # the first epoch does not validate: its loaders are asked for when validation first runs (epoch 1)
    assert fit(num_sanity_val_steps=0, max_epochs=2, check_val_every_n_epoch=2) == [
        "configure_optimizers", "on_fit_start", ("train_dataloader", 0), "on_train_start",
        ("val_dataloader", 1, False)]


def test_no_validation_loader_is_asked_for_under_limit_val_batches_zero() -> None:
    assert fit(num_sanity_val_steps=2, limit_val_batches=0) == [
        "configure_optimizers", "on_fit_start", ("train_dataloader", 0), "on_train_start"]


def test_estimated_stepping_batches_in_configure_optimizers_reads_the_training_loader_once() -> None:
    assert fit(estimate=True, num_sanity_val_steps=0, max_epochs=2) == [
        "configure_optimizers", ("train_dataloader", 0), ("estimated_stepping_batches", 6), "on_fit_start",
        ("val_dataloader", 0, False), "on_train_start"]


@pytest.mark.parametrize(("sanity", "every_val", "reload", "train", "val", "steps"), [
    (0, 3, 4, [0, 4, 8], [2, 8], [2, 5, 8]),
    (1, 3, 4, [0, 4, 8], [2, 8], [2, 5, 8]),    # the sanity check's reading does not count: epoch 0 validates not
    (1, 1, 2, [0, 2, 4, 6, 8], [2, 4, 6, 8], list(range(10))),  # it counts: epoch 0 validates
    (0, 2, 1, list(range(10)), [1, 3, 5, 7, 9], [1, 3, 5, 7, 9]),
])
def test_reloads_follow_the_epochs_that_validate(sanity: int, every_val: int, reload: int, train: list[int],
                                                 val: list[int], steps: list[int]) -> None:
    calls: list[Any] = []
    trainer = ember.Trainer(**QUIET, max_epochs=10, limit_train_batches=1, limit_val_batches=1,
                            num_sanity_val_steps=sanity, check_val_every_n_epoch=every_val,
                            reload_dataloaders_every_n_epochs=reload)
    trainer.fit(Recorded(calls))
    assert [c[1] for c in calls if c[0] == "train_dataloader"] == train
    assert [c[1] for c in calls if c[0] == "val_dataloader" and not c[2]] == val
    assert [c[1] for c in calls if c[0] == "validation_step" and not c[2]] == steps
    assert [c[1] for c in calls if c[0] == "val_dataloader" and c[2]] == ([0] if sanity else [])


def test_a_list_of_numbers_is_one_iterable_of_a_combined_loader() -> None:
    seen: list[Any] = []

    class Model(Recorded):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            seen.append(batch)

    combined = CombinedLoader({"a": [0, 1, 2], "b": [3, 4]}, "max_size")
    assert len(combined.flattened) == 2
    ember.Trainer(**QUIET).validate(Model([]), combined, verbose=False)
    assert seen == [{"a": 0, "b": 3}, {"a": 1, "b": 4}, {"a": 2, "b": None}]


def test_a_step_must_fit_the_number_of_loaders() -> None:
    class RequiresIndex(Recorded):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
            pass

    trainer = ember.Trainer(**QUIET)
    with pytest.raises(RuntimeError, match="have included `dataloader_idx` in `RequiresIndex.validation_step"):
        trainer.validate(RequiresIndex([]), loader(2), verbose=False)
    # with two loaders the index is passed
    trainer.validate(RequiresIndex([]), [loader(2), loader(2)], verbose=False)

    class NoIndex(Recorded):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            pass

    with pytest.raises(StepSignatureError, match="no `dataloader_idx` argument in `NoIndex.validation_step"):
        trainer.validate(NoIndex([]), [loader(2), loader(2)], verbose=False)

    class TakesRest(Recorded):
        def validation_step(self, batch: Any, batch_idx: int, *rest: Any) -> None:
            pass

    trainer.validate(TakesRest([]), [loader(2), loader(2)], verbose=False)


def test_is_overridden_is_false_for_a_hook_switched_off_on_the_instance() -> None:
    class Model(Recorded):
        def on_validation_model_train(self) -> None:
            pass

    model = Model([])
    assert is_overridden("on_validation_model_train", model)
    model.on_validation_model_train = None  # type: ignore[method-assign,assignment]
    assert not is_overridden("on_validation_model_train", model)


def test_a_collection_of_training_loaders_gives_their_batches_together() -> None:
    seen: list[Any] = []

    class Model(Recorded):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.append((batch_idx, sorted(batch), len(batch["b"])))
            return super().training_step(batch["a"][0], batch_idx)

    a, b = [loader(3), loader(1)], [loader(2), loader(2), loader(2)]
    trainer = ember.Trainer(**QUIET, max_epochs=1, limit_val_batches=0)
    trainer.fit(Model([]), {"a": a, "b": b})
    # the longest loader sets the length; the shorter ones start again
    assert trainer.num_training_batches == 3 and [s[0] for s in seen] == [0, 1, 2]
    assert all(keys == ["a", "b"] and n == 3 for _, keys, n in seen)
    assert trainer.train_dataloader == {"a": a, "b": b}


def test_training_loaders_one_after_another_are_refused_with_their_count() -> None:
    trainer = ember.Trainer(**QUIET, max_epochs=1)
    with pytest.raises(ValueError, match="FitLoop` does not support"):
        trainer.fit(Recorded([]), CombinedLoader([loader(3), loader(2)], "sequential"))
    assert trainer.num_training_batches == 5


class NoLength:
    """An iterable whose ``len()`` raises NotImplementedError (as some iterable wrappers do)."""

    def __init__(self, inner: DataLoader) -> None:
        self.inner = inner

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Any:
        return iter(self.inner)


def test_a_loader_whose_len_raises_not_implemented_has_no_length() -> None:
    trainer = ember.Trainer(**QUIET, max_epochs=1, limit_val_batches=0)
    trainer.fit(Recorded([]), NoLength(loader(3)))
    assert trainer.global_step == 3
    with pytest.raises(ValueError, match="`1.0` or an int"):
        ember.Trainer(**QUIET, max_epochs=1, limit_train_batches=0.5).fit(Recorded([]), NoLength(loader(3)))


def test_each_submodule_keeps_its_mode_through_training_and_evaluation() -> None:
    class Model(Recorded):
        def __init__(self) -> None:
            super().__init__([])
            self.frozen = torch.nn.Linear(2, 2).eval()
            self.modes: list[tuple[str, bool, bool]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.modes.append(("train", self.layer.training, self.frozen.training))
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.modes.append(("val", self.layer.training, self.frozen.training))

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            assert not self.layer.training
            return self.layer(batch[0])

    model = Model()
    trainer = ember.Trainer(**QUIET, max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(model)
    assert model.modes == [("val", False, False), ("train", True, False), ("val", False, False)]
    trainer.predict(model, loader(1))  # the modes are put back after predict too (Lightning 2.6)
    assert model.training and model.layer.training and not model.frozen.training


def test_loaders_evaluated_together_are_counted_each() -> None:
    class Model(Recorded):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            pass

    trainer = ember.Trainer(**QUIET)
    trainer.validate(Model([]), CombinedLoader({"a": loader(3), "b": loader(2)}, "min_size"), verbose=False)
    assert trainer.num_val_batches == [3, 2]


class EpochSampler(torch.utils.data.Sampler):
    """A sequential sampler that records the epochs it is given."""

    def __init__(self, n: int) -> None:
        self.n, self.epochs = n, []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def __iter__(self) -> Any:
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


def test_every_run_sets_the_epoch_of_its_samplers_once() -> None:
    def with_sampler(batch_sampler: bool) -> tuple[DataLoader, EpochSampler]:
        data = loader(2).dataset
        sampler = EpochSampler(len(data))
        if batch_sampler:
            return DataLoader(data, batch_sampler=torch.utils.data.BatchSampler(sampler, 2, False)), sampler
        return DataLoader(data, sampler=sampler, batch_size=2), sampler

    for batch_sampler in (False, True):
        (train, train_s), (val, val_s) = with_sampler(batch_sampler), with_sampler(batch_sampler)
        trainer = ember.Trainer(**QUIET, max_epochs=2, limit_train_batches=1, limit_val_batches=1)
        trainer.fit(Recorded([]), train, val)
        assert train_s.epochs == [0, 1]
        assert val_s.epochs == [0, 0, 1]  # the sanity check, then each epoch's validation
        trainer.validate(Recorded([]), val, verbose=False)
        assert val_s.epochs[-1] == 2
