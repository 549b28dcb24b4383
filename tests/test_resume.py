"""Exact resume in-process: the data position, random state, accumulation, and what a checkpoint holds."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import ember
from ember.core.loop.resumable_data import ResumableIndexSampler, TrainData
from ember.plugins.checkpoint_io.torch_file import safe_load
from ember.testing import TinyClassifier, tiny_dataset

#: No progress bar, model summary or logger files: only what the test is about.
QUIET = {"accelerator": "cpu",
         "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False}



class Noisy(TensorDataset):
    """Random augmentation from three generators; counts loaded items."""

    def __init__(self, n: int = 40) -> None:
        super().__init__(*tiny_dataset(n)[:])
        self.loaded = 0

    def __getitem__(self, i: int) -> Any:
        self.loaded += 1
        x, y = super().__getitem__(i)
        return x + 0.1 * torch.randn_like(x) * float(np.random.rand()) * random.random(), y


class Dropout(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.net.insert(1, torch.nn.Dropout(0.5))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


class SaveAt:
    """Asks for a checkpoint at the end of the given global batch numbers (counted over epochs)."""

    def __init__(self, path: Path, at: set[int], stop_after: int | None = None) -> None:
        self.path, self.at, self.stop_after, self.seen = path, at, stop_after, 0

    def on_train_batch_end(self, trainer: Any) -> None:
        self.seen += 1
        if self.seen in self.at:
            trainer.save_checkpoint(self.path / f"b{self.seen}.ckpt")
        if self.seen == self.stop_after:
            raise RuntimeError("crash")


def loader(data: Any, **kwargs: Any) -> DataLoader:
    return DataLoader(data, batch_size=4, shuffle=True, **kwargs)


def train(tmp_path: Path, data: Any = None, plugins: tuple = (), epochs: int = 3, ckpt: str | None = None,
          make_loader: Any = loader, **kwargs: Any) -> tuple[ember.Trainer, Any, Any]:
    ember.seed_everything(7)
    model = Dropout()
    data = data if data is not None else Noisy()
    trainer = ember.Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), **QUIET,
                            enable_checkpointing=False, plugins=list(plugins), **kwargs)
    trainer.fit(model, make_loader(data), ckpt_path=ckpt)
    return trainer, model, data


def equal_states(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def optimizer_equal(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa["param_groups"] == sb["param_groups"] and all(
        equal_states(sa["state"][i], sb["state"][i]) for i in sa["state"])


@pytest.mark.parametrize("at", [3, 10, 13, 20])  # mid-epoch (10 batches per epoch), an epoch's last, ...
def test_resume_from_any_batch_is_exact_and_loads_no_consumed_item(tmp_path: Path, at: int) -> None:
    ref, ref_model, _ = train(tmp_path / "ref")
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError, match="crash"):
        train(crashed, plugins=[SaveAt(crashed, {at}, stop_after=at + 3)])
    ckpt = safe_load(str(crashed / f"b{at}.ckpt"))
    progress = ckpt["loops"]["fit"]
    if at % 10:  # written after that batch
        assert (progress["phase"], progress["epoch"], progress["batch_idx"]) == ("batch", at // 10, at % 10 - 1)
    else:  # an epoch's last batch: written once the epoch has ended
        assert (progress["phase"], progress["epoch"]) == ("epoch_start", at // 10)
    resumed, model, data = train(tmp_path / "resumed", ckpt=str(crashed / f"b{at}.ckpt"))
    assert equal_states(model.state_dict(), ref_model.state_dict())
    assert optimizer_equal(resumed.optimizers[0], ref.optimizers[0])
    assert data.loaded == 3 * 40 - at * 4  # every remaining item once, no consumed item again
    assert resumed.global_step == ref.global_step == 30


def test_accumulation_mid_window_carries_the_gradients(tmp_path: Path) -> None:
    ref, ref_model, _ = train(tmp_path / "ref", accumulate_grad_batches=3)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError):
        train(crashed, plugins=[SaveAt(crashed, {5}, stop_after=6)], accumulate_grad_batches=3)
    ckpt = safe_load(str(crashed / "b5.ckpt"))
    assert ckpt["grads"] is not None and all(g is not None for g in ckpt["grads"])  # 2 of 3 batches accumulated
    resumed, model, _ = train(tmp_path / "resumed", ckpt=str(crashed / "b5.ckpt"), accumulate_grad_batches=3)
    assert equal_states(model.state_dict(), ref_model.state_dict())
    assert optimizer_equal(resumed.optimizers[0], ref.optimizers[0])


def test_sampler_generator_and_epoch_end_resume(tmp_path: Path) -> None:
    def with_generator(data: Any) -> DataLoader:
        return DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))

    ref, ref_model, _ = train(tmp_path / "ref", make_loader=with_generator)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError):
        train(crashed, plugins=[SaveAt(crashed, {6, 10, 17}, stop_after=18)], make_loader=with_generator)
    for at in (6, 10, 17):  # 10: the epoch boundary, after the sampler's draw past the last whole batch
        _, model, _ = train(tmp_path / f"resumed{at}", ckpt=str(crashed / f"b{at}.ckpt"), make_loader=with_generator)
        assert equal_states(model.state_dict(), ref_model.state_dict())


class NumpyOrder(torch.utils.data.Sampler):
    """A sampler of one's own whose order comes from NumPy's and Python's global generators."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        order = np.random.permutation(self.n).tolist()
        random.shuffle(order)
        return iter(order)


def test_order_state_holds_numpy_and_python_only_for_samplers_that_may_draw_from_them(tmp_path: Path) -> None:
    # torch's own samplers draw from torch's generators: NumPy's and Python's states are not captured for them
    torch_only = TrainData(loader(Noisy()))
    iter(torch_only.loader).__next__()
    assert torch_only.index_sampler is not None and torch_only.index_sampler.torch_only
    assert set(torch_only.state()["order_state"]) == {"torch"}

    def numpy_loader(data: Any) -> DataLoader:
        return DataLoader(data, batch_size=4, sampler=NumpyOrder(len(data)))

    own = TrainData(numpy_loader(Noisy()))
    iter(own.loader).__next__()
    assert set(own.state()["order_state"]) >= {"torch", "numpy", "python"}
    # and a resume mid-epoch redraws that sampler's order exactly
    ref, ref_model, _ = train(tmp_path / "ref", make_loader=numpy_loader)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError):
        train(crashed, plugins=[SaveAt(crashed, {14}, stop_after=15)], make_loader=numpy_loader)
    resumed, model, data = train(tmp_path / "resumed", ckpt=str(crashed / "b14.ckpt"), make_loader=numpy_loader)
    assert equal_states(model.state_dict(), ref_model.state_dict())
    assert data.loaded == 3 * 40 - 14 * 4


def test_batch_size_none_and_epoch_metrics_survive_a_resume(tmp_path: Path) -> None:
    class Logs(Dropout):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x.unsqueeze(0)), y.unsqueeze(0))
            self.log("loss", loss, on_step=False, on_epoch=True)
            return loss

    def per_item(data: Any) -> DataLoader:
        return DataLoader(data, batch_size=None, shuffle=True)

    def run(root: Path, **kwargs: Any) -> ember.Trainer:
        ember.seed_everything(1)
        trainer = ember.Trainer(max_epochs=2, default_root_dir=str(root), **QUIET,
                                enable_checkpointing=False, **kwargs)
        trainer.fit(Logs(), per_item(Noisy(12)), ckpt_path=kwargs.pop("ckpt", None))
        return trainer

    ref = run(tmp_path / "ref")
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError):
        run(crashed, plugins=[SaveAt(crashed, {17}, stop_after=18)])
    ember.seed_everything(1)
    resumed = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **QUIET,
                            enable_checkpointing=False)
    resumed.fit(Logs(), per_item(Noisy(12)), ckpt_path=str(crashed / "b17.ckpt"))
    # The epoch mean covers the 5 batches before the checkpoint too.
    assert torch.equal(resumed.callback_metrics["loss"], ref.callback_metrics["loss"])


def test_wrapped_loader_yields_what_the_plain_loader_yields_with_the_same_random_numbers() -> None:
    data = Noisy(30)
    plain = loader(data)
    wrapped = TrainData(loader(data))
    assert isinstance(wrapped.loader.batch_sampler, ResumableIndexSampler)
    assert plain.batch_sampler is not wrapped.loader.batch_sampler and isinstance(plain.batch_sampler,
                                                                                  torch.utils.data.BatchSampler)
    for source in (plain, wrapped.loader):
        ember.seed_everything(5)
        batches = [b for _ in range(2) for b in source]
        after = torch.rand(3)
        if source is plain:
            expected, expected_after = batches, after
    assert len(batches) == len(expected) == 16
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, expected, strict=True))
    assert torch.equal(after, expected_after)
    assert len(wrapped.loader) == len(plain) == 8


def test_fit_matches_a_plain_pytorch_loop_bitwise(tmp_path: Path) -> None:
    """Making the loader resumable draws no random number: a fit equals the loop it replaces."""
    ember.seed_everything(11)
    model = Dropout()
    data = Noisy()
    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(model, loader(data))

    ember.seed_everything(11)
    plain = Dropout()
    opt = plain.configure_optimizers()
    plain_loader = loader(Noisy())
    plain.train()
    for _ in range(2):
        for x, y in plain_loader:
            loss = torch.nn.functional.cross_entropy(plain(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    assert equal_states(model.state_dict(), plain.state_dict())


def test_unsized_iterable_is_fast_forwarded_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Stream(IterableDataset):
        def __iter__(self) -> Any:
            g = torch.Generator().manual_seed(0)
            for _ in range(10):
                x = torch.randn(8, generator=g)
                yield x, (x.sum() > 0).long()

    def stream(data: Any) -> DataLoader:
        return DataLoader(Stream(), batch_size=2)

    ref, ref_model, _ = train(tmp_path / "ref", data=0, make_loader=stream, epochs=2)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError):
        train(crashed, data=0, plugins=[SaveAt(crashed, {3}, stop_after=4)], make_loader=stream, epochs=2)
    assert safe_load(str(crashed / "b3.ckpt"))["data"]["train"]["kind"] == "replay"
    _, model, _ = train(tmp_path / "resumed", data=0, make_loader=stream, epochs=2, ckpt=str(crashed / "b3.ckpt"))
    assert "drawing and discarding 3 batches" in caplog.text
    assert equal_states(model.state_dict(), ref_model.state_dict())  # no randomness in this stream: still exact


def test_stateful_loader_saves_and_loads_its_own_position(tmp_path: Path) -> None:
    class Stateful:
        """A loader that knows where it is (like torchdata's StatefulDataLoader)."""

        def __init__(self, data: Any) -> None:
            self.inner, self.start, self.position = DataLoader(data, batch_size=4), 0, 0

        def __len__(self) -> int:
            return len(self.inner)

        def __iter__(self) -> Any:
            start, self.start = self.start, 0
            return self._batches(iter(self.inner), start)  # the iterator is made at once, as a DataLoader's

        def _batches(self, it: Any, start: int) -> Any:
            for i, batch in enumerate(it):
                if i >= start:
                    self.position = i + 1
                    yield batch

        def state_dict(self) -> dict:
            return {"position": self.position}

        def load_state_dict(self, state: dict) -> None:
            self.start = state["position"]

    ref, ref_model, _ = train(tmp_path / "ref", data=tiny_dataset(40), make_loader=Stateful, epochs=2)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError):
        train(crashed, data=tiny_dataset(40), plugins=[SaveAt(crashed, {4}, stop_after=5)], make_loader=Stateful,
              epochs=2)
    assert safe_load(str(crashed / "b4.ckpt"))["data"]["train"]["loader_state"] == {"position": 4}
    _, model, _ = train(tmp_path / "resumed", data=tiny_dataset(40), make_loader=Stateful, epochs=2,
                        ckpt=str(crashed / "b4.ckpt"))
    assert equal_states(model.state_dict(), ref_model.state_dict())


def test_saves_during_training_wait_for_the_safe_point(tmp_path: Path) -> None:
    seen = {}

    class Saver:
        def on_train_batch_end(self, trainer: Any, batch_idx: int) -> None:
            if trainer.global_step == 3:
                trainer.save_checkpoint(tmp_path / "x.ckpt")
                seen["during"] = (tmp_path / "x.ckpt").exists()

        def on_validation_end(self, trainer: Any) -> None:
            seen.setdefault("validation", (tmp_path / "x.ckpt").exists())

    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET,
                            callbacks=[Saver()], val_check_interval=3, enable_checkpointing=False)
    trainer.fit(TinyClassifier(), *[DataLoader(tiny_dataset(40), batch_size=4)] * 2)
    assert seen == {"during": False, "validation": False}  # written after the batch's validation
    ckpt = safe_load(str(tmp_path / "x.ckpt"))
    assert ckpt["loops"]["fit"] == {"epoch": 0, "global_step": 3, "batches_seen": 3, "should_stop": False,
                                    "phase": "batch", "batch_idx": 2}
    assert "val_loss" in ckpt["callback_metrics"]  # the validation after batch 2 is in it
    trainer.save_checkpoint(tmp_path / "after.ckpt")  # outside the training loop: at once
    assert safe_load(str(tmp_path / "after.ckpt"))["loops"]["fit"]["phase"] == "epoch_start"


def test_checkpoint_contents_and_weights_only_export(tmp_path: Path) -> None:
    class HP(TinyClassifier):
        def __init__(self, hidden: int = 16, lr: float = 0.1, act: Any = torch.nn.ReLU) -> None:
            super().__init__(hidden=hidden, lr=lr)
            self.save_hyperparameters()

        def on_save_checkpoint(self, checkpoint: dict) -> None:
            checkpoint["module_note"] = "hello"

    model = HP(hidden=7, lr=np.float64(0.5))
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET,
                            precision="16-mixed", enable_checkpointing=False)
    trainer.fit(model, DataLoader(tiny_dataset(16), batch_size=4))
    with pytest.warns(ember.EmberWarning, match=r"hyperparameter 'act' \(type\) is not plain data"):
        trainer.save_checkpoint(tmp_path / "full.ckpt")
    trainer.save_checkpoint(tmp_path / "weights.ckpt", weights_only=True)
    full = torch.load(tmp_path / "full.ckpt", weights_only=True)
    assert full["hyper_parameters"] == {"hidden": 7, "lr": 0.5}
    assert full["module_note"] == "hello"
    assert set(full["rng"]) >= {"torch", "numpy", "python"}
    assert "scaler" in full["plugins"]["precision.16-mixed"]
    weights = torch.load(tmp_path / "weights.ckpt", weights_only=True)
    assert weights["kind"] == "weights" and "optimizer_states" not in weights and "plugins" not in weights
    loaded = HP.load_from_checkpoint(tmp_path / "weights.ckpt", lr=0.25)
    assert loaded.net[0].out_features == 7 and loaded.hparams.lr == 0.25
    assert equal_states(loaded.state_dict(), model.state_dict())
    with pytest.raises(ember.CheckpointError, match=r"weights\.ckpt holds weights only.*cannot resume a fit"):
        ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **QUIET).fit(
            HP(hidden=7), DataLoader(tiny_dataset(16), batch_size=4), ckpt_path=str(tmp_path / "weights.ckpt"))
    # as in Lightning, a keyword the class's __init__ does not take is dropped
    assert "bogus" not in HP.load_from_checkpoint(tmp_path / "weights.ckpt", bogus=1).hparams


def test_save_after_fit_includes_callback_state_and_resumes(tmp_path: Path) -> None:
    trainer, model, _ = train(tmp_path, epochs=2, data=Noisy())
    trainer.save_checkpoint(tmp_path / "end.ckpt")
    ckpt = safe_load(str(tmp_path / "end.ckpt"))
    assert ckpt["loops"]["fit"]["epoch"] == 2 and ckpt["global_step"] == 20
    more, _, _ = train(tmp_path / "more", epochs=3, ckpt=str(tmp_path / "end.ckpt"))
    assert more.global_step == 30 and more.current_epoch == 3


def test_optimizer_mismatch_fails_clearly(tmp_path: Path) -> None:
    trainer, _, _ = train(tmp_path, epochs=1)
    trainer.save_checkpoint(tmp_path / "a.ckpt")

    class TwoOpts(Dropout):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            pass

        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.1)]

    with pytest.raises(ember.CheckpointError, match=r"a\.ckpt holds 1 optimizer state\(s\), but this run has 2"):
        ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), enable_checkpointing=False, **QUIET).fit(
            TwoOpts(), loader(Noisy()), ckpt_path=str(tmp_path / "a.ckpt"))


class PerItem(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0].unsqueeze(0)).sum()


def test_set_epoch_reaches_the_sampler_in_both_loader_modes(tmp_path: Path) -> None:
    class Counting(torch.utils.data.RandomSampler):
        def __init__(self, data: Any) -> None:
            super().__init__(data)
            self.epochs: list[int] = []

        def set_epoch(self, epoch: int) -> None:
            self.epochs.append(epoch)

    for batch_size in (4, None):
        sampler = Counting(tiny_dataset(8))
        trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), enable_checkpointing=False, **QUIET)
        model = TinyClassifier() if batch_size else PerItem()
        trainer.fit(model, DataLoader(tiny_dataset(8), batch_size=batch_size, sampler=sampler))
        assert sorted(set(sampler.epochs)) == [0, 1]


class TwoOptimizers(Dropout):
    """Manual optimization with two optimizers, gradients accumulated over two batches."""

    automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        first, second = self.optimizers()
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.manual_backward(loss)
        if batch_idx % 2 == 1:
            (first if batch_idx % 4 == 1 else second).step()
            first.zero_grad()
            second.zero_grad()

    def configure_optimizers(self) -> Any:
        return [torch.optim.Adam(self.net[0].parameters(), lr=0.01), torch.optim.SGD(self.parameters(), lr=0.05)]


class Plateau(Dropout):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return [opt], [{"scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5),
                        "monitor": "loss"},
                       {"scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9), "interval": "epoch"}]


@pytest.mark.parametrize(("module", "at"), [(TwoOptimizers, 7), (Plateau, 14), (Plateau, 20)])
def test_manual_optimization_and_epoch_schedulers_resume_exactly(tmp_path: Path, module: type, at: int) -> None:
    def run(root: Path, plugins: tuple = (), ckpt: str | None = None) -> tuple[ember.Trainer, Any]:
        ember.seed_everything(2)
        model = module()
        trainer = ember.Trainer(max_epochs=3, default_root_dir=str(root), enable_checkpointing=False,
                                plugins=list(plugins), **QUIET)
        trainer.fit(model, loader(Noisy()), ckpt_path=ckpt)
        return trainer, model

    ref, ref_model = run(tmp_path / "ref")
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError):
        run(crashed, plugins=(SaveAt(crashed, {at}, stop_after=at + 1),))
    resumed, model = run(tmp_path / "resumed", ckpt=str(crashed / f"b{at}.ckpt"))
    assert equal_states(model.state_dict(), ref_model.state_dict())
    for a, b in zip(resumed.optimizers, ref.optimizers, strict=True):
        assert optimizer_equal(a, b)
    for a, b in zip(resumed.lr_scheduler_configs, ref.lr_scheduler_configs, strict=True):
        assert a.scheduler.state_dict() == b.scheduler.state_dict()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_resume_restores_the_gpu_generator(tmp_path: Path) -> None:
    """Dropout on the GPU draws from the CUDA generator: a mid-epoch resume must put it back too."""
    def run(root: Path, plugins: tuple = (), ckpt: str | None = None) -> Any:
        ember.seed_everything(4)
        model = Dropout()
        trainer = ember.Trainer(max_epochs=2, default_root_dir=str(root), enable_checkpointing=False,
                                deterministic=True, plugins=list(plugins), **dict(QUIET, accelerator="cuda"))
        trainer.fit(model, loader(tiny_dataset(40)), ckpt_path=ckpt)
        return model

    ref = run(tmp_path / "ref")
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    with pytest.raises(RuntimeError):
        run(crashed, plugins=(SaveAt(crashed, {7}, stop_after=9),))
    assert "cuda" in safe_load(str(crashed / "b7.ckpt"))["rng"]
    resumed = run(tmp_path / "resumed", ckpt=str(crashed / "b7.ckpt"))
    assert equal_states({k: v.cpu() for k, v in resumed.state_dict().items()},
                        {k: v.cpu() for k, v in ref.state_dict().items()})
