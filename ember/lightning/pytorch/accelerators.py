"""``lightning.pytorch.accelerators``'s classes as ember plugins (see :mod:`ember.lightning.seed`).

``Trainer(accelerator=CPUAccelerator())`` runs as ``accelerator="cpu"``; a subclass's ``setup_device``,
``teardown`` and ``setup`` are called where Lightning calls them, ``is_available`` when the Trainer is built and
``get_device_stats`` by ``DeviceStatsMonitor``. ``parse_devices``, ``get_parallel_devices`` and
``auto_device_count`` are there for code that calls them.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.lightning._names import unsupported
from ember.lightning.seed import SeedPlugin, add_forwarders, base_hook
from ember.plugins.accelerators.cpu import CPUAccelerator as _EmberCPU
from ember.plugins.accelerators.cuda import CUDAAccelerator as _EmberCUDA
from ember.plugins.accelerators.mps import MPSAccelerator as _EmberMPS

__all__ = ["Accelerator", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator", "XLAAccelerator",
           "find_usable_cuda_devices"]

#: The ember hooks an Accelerator answers through Lightning's methods.
THROUGH_METHODS = frozenset({"setup_device", "teardown", "configure"})


class Accelerator(SeedPlugin):
    """Lightning's ``Accelerator``. A direct subclass names no device of its own: give ``root_device`` through
    the strategy, or subclass :class:`CPUAccelerator`/:class:`CUDAAccelerator`."""


    role = "accelerator"

    def setup_device(self, device: torch.device) -> None:
        """Prepare ``device`` (once per run, before the module is moved)."""
        self.delegate("setup_device", device=device)

    @base_hook
    def setup(self, trainer: Any) -> None:
        """Called at each run's ``setup`` when a subclass overrides it."""

    @base_hook
    def teardown(self) -> None:
        """Called at the end of each run when a subclass overrides it."""

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        return {}

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return []

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True

    def check_available(self, config: Any) -> None:
        if not self.is_available():
            raise ConfigurationError(f"Trainer(accelerator={type(self).__name__}()): {type(self).__name__}."
                                     "is_available() is False here.")
        super().check_available(config)

    @hookimpl(specname="setup_device")
    def _ember_setup_device(self, device: torch.device) -> None:
        self.setup_device(device)


class CPUAccelerator(Accelerator):
    """ember's ``accelerator.cpu``."""


    plugin_class = _EmberCPU

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """The CPU's use, as Lightning's ``get_cpu_stats`` (needs ``psutil``)."""
        from ember.lightning.pytorch.callbacks.monitors import _cpu_stats

        return dict(_cpu_stats())

    @staticmethod
    def parse_devices(devices: Any) -> int:
        return int(devices) if devices not in ("auto", None) else 1

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("cpu")] * CPUAccelerator.parse_devices(devices)


class CUDAAccelerator(Accelerator):
    """ember's ``accelerator.cuda``: ``cuda:<local rank>`` (or the ``devices=[...]`` entry of the rank)."""


    plugin_class = _EmberCUDA

    def teardown(self) -> None:
        self.delegate("teardown")

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        return dict(torch.cuda.memory_stats(device))

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        if isinstance(devices, int):
            devices = list(range(devices))
        return [torch.device("cuda", i) for i in devices]

    @staticmethod
    def auto_device_count() -> int:
        return torch.cuda.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.cuda.is_available()


class MPSAccelerator(Accelerator):
    """ember's ``accelerator.mps``: Apple silicon GPUs (``mps:0``)."""


    plugin_class = _EmberMPS

    def teardown(self) -> None:
        self.delegate("teardown")

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("mps", 0)] * (devices if isinstance(devices, int) else len(devices))

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


for _cls in (CPUAccelerator, CUDAAccelerator, MPSAccelerator):
    add_forwarders(_cls, _cls.plugin_class, skip=THROUGH_METHODS)  # root_device
    _cls.stands_for = (_cls.plugin_class,)
Accelerator.stands_for = (_EmberCPU, _EmberCUDA, _EmberMPS)


def find_usable_cuda_devices(num_devices: int = -1) -> list[int]:
    """The indices of ``num_devices`` CUDA devices this process can allocate memory on (all of them for -1), for
    ``Trainer(devices=...)`` on a machine whose GPUs may be taken by other jobs (exclusive compute mode)."""
    if num_devices == 0:
        return []
    visible = torch.cuda.device_count()
    if visible == 0:
        raise ValueError(f"find_usable_cuda_devices({num_devices}): no CUDA device is visible here.")
    if num_devices > visible:
        raise ValueError(f"find_usable_cuda_devices({num_devices}): only {visible} CUDA device(s) are visible.")
    usable: list[int] = []
    for index in range(visible):
        try:
            torch.tensor(0, device=torch.device("cuda", index))
        except RuntimeError:
            continue
        usable.append(index)
        if len(usable) == num_devices:
            return usable
    if num_devices != -1:
        raise RuntimeError(f"find_usable_cuda_devices({num_devices}): only {len(usable)} of the {visible} visible CUDA "
                           f"devices accept memory ({usable}); the others are busy or in exclusive mode.")
    return usable


#: A placeholder: ember has no XLA (TPU) support. It imports, is never available, and raises when constructed.
XLAAccelerator = unsupported("XLAAccelerator", "ember has no XLAAccelerator: ember does not run on XLA/TPU devices; "
                             "use accelerator='cpu' or 'cuda'.", __name__)
XLAAccelerator.is_available = staticmethod(lambda: False)  # type: ignore[attr-defined]
XLAAccelerator.auto_device_count = staticmethod(lambda: 0)  # type: ignore[attr-defined]
