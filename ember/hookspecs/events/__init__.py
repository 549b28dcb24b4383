"""Event hooks: what happened in the loop, broadcast to every registered plugin.

The names and meaning are Lightning 2.x's ``Callback`` and ``ModelHooks``. Every plugin may implement any of
them; so may the user's module, its DataModule and Lightning-style callbacks, by defining a method with the
hook's name (no marker needed for event hooks). An implementation takes any subset of the spec's arguments,
by name. The unmarked methods of an ``ember.Callback`` subclass, of the module and of its DataModule whose
parameter names are not the spec's take them by position, as Lightning passes them (without ``trainer`` and
``module`` for the module and the DataModule). Return values are ignored unless the spec says otherwise.

Order between implementations: the Trainer's ``plugins`` and then its ``callbacks``, each in the order
given, then always-on plugins by identity, then the module, the DataModule (which runs first for
``prepare_data``, ``setup`` and ``teardown``) and the role plugins; ``tryfirst``/``trylast`` move an
implementation to the front or back. The order never depends on the order packages were installed in.

One ``fit`` drives the events in this order (``*`` marks a per-micro-batch event, ``+`` a per-optimizer-step
event)::

    prepare_data                               (local rank 0)
    setup(stage="fit")
    configure_model                            (inside the strategy's model_sharded_context)
    on_fit_start
    on_sanity_check_start                      (num_sanity_val_steps > 0 and validation data)
        on_validation_model_eval, on_validation_start, on_validation_epoch_start,
        [on_validation_batch_start, validation_step, on_validation_batch_end] ...,
        on_validation_epoch_end, on_validation_end, on_validation_model_train
    on_sanity_check_end
    on_train_start
    for each epoch:
        on_train_epoch_start
        for each batch:
            on_before_batch_transfer, batch_to_device, on_after_batch_transfer     *
            on_train_batch_start          (returning -1 ends the epoch)            *
            training_step                                                          *
            on_before_zero_grad, zero_grad   (first micro-batch of a window)       +
            on_before_backward, backward, on_after_backward                        *
            unscale_gradients, on_before_optimizer_step, clip_gradients,
            optimizer_step                   (last micro-batch of a window)        +
            scheduler step                   (interval="step")                     +
            on_train_batch_end                                                     *
            [on_validation_model_zero_grad, validation run as above, at val_check_interval]
        on_train_epoch_end    (callbacks, then the module, then trylast monitors)
    on_train_end
    on_fit_end
    teardown(stage="fit")

``validate``/``test``/``predict`` run ``setup(stage)``, the evaluation run for that stage, and
``teardown(stage)``. On an exception anywhere in a run, ``on_exception`` runs and the exception propagates
(``KeyboardInterrupt`` too: Ctrl-C during a fit first stops at the next safe point, see
``ember.core.loop.signals``). After an exception ``teardown`` runs only for implementations marked
``@ember.hookimpl`` (plugins releasing what they hold); the module's and Lightning-style callbacks' ``teardown``
do not run, as in Lightning.
"""

from __future__ import annotations

from ember.hookspecs.events import checkpoints, evaluation, fit
from ember.hookspecs.events.checkpoints import (
    on_exception,
    on_load_checkpoint,
    on_save_checkpoint,
)
from ember.hookspecs.events.evaluation import (
    on_predict_batch_end,
    on_predict_batch_start,
    on_predict_end,
    on_predict_epoch_end,
    on_predict_epoch_start,
    on_predict_model_eval,
    on_predict_start,
    on_test_batch_end,
    on_test_batch_start,
    on_test_end,
    on_test_epoch_end,
    on_test_epoch_start,
    on_test_model_eval,
    on_test_model_train,
    on_test_start,
    on_validation_batch_end,
    on_validation_batch_start,
    on_validation_end,
    on_validation_epoch_end,
    on_validation_epoch_start,
    on_validation_model_eval,
    on_validation_model_train,
    on_validation_model_zero_grad,
    on_validation_start,
)
from ember.hookspecs.events.fit import (
    configure_model,
    on_after_backward,
    on_after_batch_transfer,
    on_before_backward,
    on_before_batch_transfer,
    on_before_optimizer_step,
    on_before_zero_grad,
    on_fit_end,
    on_fit_start,
    on_sanity_check_end,
    on_sanity_check_start,
    on_train_batch_end,
    on_train_batch_start,
    on_train_end,
    on_train_epoch_end,
    on_train_epoch_start,
    on_train_start,
    prepare_data,
    setup,
    teardown,
)

#: The phase modules, in the order the reference lists them.
PHASES = (fit, evaluation, checkpoints,)

__all__ = ["PHASES", "prepare_data", "setup", "configure_model", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end", "on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end", "on_train_batch_start", "on_train_batch_end", "on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_batch_transfer", "on_after_batch_transfer", "on_validation_model_eval", "on_validation_model_train", "on_validation_model_zero_grad", "on_test_model_eval", "on_test_model_train", "on_predict_model_eval", "on_validation_start", "on_validation_end", "on_validation_epoch_start", "on_validation_epoch_end", "on_validation_batch_start", "on_validation_batch_end", "on_test_start", "on_test_end", "on_test_epoch_start", "on_test_epoch_end", "on_test_batch_start", "on_test_batch_end", "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end", "on_predict_batch_start", "on_predict_batch_end", "on_exception", "on_save_checkpoint", "on_load_checkpoint"]
