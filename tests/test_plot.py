"""`ember plot` and ember.plot: a real CSV logger run drawn to a PNG; what goes in which panel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import ember
from ember.cli import main
from ember.core.errors import ConfigurationError
from ember.plot import _panel, find_metrics, read_metrics, save_curves
from ember.plugins.callbacks.lr_monitor import LearningRateMonitor
from ember.plugins.loggers.csv_logger import CSVLogger
from ember.testing import TinyClassifier, tiny_dataset

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    ember.seed_everything(0)
    trainer = ember.Trainer(max_epochs=2, accelerator="cpu", default_root_dir=str(tmp_path),
                            logger=CSVLogger(save_dir=str(tmp_path)), callbacks=[LearningRateMonitor("step")],
                            log_every_n_steps=1, enable_progress_bar=False, enable_model_summary=False,
                            enable_checkpointing=False, num_sanity_val_steps=0)
    trainer.fit(TinyClassifier(), DataLoader(tiny_dataset(32), batch_size=8), DataLoader(tiny_dataset(16), batch_size=8))
    return Path(trainer.logger.metrics_path).parent


def test_ember_plot_draws_the_run(run_dir: Path, capsys: pytest.CaptureFixture) -> None:
    series = read_metrics(run_dir / "metrics.csv")
    assert {"train_loss", "val_loss", "val_acc", "lr-SGD"} <= set(series)
    assert main(["plot", str(run_dir)]) == 0
    png = run_dir / "curves.png"
    assert capsys.readouterr().out.strip() == str(png)
    assert png.read_bytes()[:8] == PNG


def test_panels_and_image_size(run_dir: Path, tmp_path: Path) -> None:
    assert [_panel(n) for n in ("train_loss", "val_loss", "val_acc", "lr-SGD", "lr-Adam/pg1")] == \
        ["loss", "loss", "metrics", "learning rate", "learning rate"]
    out = save_curves(run_dir / "metrics.csv", tmp_path / "three.png")
    from matplotlib.image import imread

    height, width = imread(out).shape[:2]
    assert width == 3 * height * 5 // 4  # three panels of 5 x 4 inches: loss, metrics, learning rate


def test_finds_the_newest_metrics_below_a_root(run_dir: Path, tmp_path: Path) -> None:
    assert find_metrics(tmp_path) == str(run_dir / "metrics.csv")
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "x.png")]) == 0
    assert (tmp_path / "x.png").read_bytes()[:8] == PNG


def test_no_metrics_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ConfigurationError, match="no metrics.csv"):
        find_metrics(tmp_path)
    assert main(["plot", str(tmp_path)]) == 2
    assert "no metrics.csv" in capsys.readouterr().err


def test_demo_reuses_the_plot_module() -> None:
    import ember.demo
    import ember.plot

    assert ember.demo.save_curves is ember.plot.save_curves
    assert re.search(r"def save_curves", Path(ember.demo.__file__).read_text()) is None


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "logging.md"
    text = page.read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text[text.index("## Plotting a run"):], flags=re.S | re.M)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page.name} (plot block {i + 1})", "exec"), {"__name__": "plot_doc"})
    assert list(tmp_path.glob("**/curves.png"))
