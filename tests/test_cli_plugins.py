"""``ember plugins`` and ``ember hooks``."""

from __future__ import annotations

import json

import pytest

import ember
from ember.cli import main
from ember.hookspecs.reference import specs

GOOD = '''
import ember

class Good:
    @ember.hookimpl(tryfirst=True)
    def on_train_start(self):
        pass

    @ember.hookimpl(wrapper=True)
    def backward(self):
        return (yield)

class FastPrecision:
    role = "precision"

    @ember.hookimpl(wrapper=True)
    def step(self):
        return (yield)

class BadArgument:
    @ember.hookimpl
    def on_train_start(self, nope):
        pass
'''


@pytest.fixture
def installed(ember_distribution) -> None:
    ember_distribution("thirdparty", "1.2.3", modules={"thirdparty_plugins.py": GOOD}, entry_points={
        "ember.autoload": {"callback.good": "thirdparty_plugins:Good",
                           "callback.missing": "thirdparty_missing:Nope",
                           "callback.bad-arg": "thirdparty_plugins:BadArgument"},
        "ember.plugins": {"precision.fast": "thirdparty_plugins:FastPrecision",
                          "callback.twice": "thirdparty_plugins:Good"},
    })
    ember_distribution("other", "0.1", entry_points={"ember.plugins": {"callback.twice": "thirdparty_plugins:Good",
                                                                       "Bad Identity": "thirdparty_plugins:Good"}})


def _json(capsys, *args: str) -> dict:
    assert main(["plugins", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _rows(capsys, *args: str) -> dict[str, dict]:
    return {row["identity"]: row for row in _json(capsys, *args)["plugins"]}


def test_every_status(installed, capsys) -> None:
    rows = _rows(capsys)
    good = rows["callback.good"]
    assert (good["status"], good["group"], good["distribution"], good["version"]) == (
        "active", "autoload", "thirdparty", "1.2.3")
    assert good["hooks"] == [
        {"name": "backward", "wrapper": True, "tryfirst": False, "trylast": False},
        {"name": "on_train_start", "wrapper": False, "tryfirst": True, "trylast": False},
    ]
    assert rows["callback.missing"]["status"] == "broken"
    assert "ModuleNotFoundError" in rows["callback.missing"]["detail"]
    assert rows["callback.bad-arg"]["status"] == "broken"
    assert "invalid hook implementation" in rows["callback.bad-arg"]["detail"]
    twice = rows["callback.twice"]
    assert twice["status"] == "conflict" and twice["distribution"] == "other 0.1, thirdparty 1.2.3"
    assert rows["precision.fast"]["status"] == "available" and rows["precision.fast"]["role"] == "precision"
    assert rows["precision.32-true"]["status"] == "active"
    # accelerator="auto": the GPU where there is one
    assert rows["accelerator.cpu"]["status"] == ("available" if _cuda() else "active")
    assert rows["accelerator.cuda"]["status"] == ("active" if _cuda() else "unavailable")
    assert rows["progress.tqdm"]["status"] == "active" and rows["progress.tqdm"]["detail"] == "on by default"
    assert rows["progress.rich"]["status"] == "available"
    # A selectable plugin whose class needs arguments is listed with its hooks, not as broken.
    stopping = rows["callback.early-stopping"]
    assert stopping["status"] == "available" and "configure it before use" in stopping["detail"]
    assert "on_train_epoch_end" in {h["name"] for h in stopping["hooks"]}
    assert rows["core.defaults"]["status"] == "active" and rows["core.defaults"]["group"] == "built-in"
    assert rows["core.defaults"]["version"] == ember.__version__
    invalid = _json(capsys)["invalid"]
    assert len(invalid) == 1 and "'Bad Identity'" in invalid[0] and "other 0.1" in invalid[0]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_selection_and_blocking_change_the_status(installed, capsys, monkeypatch) -> None:
    rows = _rows(capsys, "--precision", "fast", "--block", "callback.good")
    assert rows["precision.fast"]["status"] == "active" and rows["precision.32-true"]["status"] == "available"
    assert rows["callback.good"]["status"] == "blocked"
    monkeypatch.setenv("EMBER_BLOCK_PLUGINS", "precision.fast")
    assert _rows(capsys)["precision.fast"]["status"] == "blocked"
    monkeypatch.setenv("EMBER_DISABLE_PLUGIN_AUTOLOAD", "1")
    rows = _rows(capsys)
    assert rows["callback.good"]["status"] == "blocked" and "autoloading is off" in rows["callback.good"]["detail"]


def test_an_unresolvable_selection_is_reported_not_raised(installed, capsys) -> None:
    rows = _rows(capsys, "--precision", "no-such-precision")
    assert rows["precision.32-true"]["status"] == "available"
    assert "unknown precision 'no-such-precision'" in rows["precision.32-true"]["detail"]


def test_role_filter_and_text_table(installed, capsys) -> None:
    assert main(["plugins", "--role", "precision"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["IDENTITY", "STATUS", "DISTRIBUTION", "HOOKS"]
    fast = next(line for line in lines if line.startswith("precision.fast"))
    assert fast.split()[:4] == ["precision.fast", "available", "thirdparty", "1.2.3"]
    assert fast.endswith("step[wrapper]")
    assert not any(line.startswith(("callback.", "accelerator.")) for line in lines)

    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "callback.missing: plugin 'callback.missing' (from thirdparty 1.2.3" in out
    assert "callback.twice: plugin identity 'callback.twice' is claimed by several distributions" in out
    assert "invalid entry point: invalid plugin identity 'Bad Identity'" in out


def test_hooks_lists_every_spec_with_its_signature(capsys) -> None:
    assert main(["hooks"]) == 0
    out = capsys.readouterr().out
    all_specs = specs()
    for spec in all_specs:
        assert f"  {spec.typed_signature}" in out, spec.name
    assert "on_train_batch_start(trainer: TrainerLike, module: Any, batch: Any, batch_idx: int) -> int | None" in out
    assert out.index("Event hooks:") < out.index("Role hooks:") < out.index("Configuration hooks:")
    assert "step(trainer: TrainerLike, model: Any, module: Any, batch: Any, batch_idx: int, dataloader_idx: int, " \
           "stage: str) -> Any  [firstresult]" in out


def test_hooks_full_text_json_and_family(capsys) -> None:
    assert main(["hooks", "backward"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("backward(trainer: TrainerLike, loss: torch.Tensor, optimizer: torch.optim.Optimizer | None)")
    assert ":param loss: the loss, divided by ``accumulate_grad_batches``." in out

    assert main(["hooks", "--json", "--family", "configuration"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == ["configure", "add_options"]
    assert data[0]["params"] == [{"name": "trainer", "annotation": "TrainerLike", "doc": "the trainer."}]

    assert main(["hooks", "on_fit_strat"]) == 2
    assert "Did you mean 'on_fit_start'?" in capsys.readouterr().err


def test_a_mistyped_role_or_option_is_an_error_with_a_suggestion(capsys) -> None:
    assert main(["plugins", "--role", "precison"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ember plugins: error: --role: no plugin has the role 'precison'. Did you mean "
                          "'precision'?") and err.count("\n") == 1
    assert main(["plugins", "--rol", "precision"]) == 2
    assert "unknown option '--rol'. Did you mean '--role'?" in capsys.readouterr().err
    assert main(["hooks", "--family", "evnt"]) == 2
    assert "--family: invalid choice 'evnt'. Did you mean 'event'?" in capsys.readouterr().err


@pytest.mark.slow
def test_listing_every_plugin_imports_no_optional_client() -> None:
    """``ember plugins`` asks each plugin whether it is available; that is answered without importing MLflow, W&B,
    TensorBoard, rich or torch's FSDP (seconds each), all installed in the test environment."""
    import subprocess
    import sys

    probe = ("import contextlib, io, json, sys\n"
             "from ember.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
             "    assert main(['plugins', '--json']) == 0\n"
             "rows = {r['identity']: r['status'] for r in json.loads(out.getvalue())['plugins']}\n"
             "heavy = ['mlflow', 'wandb', 'tensorboard', 'rich', 'torch.distributed.fsdp']\n"
             "print(json.dumps({'rows': rows, 'imported': [m for m in heavy if m in sys.modules]}))\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["imported"] == []
    for identity in ["logger.mlflow", "logger.wandb", "logger.tensorboard", "progress.rich", "strategy.fsdp"]:
        assert found["rows"][identity] in {"available", "active"}, identity  # not "unavailable"


def test_an_optional_package_that_is_missing_is_named_with_its_install_command() -> None:
    from ember.core.errors import ConfigurationError
    from ember.plugins._shared import packages

    packages.require("json", "logger 'x'", "x")  # installed: nothing to say
    with pytest.raises(ConfigurationError, match=r"^logger 'x' needs the no_such_pkg package: "
                                                 r"pip install 'ember\[x\]' \(or choose logger='csv'\)\.$"):
        packages.require("no_such_pkg", "logger 'x'", "x", alternative="logger='csv'")
