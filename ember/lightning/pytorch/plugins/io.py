"""``lightning.pytorch.plugins.io``'s classes as ember plugins of the ``checkpoint_io`` role (see
:mod:`ember.lightning.seed`): ``Trainer(plugins=[MyCheckpointIO()])``. A subclass's ``save_checkpoint``,
``load_checkpoint`` and ``remove_checkpoint`` answer ember's hooks of those names.
"""

from __future__ import annotations

from typing import Any

from ember.hookspecs import hookimpl
from ember.lightning._names import unsupported
from ember.lightning.seed import SeedPlugin, base_hook
from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO as _EmberTorchIO

__all__ = ["AsyncCheckpointIO", "CheckpointIO", "TorchCheckpointIO", "XLACheckpointIO"]


class CheckpointIO(SeedPlugin):
    """Lightning's ``CheckpointIO``: a subclass implements ``save_checkpoint``, ``load_checkpoint`` and
    ``remove_checkpoint``. Files are read the way the subclass reads them: ember's checks (``weights_only``,
    checksums) apply to :class:`TorchCheckpointIO` only."""

    role = "checkpoint_io"
    #: Written on the training thread (ember's own storage may write in the background; see AsyncCheckpointIO).
    async_save = False

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        raise NotImplementedError(f"{type(self).__name__}.save_checkpoint")

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__}.load_checkpoint")

    def remove_checkpoint(self, path: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}.remove_checkpoint")

    @base_hook
    def teardown(self) -> None:
        """Called at the end of each run when a subclass overrides it."""

    @hookimpl(specname="save_checkpoint")
    def _ember_save_checkpoint(self, checkpoint: dict, path: str) -> bool:
        self.save_checkpoint(checkpoint, path)
        return True

    @hookimpl(specname="load_checkpoint")
    def _ember_load_checkpoint(self, path: str, weights_only: bool) -> Any:
        return self.load_checkpoint(path, weights_only=weights_only)

    @hookimpl(specname="remove_checkpoint")
    def _ember_remove_checkpoint(self, path: str) -> bool:
        self.remove_checkpoint(path)
        return True


class TorchCheckpointIO(CheckpointIO):
    """ember's ``checkpoint_io.torch``, writing on the training thread: atomic ``torch.save`` files, read with
    ``weights_only=True`` and checksums checked."""

    plugin_class = _EmberTorchIO

    def plugin_arguments(self) -> dict[str, Any]:
        return {"async_save": self.async_save}

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        self.delegate("save_checkpoint", checkpoint=checkpoint, path=str(path))

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return self.delegate("load_checkpoint", path=str(path), weights_only=weights_only is not False)  # type: ignore[no-any-return]

    def remove_checkpoint(self, path: Any) -> None:
        self.delegate("remove_checkpoint", path=str(path))

    def serialize_checkpoint(self, checkpoint: dict) -> Any:
        """The checkpoint's bytes, taken on the training thread when writes go to the background."""
        return self.plugin.serialize_checkpoint(checkpoint)


class AsyncCheckpointIO(TorchCheckpointIO):
    """``AsyncCheckpointIO()``: ember's ``checkpoint_io.torch`` writing in the background while the fit trains
    (its default). Lightning's ``checkpoint_io=`` argument (another storage to wrap) is not taken: a custom
    storage is a :class:`CheckpointIO` subclass of its own."""

    async_save = True

    def __init__(self, checkpoint_io: Any = None) -> None:
        if checkpoint_io is not None:
            raise TypeError("AsyncCheckpointIO(checkpoint_io=...): ember writes its own files in the background; "
                            "pass the custom CheckpointIO to the Trainer on its own (plugins=[...]).")


#: A placeholder: it imports and raises when constructed.
XLACheckpointIO = unsupported("XLACheckpointIO", "ember has no XLACheckpointIO: ember does not run on XLA/TPU "
                              "devices; TorchCheckpointIO writes checkpoints.", __name__)
