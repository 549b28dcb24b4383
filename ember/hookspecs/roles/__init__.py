"""Role hooks: the work of the accelerator, precision, strategy and checkpoint-storage plugins.

Each role hook is ``firstresult``: the first implementation that returns something other than None answers
it. The active plugin of the role implements it; ember's core registers a ``trylast`` fallback
(identity ``core.defaults``) that answers every role hook the plain PyTorch way, so a role plugin implements
only what it changes. Any plugin may wrap a role hook with ``@hookimpl(wrapper=True)`` to act around it
(``result = yield`` returns the answer); the 16-mixed precision, for example, wraps ``step`` in
``torch.autocast``. Wrappers nest in the order implementations run (see :mod:`ember.hookspecs.events`): the
first is the outermost.

Role hooks are not called as Lightning-style method hooks: a module or callback must mark an implementation
with ``@ember.hookimpl`` to take part.
"""

from __future__ import annotations

from ember.hookspecs.roles import compute, distributed, storage
from ember.hookspecs.roles.compute import (
    backward,
    batch_to_device,
    clip_gradients,
    convert_input,
    convert_module,
    mixed_precision_dtype,
    optimizer_step,
    root_device,
    setup_device,
    step,
    unscale_gradients,
    zero_grad,
)
from ember.hookspecs.roles.distributed import (
    all_gather,
    barrier,
    broadcast,
    distributed_info,
    launch,
    model_sharded_context,
    process_dataloader,
    reduce,
    reduce_boolean_decision,
    setup_environment,
    setup_module,
)
from ember.hookspecs.roles.storage import (
    exception_checkpoint_path,
    last_checkpoint_path,
    load_checkpoint,
    log_hyperparams,
    log_metrics,
    remove_checkpoint,
    requeue,
    save_checkpoint,
)

#: The phase modules, in the order the reference lists them.
PHASES = (compute, distributed, storage,)

__all__ = ["PHASES", "root_device", "setup_device", "batch_to_device", "convert_module", "convert_input", "mixed_precision_dtype", "step", "backward", "unscale_gradients", "clip_gradients", "optimizer_step", "zero_grad", "distributed_info", "launch", "setup_environment", "model_sharded_context", "setup_module", "process_dataloader", "reduce", "all_gather", "broadcast", "barrier", "reduce_boolean_decision", "save_checkpoint", "load_checkpoint", "remove_checkpoint", "last_checkpoint_path", "exception_checkpoint_path", "requeue", "log_metrics", "log_hyperparams"]
