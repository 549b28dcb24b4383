"""Drawing the logged metrics of a run (``metrics.csv`` of ``logger.csv``, or the TensorBoard event files of
``logger.tensorboard``) to a PNG with matplotlib.

``ember plot <run dir>`` and the demo use :func:`save_curves`: one panel for the losses (training and
validation curves together), one for the learning rates (``lr-*`` from ``callback.lr-monitor``), one for every
other metric (accuracy, ...); the x axis is the optimizer step. Panels with nothing to show are left out.
"""

from __future__ import annotations

import csv
import glob
import os

from ember.core.errors import ConfigurationError

Series = dict[str, tuple[list[float], list[float]]]


_EVENTS = "events.out.tfevents"


def _read_events(path: str) -> Series:
    """``{metric: (steps, values)}`` from the TensorBoard event files of the folder holding ``path``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.path.dirname(path), size_guidance={"scalars": 0})  # every file, every value
    acc.Reload()
    series: Series = {}
    for tag in acc.Tags().get("scalars", []):
        if tag in ("epoch", "hp_metric"):
            continue
        events = acc.Scalars(tag)
        series[tag] = ([float(e.step) for e in events], [float(e.value) for e in events])
    return series


def read_metrics(metrics_csv: str | os.PathLike) -> Series:
    """``{metric: (steps, values)}`` from a ``metrics.csv`` (empty cells skipped), or from a TensorBoard event
    file (with the other event files beside it)."""
    if os.path.basename(os.fspath(metrics_csv)).startswith(_EVENTS):
        return _read_events(os.fspath(metrics_csv))
    series: Series = {}
    with open(metrics_csv, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for name, value in row.items():
                if name in ("epoch", "step") or value in ("", None):
                    continue
                xs, ys = series.setdefault(name, ([], []))
                xs.append(float(row["step"]))
                ys.append(float(value))
    return series


def _panel(name: str) -> str:
    lowered = name.lower()
    if lowered.startswith("lr-") or lowered in ("lr", "learning_rate"):
        return "learning rate"
    if "loss" in lowered:
        return "loss"
    return "metrics"


def save_curves(metrics_csv: str | os.PathLike, png_path: str | os.PathLike) -> str | None:
    """Draw the metrics of ``metrics_csv`` into ``png_path``. Returns the path written, or None (with the reason
    printed) when matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        print("note: no training-curve picture: matplotlib is not installed (pip install 'ember[plot]').")
        return None
    series = read_metrics(metrics_csv)
    panels: dict[str, list[str]] = {"loss": [], "metrics": [], "learning rate": []}
    for name in sorted(series):
        panels[_panel(name)].append(name)
    shown = [title for title, names in panels.items() if names] or ["loss"]
    fig = Figure(figsize=(5 * len(shown), 4), tight_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    for ax, title in zip(axes, shown, strict=True):
        for name in panels[title]:
            xs, ys = series[name]
            ax.plot(xs, ys, label=name, marker="o" if len(xs) < 60 else None, markersize=3)
        if title == "learning rate" and any(v > 0 for n in panels[title] for v in series[n][1]):
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    out = os.fspath(png_path)
    fig.savefig(out, dpi=100)
    return out


def find_metrics(run: str | os.PathLike) -> str:
    """The metrics of a run: ``run`` itself, ``run/metrics.csv`` or a TensorBoard event file in ``run``, or the
    newest of these below ``run`` (a logger's root holding ``version_N`` folders)."""
    path = os.fspath(run)
    if os.path.isfile(path):
        return path
    root = glob.escape(path)
    for pattern in ("metrics.csv", _EVENTS + "*", os.path.join("**", "metrics.csv"), os.path.join("**", _EVENTS + "*")):
        found = glob.glob(os.path.join(root, pattern), recursive=True)
        if found:
            return max(found, key=os.path.getmtime)
    raise ConfigurationError(f"no metrics.csv or TensorBoard event file in {path!r}: pass a run directory written by "
                             "the CSV or TensorBoard logger (e.g. ember_logs/version_0) or the metrics file itself.")


def plot_run(run: str | os.PathLike, output: str | os.PathLike | None = None) -> str | None:
    """Draw a run's metrics; the PNG goes to ``output`` or to ``curves.png`` beside its metrics file."""
    metrics = find_metrics(run)
    target = output if output is not None else os.path.join(os.path.dirname(metrics), "curves.png")
    return save_curves(metrics, target)
