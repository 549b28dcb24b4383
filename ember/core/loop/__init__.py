"""The loop and the state it owns: a run's set-up and events in order (``loops``), one training epoch
(``training``), the one evaluation loop (``evaluation``), each stage's data (``data``, ``resumable_data``, and
``combined``: loaders iterated together), optimizers and schedulers (``optim``, ``module_overrides``,
``schedulers``), ``self.log`` (``metrics``, ``results``), the run
records (``state``) and Lightning's loop objects over them (``loop_views``), seeds and RNG states (``seed``, ``rng``), stopping on a signal (``signals``) and checking
what an entry point was given (``run_inputs``).

May import: ``ember.core.hooks``, ``ember.core.errors``, ``ember.hookspecs``. The Trainer is reached through the
object it passes in (annotated ``TrainerLike``), never imported.
"""
