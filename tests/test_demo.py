"""The built-in demo, as the README runs it: accuracy, logs, curves."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("sklearn")


@pytest.mark.slow
def test_demo_reaches_95_percent_and_writes_logs_and_curves(tmp_path, capsys):
    from ember.cli import main

    start = time.perf_counter()
    assert main(["demo", "--default-root-dir", str(tmp_path)]) == 0
    elapsed = time.perf_counter() - start
    out = capsys.readouterr().out
    accuracy = float(out.strip().splitlines()[-1].split(":")[1])
    assert accuracy >= 0.95, out
    log_dir = tmp_path / "demo" / "version_0"
    assert {"metrics.csv", "hparams.yaml", "curves.png"} <= set(os.listdir(log_dir))
    assert (log_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"training curves: {log_dir / 'curves.png'}" in out
    assert "Epoch 30/30" in out and "Total params" in out  # progress lines and the model summary
    print(f"demo: accuracy {accuracy:.4f} in {elapsed:.1f}s")


def test_demo_without_matplotlib_says_so(tmp_path, monkeypatch, capsys):
    import builtins

    from ember.demo import save_curves

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    (tmp_path / "metrics.csv").write_text("epoch,step,train_loss\n0,1,0.5\n")
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert save_curves(str(tmp_path / "metrics.csv"), str(tmp_path / "c.png")) is None
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert not (tmp_path / "c.png").exists()
