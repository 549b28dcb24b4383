"""An example ember plugin package.

* ``precision.tf32`` (selectable): float32 parameters, float32 matrix multiplications allowed to use
  TensorFloat-32 (or bfloat16-based kernels on CPUs that have them) for the whole run.
* ``callback.run-summary`` (off until ``Trainer(run_summary=True)`` or ``callbacks=["run-summary"]``): writes
  ``run_summary.json`` into the run's ``default_root_dir`` when a fit ends or fails, and keeps its running
  totals in checkpoints.
"""

from ember_plugin_example.run_summary import RunSummary
from ember_plugin_example.tf32 import TF32Precision

__all__ = ["RunSummary", "TF32Precision"]
__version__ = "0.1.0"
