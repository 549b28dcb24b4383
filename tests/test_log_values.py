"""What ``self.log`` records: detached step values, exact epoch reductions whatever the dtypes and shapes logged,
and values read to the host exactly."""

from __future__ import annotations

import pytest
import torch

import ember
from ember.core.loop.results import to_floats
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False,
         "enable_checkpointing": False, "num_sanity_val_steps": 0}

BIG = 2 ** 24 + 1  # an int64 that float32 cannot hold: widened first, it stays exact


class Logging(TinyClassifier):
    """Logs, per validation batch, one value of each of several kinds, and remembers what it logged."""

    def __init__(self, values: dict[str, list[torch.Tensor]]) -> None:
        super().__init__()
        self.values = values
        self.sizes: list[int] = []

    def validation_step(self, batch, batch_idx):
        self.sizes.append(len(batch[0]))
        for name, values in self.values.items():
            self.log(name, values[batch_idx % len(values)])


def weighted_mean(values: list[torch.Tensor], sizes: list[int]) -> float:
    total = sum(float(values[i % len(values)].double()) * w for i, w in enumerate(sizes))
    return total / sum(sizes)


def test_epoch_means_are_exact_over_mixed_dtypes_shapes_and_batch_sizes() -> None:
    values = {
        "same_dtype": [torch.tensor(v, dtype=torch.float32) for v in (0.1, 0.7, 2.5)],
        "ints": [torch.tensor(BIG), torch.tensor(3)],
        "int_and_float32": [torch.tensor(BIG), torch.tensor(-2.0 ** 24)],  # stacked as they are, BIG would round
        "mixed": [torch.tensor(BIG), torch.tensor(0.5, dtype=torch.float64), torch.tensor([0.25]),
                  torch.tensor(1.5, dtype=torch.float16)],
    }
    model = Logging(values)
    _, val = tiny_loaders(n=70)  # uneven batches: the mean is weighted by batch size
    trainer = ember.Trainer(**QUIET)
    trainer.validate(model, val, verbose=False)
    assert len(set(model.sizes)) > 1
    for name, logged in values.items():
        expected = torch.tensor(weighted_mean(logged, model.sizes), dtype=torch.float64).float()
        assert trainer.callback_metrics[name].item() == expected.item(), name


def test_a_mean_over_more_values_than_are_kept_unreduced_is_exact() -> None:
    values = {"many": [torch.tensor(BIG), torch.tensor(0.5, dtype=torch.float64)]}
    model = Logging(values)
    data = torch.utils.data.TensorDataset(torch.randn(600, 8), torch.zeros(600, dtype=torch.long))
    trainer = ember.Trainer(**QUIET)
    trainer.validate(model, torch.utils.data.DataLoader(data, batch_size=1), verbose=False)  # 600 values
    expected = torch.tensor(weighted_mean(values["many"], model.sizes), dtype=torch.float64).float()
    assert trainer.callback_metrics["many"].item() == expected.item()


def test_a_logged_tensor_is_detached_and_keeps_its_value() -> None:
    seen: list[tuple[float, float]] = []

    class StepLogging(TinyClassifier):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            plain = torch.tensor(float(batch_idx))
            self.log("the_loss", loss)
            self.log("plain", plain)
            self.log("one_element", loss.reshape(1))
            seen.append((loss.item(), plain.item()))
            return loss

    trainer = ember.Trainer(max_epochs=1, **QUIET)
    trainer.fit(StepLogging(), tiny_loaders()[0])
    metrics = trainer.callback_metrics
    assert not metrics["the_loss"].requires_grad and not metrics["one_element"].requires_grad
    assert (metrics["the_loss"].item(), metrics["plain"].item()) == seen[-1]
    assert metrics["one_element"].item() == seen[-1][0]


@pytest.mark.parametrize("values", [
    {"a": torch.tensor(0.1), "b": torch.tensor(2.5)},  # float32 scalars: the usual case
    {"a": torch.tensor(0.1, dtype=torch.float64), "b": torch.tensor(0.1)},
    {"a": torch.tensor(2 ** 53 - 1), "b": torch.tensor([0.3]), "c": 1.5},
    {"a": torch.tensor(0.3)},
])
def test_values_are_read_to_the_host_exactly_as_floats(values: dict) -> None:
    floats = to_floats(values)
    assert list(floats) == list(values)
    for name, value in values.items():
        expected = float(value.double()) if isinstance(value, torch.Tensor) else float(value)
        assert type(floats[name]) is float and floats[name] == expected, name
