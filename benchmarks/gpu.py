"""On a CUDA GPU: a small transformer language model, side by side in one run: the raw loop, ember with nothing on
and with its defaults, Lightning with nothing on and with its defaults; under bf16-mixed and under 16-mixed (a
fused AdamW, so that the gradient scaler's checks can stay on the device), and compiled with ``torch.compile``.

Every run trains several epochs, so the defaults write a checkpoint at the end of each one (the checkpoint
stall is part of what is measured). The batches come from a pinned-memory DataLoader and are moved with
``non_blocking=True`` by every loop; each timed run ends with ``torch.cuda.synchronize()``. Next to the time,
each row shows tokens per second and the host-device synchronisations per training step, counted with
``torch.cuda.set_sync_debug_mode("warn")`` over a separate short run (every synchronising call warns once).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmarks import frameworks, harness, workloads
from benchmarks.harness import Group, Sample, interleave

#: The precisions compared, with the autocast dtype of the raw loop and whether it scales the loss.
PRECISIONS = {"bf16-mixed": (torch.bfloat16, False), "16-mixed": (torch.float16, True)}


class TinyLM(torch.nn.Module):
    """A decoder-only transformer: token and position embeddings, pre-norm causal self-attention blocks."""

    def __init__(self, vocab: int = 8192, width: int = 512, layers: int = 6, heads: int = 8,
                 seq: int = 256) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Parameter(torch.zeros(seq, width))
        layer = torch.nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        h = self.embed(tokens) + self.position[:t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(h).transpose(1, 2)  # (batch, vocab, time), as cross_entropy wants


@attrs.frozen
class LMConfig:
    """The language model's sizes and how long a timed run trains."""

    steps: int = 50  # per epoch
    epochs: int = 4
    batch: int = 16
    seq: int = 256
    vocab: int = 8192
    width: int = 512
    layers: int = 6

    @classmethod
    def smoke(cls) -> LMConfig:
        """A model small enough to check the machinery on a CPU (not a measurement)."""
        return cls(steps=4, epochs=2, batch=2, seq=16, vocab=64, width=32, layers=1)


def lm(config: LMConfig = LMConfig(), device: str = "cuda", precision: str = "bf16-mixed") -> workloads.Workload:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, config.vocab, (config.steps * config.batch, config.seq + 1), generator=g)
    loader = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=config.batch, shuffle=True,
                        pin_memory=device.startswith("cuda"))

    def net() -> torch.nn.Module:
        return TinyLM(vocab=config.vocab, width=config.width, layers=config.layers, heads=4 if config.width < 128
                      else 8, seq=config.seq)

    def opt(n: torch.nn.Module) -> torch.optim.Optimizer:
        # fused: the step takes the gradient scaler's scale and inf flag on the device (no sync under 16-mixed)
        return torch.optim.AdamW(n.parameters(), lr=3e-4, fused=device.startswith("cuda"))

    title = (f"transformer LM {config.layers}x{config.width}, seq {config.seq}, batch {config.batch}, "
             f"{config.epochs} epochs of {config.steps} steps, {precision}")
    return workloads.Workload("lm", title, net, lambda: (loader, None), opt, epochs=config.epochs)


def raw_run(w: workloads.Workload, clock: workloads.Clock, device: str, precision: str,
            net: torch.nn.Module | None = None) -> float:
    """The raw loop (:func:`benchmarks.workloads.raw_run`) under ``precision``: ``torch.autocast``, and a
    ``GradScaler`` under 16-mixed; ``net``: a compiled one kept from run to run, else a fresh one."""
    dtype, scaled = PRECISIONS[precision]
    return workloads.raw_run(w, clock, device=device, net=net, autocast=dtype, scaled=scaled)


def compiled_net(w: workloads.Workload, compiled: bool) -> torch.nn.Module | None:
    """A compiled network for one loop, built once and trained by each of its runs (as benchmarks/compiled.py
    does: the warm-up run compiles), or None: a fresh network per run."""
    return torch.compile(w.make_net()) if compiled else None  # type: ignore[return-value]


def loops_for(w: workloads.Workload, clock: workloads.Clock, device: str, precision: str, loops: list[str],
              compiled: bool = False) -> list[tuple[str, harness.Run]]:
    accelerator = device.split(":")[0]
    runs: list[tuple[str, harness.Run]] = []
    for loop in loops:
        defaults = loop.endswith("defaults")
        label = loop + (" (compiled)" if compiled else "")
        if loop.startswith("ember"):
            runs.append((label, lambda d=defaults, n=compiled_net(w, compiled): frameworks.ember_run(
                w, clock, defaults=d, device=accelerator, precision=precision, net=n)))
        elif loop.startswith("lightning") and frameworks.lightning_module() is not None and not compiled:
            runs.append((label, lambda d=defaults: frameworks.lightning_run(
                w, clock, defaults=d, device=accelerator, precision=precision)))
    return runs


@contextlib.contextmanager
def counting_syncs() -> Iterator[list[int]]:
    """Count host-device synchronisations: with the sync debug mode at "warn", every synchronising CUDA call
    warns once. Yields a one-item list that holds the count when the block ends."""
    count = [0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield count
        finally:
            torch.cuda.set_sync_debug_mode("default")
    count[0] = sum("synchroniz" in str(w.message) for w in caught)


def syncs_per_step(runs_of: Callable[[workloads.Workload], dict[str, harness.Run]], config: LMConfig,
                   device: str, precision: str, steps: int = 10) -> dict[str, float]:
    """Synchronisations per training step of each loop, marginal: one epoch of ``2 * steps`` steps minus one of
    ``steps`` steps, divided by ``steps``, so that what a fit or an epoch does once (set-up, the model summary, a
    checkpoint's copy, the epoch's metrics) cancels out."""
    counts: dict[str, list[int]] = {}
    for n in (steps, 2 * steps):
        w = lm(attrs.evolve(config, steps=n, epochs=1), device, precision)
        for label, run in runs_of(w).items():
            with harness.silenced(), counting_syncs() as count:
                run()
            counts.setdefault(label, []).append(count[0])
    return {label: (two - one) / steps for label, (one, two) in counts.items()}


def gpu_groups(clock: Any, repeats: int, loops: list[str], config: LMConfig = LMConfig(), device: str = "cuda",
               precisions: tuple[str, ...] = tuple(PRECISIONS), compile_too: bool = True,
               count_syncs: bool = True) -> list[Group]:
    """One group per precision (and one compiled, bf16-mixed): every loop against the raw loop."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        return []
    cases = [(p, False) for p in precisions] + ([("bf16-mixed", True)] if compile_too else [])
    groups = []
    for precision, compiled in cases:
        w = lm(config, device, precision)
        raw: harness.Run = lambda w=w, p=precision, n=compiled_net(w, compiled): raw_run(  # noqa: E731
            w, clock, device, p, n)
        runs = loops_for(w, clock, device, precision, loops, compiled)
        group = interleave(raw, runs, w.steps(), repeats, base_label="raw" + (" (compiled)" if compiled else ""))
        syncs: dict[str, float] = {}
        if count_syncs and device.startswith("cuda"):
            def runs_of(sw: workloads.Workload, p: str = precision, c: bool = compiled,
                        label: str = group.baseline.label) -> dict[str, harness.Run]:
                net = compiled_net(sw, c)
                return {label: lambda: raw_run(sw, clock, device, p, net), **dict(loops_for(sw, clock, device, p,
                                                                                            loops, c))}

            syncs = syncs_per_step(runs_of, config, device, precision)
        tokens = config.batch * config.seq

        def note(sample: Sample, syncs: dict[str, float] = syncs, tokens: int = tokens) -> Sample:
            text = f"{tokens / sample.median / 1e3:,.0f}k tokens/s"
            if sample.label in syncs:
                text += f", {syncs[sample.label]:.2f} syncs/step"
            return attrs.evolve(sample, note=text)

        title = f"GPU: {w.title}" + (", torch.compile" if compiled else "") + f", {w.steps()} steps"
        groups.append(Group(title, note(group.baseline), [note(s) for s in group.samples],
                            steps_per_epoch=config.steps))
    return groups


def gpu_epoch_group(clock: Any, repeats: int, config: LMConfig = LMConfig(), precision: str = "bf16-mixed"
                    ) -> list[Group]:
    """The per-epoch table of :mod:`benchmarks.epochs` on the language model: the defaults, then each default
    switched off in turn (``python -m benchmarks --only gpu-epochs``)."""
    from benchmarks.epochs import rows

    if not torch.cuda.is_available():
        return []
    w = lm(config, "cuda", precision)
    g = interleave(lambda: raw_run(w, clock, "cuda", precision), rows(w, clock, device="cuda", precision=precision),
                   w.steps(), repeats)
    return [Group(f"GPU per-epoch costs: {w.title}", g.baseline, g.samples, steps_per_epoch=config.steps)]
