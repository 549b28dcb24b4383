"""``strategy.fsdp``: fully sharded data parallel with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each rank keeps a shard of every parameter, gradient and optimizer state; a sharded module all-gathers its
parameters for its forward and backward and frees them after. What gets sharded:

* the modules the user shards in ``configure_model`` (calling ``fully_shard`` themselves) are left as they are;
* otherwise every module picked by ``shard_modules`` (a set of module classes, or a predicate on the module;
  default: the items of every ``nn.ModuleList``, the usual container of a model's repeated blocks);
* and always the root module, whose ``training_step``/``validation_step``/``test_step``/``predict_step`` are
  registered as forward methods so that its parameters are gathered for them.

Too large to build on one device: layers created in ``configure_model`` are created on the meta device (no
memory), sharded, then allocated shard by shard on the run's device and initialised with their
``reset_parameters()`` (each rank's shard from its own random stream). Mixed precision follows the
Trainer's precision: ``bf16-mixed`` computes with bfloat16 parameters and reduces gradients in float32
(``MixedPrecisionPolicy``), ``16-mixed`` likewise with float16; pass ``mixed_precision=`` to choose.

Checkpoints are sharded (:mod:`ember.plugins.strategies.sharded_checkpoint`): every rank writes its shards
with ``torch.distributed.checkpoint``; ``ember consolidate`` turns one into a single file.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.core.hooks.defaults import STEP_METHODS
from ember.core.hooks.plugin_manager import EmberWarning
from ember.core.hooks.positional import defines
from ember.hookspecs import hookimpl
from ember.plugins.strategies import sharded_checkpoint
from ember.plugins.strategies.distributed import ProcessGroupStrategy, accumulating, hold


def in_module_list(module: torch.nn.Module, parent: torch.nn.Module | None) -> bool:
    """The default sharding policy: the items of an ``nn.ModuleList`` (a model's repeated blocks)."""
    return isinstance(parent, torch.nn.ModuleList)


def _own_tensors(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    yield from module.parameters(recurse=False)
    yield from module.buffers(recurse=False)


def _is_meta(t: torch.Tensor) -> bool:
    local = t.to_local() if hasattr(t, "to_local") else t
    return t.is_meta or local.is_meta


def device_unsupported(device_type: str) -> str | None:
    """Why this torch's FSDP2 cannot shard on ``device_type``, or None. On the CPU it records events on the CPU
    stream, which torch.cpu.Stream can do from torch 2.7 (2.6's fails in its first all-gather)."""
    if device_type == "cpu" and not callable(getattr(torch.cpu.Stream, "record_event", None)):
        return (f"strategy='fsdp' on the CPU needs torch >= 2.7 (torch {torch.__version__}'s FSDP2 records events on "
                "the CPU stream, which it cannot do); use accelerator='cuda', strategy='ddp', or a newer torch.")
    return None


def mean_unsupported() -> str | None:
    """Why the default process group cannot average FSDP's gradients, or None: a probe of gloo's
    ``reduce_scatter`` with ``ReduceOp.AVG``, which torch 2.7 and 2.8 sum instead (2.9 averages). A collective:
    every process calls it, with the same answer."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() < 2 or dist.get_backend() != "gloo":
        return None
    n = dist.get_world_size()
    out = torch.empty(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # its newer name is not in every torch of the range
        dist.reduce_scatter_tensor(out, torch.ones(n), op=dist.ReduceOp.AVG)
    if out.item() == 1.0:
        return None
    return (f"strategy='fsdp' over gloo needs a torch whose gloo averages gradients: torch {torch.__version__}'s "
            f"reduce_scatter with ReduceOp.AVG sums (the mean of {n} ones came out as {out.item():g}), so FSDP would "
            f"train with {n} times the gradients. Use torch >= 2.9 (whose gloo averages), accelerator='cuda' (NCCL), "
            "or strategy='ddp'.")


class _CheckpointGroup:
    """The process group of background saves' collectives, and the default group it was made in."""

    def __init__(self) -> None:
        self.world: Any = None
        self.group: Any = None


_CHECKPOINT_GROUP = _CheckpointGroup()


class FSDPStrategy(ProcessGroupStrategy):
    """``FSDPStrategy(shard_modules=None, reshard_after_forward=True, mixed_precision=None, cpu_offload=False,
    meta_init=True, **process_group_options)``; see the module docstring."""

    identity = "strategy.fsdp"

    def __init__(self, *, shard_modules: Iterable[type] | Callable[..., bool] | None = None,
                 reshard_after_forward: bool | int = True, mixed_precision: Any = None, cpu_offload: bool = False,
                 meta_init: bool = True, process_group_backend: str | None = None, timeout: Any = None,
                 distributed_sampler: bool = True, kill_timeout: float | None = None) -> None:
        base: dict[str, Any] = {"process_group_backend": process_group_backend, "distributed_sampler": distributed_sampler,
                                "kill_timeout": kill_timeout}
        if timeout is not None:
            base["timeout"] = timeout
        super().__init__(**base)
        if shard_modules is None or callable(shard_modules) and not isinstance(shard_modules, type):
            self._policy = shard_modules or in_module_list
        else:
            classes = tuple(shard_modules) if not isinstance(shard_modules, type) else (shard_modules,)
            if not all(isinstance(c, type) and issubclass(c, torch.nn.Module) for c in classes):
                raise ConfigurationError(f"FSDPStrategy(shard_modules={shard_modules!r}): expected nn.Module classes or a "
                                         "function (module, parent) -> bool.")
            self._policy = lambda module, parent: isinstance(module, classes)
        self.reshard_after_forward = reshard_after_forward
        self.mixed_precision = mixed_precision
        self.cpu_offload = cpu_offload
        self.meta_init = meta_init
        self._mesh: Any = None

    @staticmethod
    def check_available(config: Any) -> None:
        ProcessGroupStrategy.check_available(config)
        # fully_shard is public in torch.distributed.fsdp from torch 2.6; the version says so without importing FSDP,
        # which takes seconds (``ember plugins`` asks every plugin)
        if torch.torch_version.TorchVersion(torch.__version__) < "2.6":
            raise ConfigurationError(f"strategy='fsdp' needs torch.distributed.fsdp.fully_shard, which torch "
                                     f"{torch.__version__} lacks: install torch >= 2.6, or use strategy='ddp'.")

    # -- building and sharding the model ---------------------------------------------------------------------
    @hookimpl
    def model_sharded_context(self, trainer: Any) -> contextlib.AbstractContextManager | None:
        return self._built_on_meta(trainer) if self.meta_init else None

    @contextlib.contextmanager
    def _built_on_meta(self, trainer: Any) -> Generator[None, None, None]:
        with torch.device("meta"):
            yield
        module = trainer.module
        if any(_is_meta(t) for m in module.modules() for t in _own_tensors(m)):
            self.shard(trainer, module)
            self._materialize(trainer, module)

    def _materialize(self, trainer: Any, module: torch.nn.Module) -> None:
        targets = [m for m in module.modules() if any(_is_meta(t) for t in _own_tensors(m))]
        lacking = sorted({type(m).__name__ for m in targets if not callable(getattr(m, "reset_parameters", None))})
        if lacking:
            raise ConfigurationError(
                f"configure_model built {', '.join(lacking)} on the meta device, and FSDPStrategy cannot initialise them "
                "after sharding because they have no reset_parameters(). Add reset_parameters() to them, or pass "
                "FSDPStrategy(meta_init=False) to build the model in memory.")
        device = trainer.root_device
        with contextlib.ExitStack() as stack:
            if device.type == "cpu":
                # torch's sharded random generator offsets each shard's stream on accelerators, not on the CPU,
                # where every rank would draw the same numbers for its shard. Every rank holds the same random
                # state here: draw a common base, then give each rank its own stream (the global state is
                # put back afterwards).
                base = int(torch.randint(0, 2**62, (1,)).item())
                stack.enter_context(torch.random.fork_rng(devices=[]))
                stack.enter_context(warnings.catch_warnings())
                warnings.filterwarnings("ignore", message=".*DTensor random operators.*")
                torch.manual_seed(base + trainer.global_rank)
            for m in targets:
                m.to_empty(device=device, recurse=False)
                with torch.no_grad():
                    m.reset_parameters()  # type: ignore[operator]

    @hookimpl(wrapper=True)
    def convert_module(self, trainer: Any, module: torch.nn.Module) -> Generator[None, Any, Any]:
        converted = yield  # the precision converts the full module first (e.g. to bfloat16 under bf16-true)
        target = module if converted is None else converted
        self.shard(trainer, target)
        return target

    def _device_mesh(self, trainer: Any) -> Any:
        if self._mesh is None or self._mesh.size() != trainer.world_size:
            from torch.distributed.device_mesh import init_device_mesh

            problem = device_unsupported(trainer.root_device.type) or mean_unsupported()
            if problem:
                raise ConfigurationError(problem)
            self._checkpoint_group()  # here, on the training thread of every process: making it is a collective
            self._mesh = hold(init_device_mesh(trainer.root_device.type, (trainer.world_size,)))
        return self._mesh

    def _mp_policy(self, trainer: Any) -> Any:
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if self.mixed_precision is not None:
            return self.mixed_precision
        dtype = trainer.hook.call("mixed_precision_dtype", trainer=trainer)  # the precision's answer
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)

    def shard(self, trainer: Any, module: torch.nn.Module) -> None:
        """Apply ``fully_shard`` bottom-up to the modules the policy picks, then to ``module``; idempotent."""
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard, register_fsdp_forward_method

        if not isinstance(module, FSDPModule):
            options: dict[str, Any] = {"mesh": self._device_mesh(trainer), "mp_policy": self._mp_policy(trainer),
                                       "reshard_after_forward": self.reshard_after_forward}
            if self.cpu_offload:
                options["offload_policy"] = CPUOffloadPolicy()
            parents = {id(child): parent for parent in module.modules() for child in parent.children()}
            for _, sub in reversed(list(module.named_modules())):
                if sub is not module and not isinstance(sub, FSDPModule) and self._policy(sub, parents.get(id(sub))):
                    fully_shard(hold(sub), **options)
            fully_shard(hold(module), **options)
        for name in STEP_METHODS.values():
            if defines(type(module), name) and name not in module.__dict__:
                register_fsdp_forward_method(module, name)

    # -- training --------------------------------------------------------------------------------------------
    @hookimpl(wrapper=True)
    def step(self, trainer: Any, module: Any, batch_idx: int, stage: str) -> Generator[None, Any, Any]:
        if stage == "train" and trainer.config.accumulate_grad_batches > 1 and hasattr(module, "set_requires_gradient_sync"):
            # Gradients of the micro-batches before a window's last stay unsharded and local.
            module.set_requires_gradient_sync(not accumulating(trainer, module, batch_idx))
        if stage != "train" and torch.is_inference_mode_enabled():
            # fully_shard gathers parameters into buffers it keeps and refills in place on the next forward; made
            # under inference mode (evaluation's default) they would refuse the training step's refill. So the
            # evaluation steps of a sharded model run under no_grad instead (same results, no gradients).
            with torch.inference_mode(False), torch.no_grad():
                return (yield)
        return (yield)

    # -- checkpoints -----------------------------------------------------------------------------------------
    #: Checkpoints of a fit are written in the background when the storage writes in the background
    #: (``TorchCheckpointIO(async_save=True)``, the default): at the safe point every process copies its shards
    #: to host memory (:meth:`stage_checkpoint`); the writer thread of every process then writes them with DCP,
    #: its collectives on a gloo group of their own (:meth:`_collectives`).
    async_save = True

    def stage_checkpoint(self, trainer: Any, checkpoint: dict) -> dict:
        """The checkpoint as the background write needs it: this process's shards and the rest, copied."""
        self._checkpoint_group()  # made already when the model was sharded (a new default group makes another)
        return sharded_checkpoint.take_shards(checkpoint, trainer.module, trainer.optimizers, stage=True)

    def _checkpoint_group(self) -> Any:
        """A gloo group over every process for the collectives of background saves (gloo: they run on host
        memory), one per default process group, shared by the strategies of the process. Making it is a
        collective of the default group: call it on the training thread."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return None
        held = _CHECKPOINT_GROUP
        if held.group is None or held.world is not dist.group.WORLD:
            held.world, held.group = dist.group.WORLD, dist.new_group(backend="gloo", timeout=self.timeout)
            hold(held)  # the exit handler lets go of both
        return held.group

    @staticmethod
    def _collectives(trainer: Any) -> Any:
        """The group of a save's or removal's collectives: the checkpoint group on the writer thread (made on the
        training thread before any background write of the fit), the default group elsewhere."""
        if trainer.checkpointing.writer.on_writer_thread():
            return _CHECKPOINT_GROUP.group
        return None

    @hookimpl(tryfirst=True)
    def save_checkpoint(self, trainer: Any, checkpoint: dict, path: str) -> bool:
        sharded_checkpoint.save(checkpoint, path, trainer.module, trainer.optimizers, self._collectives(trainer))
        return True

    @hookimpl(tryfirst=True)
    def load_checkpoint(self, trainer: Any, path: str, weights_only: bool) -> dict | None:
        if trainer is None or not sharded_checkpoint.is_sharded(path) and not sharded_checkpoint.is_sharded(
                str(path) + ".old"):
            return None  # a single file: the storage plugin reads it, the wrapper below shards it
        return sharded_checkpoint.load(path, trainer.module, weights_only)

    @hookimpl(wrapper=True, specname="load_checkpoint")
    def shard_whole_checkpoint(self, trainer: Any) -> Generator[None, Any, Any]:
        """A one-process (e.g. consolidated) checkpoint resumes a sharded run: its weights are sharded here,
        its optimizer states once the optimizers have loaded them (``on_fit_start``)."""
        checkpoint = yield
        if trainer is not None and isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
            checkpoint["state_dict"] = sharded_checkpoint.shard_module_state(checkpoint["state_dict"], trainer.module)
        return checkpoint

    @hookimpl
    def on_save_checkpoint(self, trainer: Any, checkpoint: dict) -> None:
        super().on_save_checkpoint(trainer, checkpoint)
        progress = checkpoint.get("loops", {}).get("fit", {})
        k, batch_idx = trainer.config.accumulate_grad_batches, progress.get("batch_idx", -1)
        if k > 1 and progress.get("phase") == "batch" and (batch_idx + 1) % k and \
                batch_idx + 1 < trainer.num_training_batches and trainer.global_rank == 0:
            warnings.warn("a checkpoint is written in the middle of a gradient-accumulation window under FSDP: the "
                          "gradients accumulated so far are held unsharded inside FSDP and are not in it, so a run "
                          "resumed from it will not match one that never stopped. Save at optimizer steps (e.g. "
                          "ModelCheckpoint(every_n_train_steps=...)) for an exact resume.", EmberWarning, stacklevel=2)

    @hookimpl(tryfirst=True)
    def on_fit_start(self, trainer: Any) -> None:
        # A resumed fit's optimizers have loaded their states whole by now (on_load_checkpoint runs earlier, before
        # configure_optimizers, as in Lightning): shard them before anything steps.
        if trainer.ckpt_path is not None:
            sharded_checkpoint.shard_optimizer_states(trainer.optimizers)

    @hookimpl(tryfirst=True)
    def remove_checkpoint(self, trainer: Any, path: str) -> Any:
        return sharded_checkpoint.remove(path, trainer.global_rank, self._collectives(trainer)) or None
