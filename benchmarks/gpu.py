"""On a CUDA GPU: a small transformer language model under bf16-mixed precision, tokens per second of
ember (nothing on, and defaults on) and Lightning against a raw ``torch.autocast`` loop.

The batches come from a pinned-memory DataLoader and are moved with ``non_blocking=True`` by every loop;
each timed run ends with ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmarks import frameworks, workloads
from benchmarks.harness import Group, Sample, interleave


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


def lm(steps: int = 50, batch: int = 16, seq: int = 256, vocab: int = 8192) -> workloads.Workload:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (steps * batch, seq + 1), generator=g)
    loader = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=batch, shuffle=True,
                        pin_memory=True)

    def net() -> torch.nn.Module:
        return TinyLM(vocab=vocab, seq=seq)

    def opt(n: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(n.parameters(), lr=3e-4, fused=True)

    return workloads.Workload("lm", f"transformer LM 6x512, seq {seq}, batch {batch}, bf16-mixed", net,
                              lambda: (loader, None), opt)


def gpu_group(clock: Any, repeats: int, loops: list[str], steps: int = 50, batch: int = 16,
              seq: int = 256) -> Group | None:
    if not torch.cuda.is_available():
        return None
    w = lm(steps=steps, batch=batch, seq=seq)
    runs = []
    for loop in loops:
        if loop in ("ember", "ember+defaults"):
            runs.append((loop, _ember(w, clock, loop)))
        elif loop in ("lightning", "lightning+defaults"):
            runs.append((loop, _lightning(w, clock, loop)))
    group = interleave(lambda: workloads.raw_run(w, clock, device="cuda", autocast=torch.bfloat16), runs,
                       w.steps(), repeats, base_label="raw (autocast bf16)")
    def with_rate(sample: Sample) -> Sample:
        return attrs.evolve(sample, note=f"{batch * seq / sample.median / 1e3:,.0f}k tokens/s")

    return Group(f"GPU: {w.title}, {w.steps()} steps", with_rate(group.baseline),
                 [with_rate(s) for s in group.samples])


def _ember(w: workloads.Workload, clock: Any, loop: str) -> Any:
    return lambda: frameworks.ember_run(w, clock, defaults=loop.endswith("defaults"), device="cuda",
                                        precision="bf16-mixed")


def _lightning(w: workloads.Workload, clock: Any, loop: str) -> Any:
    return lambda: frameworks.lightning_run(w, clock, defaults=loop.endswith("defaults"), device="cuda",
                                            precision="bf16-mixed")
