"""Ember's own tests pass with a third-party plugin installed: here an always-on one that declares a Trainer
argument, takes part in every run and writes a file into the run's folder, the way a user's site-packages may
hold one. The tests that once assumed exactly ember's own plugins run in a subprocess that sees it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ember.testing import make_distribution

pytestmark = [pytest.mark.slow, pytest.mark.extended]  # runs a slice of the suite again

ROOT = Path(__file__).resolve().parents[1]

ALWAYS_ON = '''
import json
import os

import ember


class Noisy:
    identity = "callback.noisy"

    @staticmethod
    @ember.hookimpl
    def add_options(options):
        options.add("noisy_level", type="int", default=1, help="how much the noisy plugin says")

    @ember.hookimpl
    def on_fit_start(self, trainer):
        trainer.__dict__["noisy_ran"] = True

    @ember.hookimpl
    def on_fit_end(self, trainer):
        with open(os.path.join(trainer.default_root_dir, "noisy.json"), "w") as f:
            json.dump({"global_step": trainer.global_step}, f)
'''

#: The tests that broke with such a plugin installed (they expected ember's plugins alone), and the golden
#: hook-order tests.
SLICE = ["tests/test_broken_plugins.py", "tests/test_reliability_plugins.py", "tests/test_loggers.py",
         "tests/test_options.py", "tests/test_hook_order.py"]


def test_the_suite_passes_with_a_third_party_always_on_plugin(tmp_path: Path) -> None:
    site = make_distribution(tmp_path / "site", "noisy-plugin", "3.1",
                             entry_points={"ember.autoload": {"callback.noisy": "noisy_plugin:Noisy"}},
                             modules={"noisy_plugin.py": ALWAYS_ON})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([site, *filter(None, [os.environ.get("PYTHONPATH")])])
    probe = subprocess.run([sys.executable, "-c", "import ember; t = ember.Trainer(accelerator='cpu'); "
                            "print([i for i, _ in t.autoload_plugins], t.config.noisy_level)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip().splitlines()[-1] == "['callback.noisy'] 1", probe.stderr  # it is really on
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *SLICE],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
