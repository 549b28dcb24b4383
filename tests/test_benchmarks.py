"""The benchmark suite's machinery: interleaving, paired statistics, the table, and an end-to-end smoke run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dist_support import clean_env, needs_fsdp, run  # noqa: E402

from benchmarks import harness  # noqa: E402


def test_runs_alternate_with_the_baseline_and_statistics_are_paired() -> None:
    order: list[str] = []
    base_times = iter([1.0, 2.0, 1.0, 2.0, 1.0, 2.0])
    loop_times = {"a": iter([1.5, 3.0, 1.5]), "b": iter([2.2, 1.1, 2.2])}

    def baseline() -> float:
        order.append("raw")
        return next(base_times)

    def loop(name: str) -> Any:
        def run() -> float:
            order.append(name)
            return next(loop_times[name])
        return run

    group = harness.interleave(baseline, [("a", loop("a")), ("b", loop("b"))], steps=10, repeats=3, warmup=0)
    assert order == ["raw", "a", "raw", "b",  # round 0
                     "raw", "b", "raw", "a",  # round 1 starts with the next loop
                     "raw", "a", "raw", "b"]
    a, b = group.samples
    assert a.times == pytest.approx([0.15, 0.3, 0.15])  # seconds per step
    assert a.paired_base == pytest.approx([0.1, 0.2, 0.1])  # the raw run just before each
    assert a.ratio() == pytest.approx(1.5) and a.overhead() == pytest.approx(0.05)
    assert b.paired_base == pytest.approx([0.2, 0.1, 0.2])
    assert b.ratio() == pytest.approx(1.1) and b.ratio_of_mins() == pytest.approx(0.11 / 0.1)
    assert a.ratio_of_mins() == pytest.approx(0.15 / 0.1)
    assert group.baseline.times == pytest.approx([0.1, 0.2, 0.1, 0.2, 0.1, 0.2])
    table = harness.format_table([harness.Group("tiny", group.baseline, group.samples)])
    rows = {line.split()[0]: line for line in table.splitlines()[3:]}
    assert rows["a"].split()[-2:] == ["1.500", "1.500"]
    assert rows["raw"].split()[-2:] == ["1.000", "1.000"]


def test_warmup_runs_are_not_counted() -> None:
    calls: list[str] = []
    group = harness.interleave(lambda: calls.append("raw") or 1.0, [("x", lambda: calls.append("x") or 2.0)],
                               steps=1, repeats=2, warmup=1)
    assert len(calls) == 6 and len(group.baseline.times) == 2 and len(group.samples[0].times) == 2


def test_count_calls_is_exact() -> None:
    def ten() -> float:
        for _ in range(10):
            abs(1)
        return 0.0

    assert harness.count_calls(ten) - harness.count_calls(lambda: 0.0) == 10


@pytest.mark.slow
def test_the_suite_runs_end_to_end(tmp_path: Any) -> None:
    out = tmp_path / "results.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "steps", "--workloads", "tiny",
                           "--loops", "ember", "ember+defaults", "--clock", "cpu", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(line.strip().startswith("ember+defaults") for line in lines)
    assert any(line.startswith("Python calls per training step") for line in lines)
    results = json.loads(out.read_text())
    group = results["groups"][0]
    assert set(group["loops"]) == {"ember", "ember+defaults"}
    assert len(group["loops"]["ember"]["times"]) == 2
    assert results["calls_per_step"]["ember"] > results["calls_per_step"]["raw"]


def test_multi_epoch_groups_show_the_overhead_per_epoch() -> None:
    base = harness.Sample("raw", [0.001, 0.001], [])
    slow = harness.Sample("x", [0.0015, 0.0013], [0.001, 0.001])  # 0.4 ms per step over raw (median)
    table = harness.format_table([harness.Group("short", base, [slow], steps_per_epoch=32)])
    assert "overhead ms/epoch" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.strip().startswith("x"))
    assert row.split()[-1] == f"{0.0004 * 32 * 1e3:.2f}"  # 12.80 ms of overhead in each 32-step epoch
    assert "ms/epoch" not in harness.format_table([harness.Group("one epoch", base, [slow])])


def test_short_epoch_workload_is_32_training_and_8_validation_steps() -> None:
    from benchmarks import workloads

    w = workloads.short_epochs(epochs=3)
    train, val = w.make_data()
    assert (len(train), len(val), w.epochs, w.steps()) == (32, 8, 3, 96)
    assert len(workloads.tiny_epochs(epochs=2).make_data()[0]) == 128


@pytest.mark.slow
@pytest.mark.extended  # a whole benchmark section; test_the_suite_runs_end_to_end runs the machinery
def test_the_epochs_section_compares_checkpoint_modes(tmp_path: Any) -> None:
    out = tmp_path / "results.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "epochs", "--clock", "cpu",
                           "--json", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    group = json.loads(out.read_text())["groups"][0]
    assert group["title"].startswith("per-epoch costs: short epochs: 4 x (32 train + 8 val steps)")
    assert set(group["loops"]) == {"ember+defaults", "ember+defaults, writer process",
                                   "ember+defaults, synchronous checkpoint", "ember+defaults, no file work",
                                   "ember+defaults, checkpointing off",
                                   "ember+defaults, logger off", "ember+defaults, progress bar off",
                                   "ember+defaults, all three off", "ember, validation only"}
    assert "overhead ms/epoch" in proc.stdout
    # Calls per epoch on the training thread: each piece of per-epoch work must show (the progress bar's
    # redraws depend on time and move a defaults row by about a hundred calls: far less than these steps).
    calls = json.loads(out.read_text())["calls_per_epoch"]
    assert calls["raw"] + 500 < calls["ember, validation only"] < calls["ember+defaults, checkpointing off"] - 500
    assert calls["ember+defaults, checkpointing off"] + 1000 < calls["ember+defaults"]
    # the writer process takes the pickling (its calls back into Python) off the training thread: since ember
    # writes torch.save's format itself, that is about 700 calls per save
    assert calls["ember+defaults, writer process"] + 300 < calls["ember+defaults"]
    assert "Python calls per epoch on the training thread" in proc.stdout


@pytest.mark.slow
@pytest.mark.extended  # the GPU section on a CPU; scripts/gpu_check.sh runs it on a GPU
def test_the_gpu_section_compares_every_loop_per_precision_on_a_smoke_model() -> None:
    """The GPU section's machinery (both precisions, the compiled group, the per-epoch column, the notes) on a
    model small enough for a CPU; the figures themselves need a GPU."""
    import time

    from benchmarks import gpu

    groups = gpu.gpu_groups(time.process_time, 1, ["ember", "ember+defaults"], gpu.LMConfig.smoke(), device="cpu",
                            count_syncs=False)
    titles = [g.title for g in groups]
    assert [("bf16-mixed" in t, "16-mixed" in t and "bf16" not in t, "torch.compile" in t) for t in titles] == [
        (True, False, False), (False, True, False), (True, False, True)]
    assert [s.label for s in groups[2].samples] == ["ember (compiled)", "ember+defaults (compiled)"]
    assert all(g.steps_per_epoch == 4 and len(g.samples) == 2 for g in groups)
    assert all("tokens/s" in s.note for g in groups for s in [g.baseline, *g.samples])
    table = harness.format_table(groups)
    assert "2 epochs of 4 steps" in table and "overhead ms/epoch" in table


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_gpu_syncs_are_counted_and_bf16_with_nothing_on_has_none() -> None:
    import time

    import torch

    from benchmarks import gpu

    with gpu.counting_syncs() as count:
        torch.ones(3, device="cuda").sum().item()  # one synchronising read
    assert count[0] >= 1

    def runs_of(w: Any) -> dict[str, Any]:
        ember_runs = dict(gpu.loops_for(w, time.perf_counter, "cuda", "bf16-mixed", ["ember"]))
        return {"raw": lambda: gpu.raw_run(w, time.perf_counter, "cuda", "bf16-mixed"), **ember_runs}

    assert gpu.syncs_per_step(runs_of, gpu.LMConfig.smoke(), "cuda", "bf16-mixed", steps=4) == {"raw": 0.0,
                                                                                                "ember": 0.0}


@pytest.mark.slow
@pytest.mark.extended  # a whole benchmark section
@needs_fsdp
def test_the_fsdp_stall_benchmark_times_sharded_saves() -> None:
    out = run([sys.executable, "benchmarks/fsdp_checkpoint_stall.py", "--quick", "--modes", "background"], cwd=ROOT,
              timeout=600, env=clean_env(PYTHONPATH=str(ROOT)))
    rows = out.splitlines()
    assert rows[0].startswith("FSDP, 2 processes, cpu: 0.01M parameters")
    assert len(rows) == 2 and rows[1].split()[0] == "background"
    assert "median" in rows[1] and "first save" in rows[1]


@pytest.mark.slow
@pytest.mark.extended  # a whole benchmark section; test_the_suite_runs_end_to_end runs the machinery
def test_the_checkpoint_stall_benchmark_times_each_writer() -> None:
    out = run([sys.executable, "-m", "benchmarks.checkpoint_stall", "--params", "1e4", "--epochs", "3", "--repeats",
               "1", "--epoch-seconds", "0.05"], cwd=ROOT, timeout=600, env=clean_env(PYTHONPATH=str(ROOT)))
    rows = [line for line in out.splitlines() if not line.startswith("Epoch")]
    assert rows[0].startswith("0M parameters (0 MiB of weights), 3 epochs of")
    assert rows[2].split() == ["first", "save", "in", "save", "waited", "slowed", "stall"]
    assert [" ".join(row.split()[:-5]) for row in rows[3:]] == ["writer thread", "writer process", "synchronous"]


def test_the_epoch_phases_benchmark_splits_a_fit_at_its_first_and_last_batch() -> None:
    from benchmarks import epoch_phases, workloads

    setup, epochs, end = epoch_phases.one_fit(workloads.short_epochs(2), {})
    assert setup > 0 and epochs > 0 and end > 0
    table = epoch_phases.format_table({"defaults": [(setup, epochs, end)], "all three off": [(1e-3, 2e-3, 3e-3)]}, 2)
    lines = table.splitlines()
    assert lines[0].startswith("short epochs, 2 x (32 train + 8 val steps)")
    assert lines[1].split() == ["row", "set-up", "epochs", "end"]
    assert lines[3].split() == ["all", "three", "off", "1.0", "(", "1.0)", "2.0", "(", "2.0)", "3.0", "(", "3.0)"]
    assert set(epoch_phases.rows()) >= {"defaults", "checkpointing off", "progress bar off", "logger off"}


# -- instruction counts (benchmarks/instructions.py) ----------------------------------------------------------
_COUNTING = r"""
void mark_start(void); void mark_stop(const char *name);
volatile long sink;
static void work(long n) { for (long i = 0; i < n; i++) sink += i; }
int main(void) {
    work(1000);            /* before the first mark: not counted */
    mark_start(); work(10000); mark_stop("small/raw");
    work(1000000);         /* between the marks: not counted */
    mark_start(); work(40000); mark_stop("small/ember");
    return 0;
}
"""


def test_instruction_counts_cover_only_what_runs_between_the_marks(tmp_path: Path) -> None:
    """Real valgrind, a real compiled marking library: each dump counts its own marked stretch and nothing else."""
    from benchmarks import instructions

    missing = instructions.missing_tools()
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    library = instructions.compile_marks(str(tmp_path))
    (tmp_path / "main.c").write_text(_COUNTING)
    program = tmp_path / "counting"
    subprocess.run(["cc", "-O0", "-o", str(program), str(tmp_path / "main.c"), library,
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    out = tmp_path / "dumps"
    out.mkdir()
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                    f"--callgrind-out-file={out}/callgrind.out", str(program)], check=True, capture_output=True)
    counts = instructions.read_dumps(str(out))
    assert set(counts) == {"small/raw", "small/ember"}
    # four times the loop, four times the instructions (give or take the marks' own few)
    assert 3.9 < counts["small/ember"] / counts["small/raw"] < 4.1, counts
    table = instructions.format_table(counts, {"small": 100}, ["ember"], ["small"]).splitlines()
    assert table[2] == "small (100 steps)"
    assert table[3].split() == ["raw", f"{counts['small/raw'] / 100:,.0f}", "1.000"]
    assert table[4].split()[-1] == f"{counts['small/ember'] / counts['small/raw']:.3f}"


def test_instruction_counts_say_what_is_missing_instead_of_failing_later(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import instructions

    monkeypatch.setenv("PATH", "/nonexistent")
    assert "valgrind" in instructions.missing_tools()
    with pytest.raises(SystemExit, match="needs valgrind"):
        instructions.main(["--workloads", "short"])


@pytest.mark.slow
@pytest.mark.extended  # minutes under valgrind; the counting machinery is tested above on a C program
def test_instruction_counts_of_a_short_fit_end_to_end() -> None:
    from benchmarks import instructions

    if instructions.missing_tools():
        pytest.skip("needs valgrind and a C compiler")
    out = subprocess.run([sys.executable, "-m", "benchmarks.instructions", "--workloads", "short", "--epochs", "1",
                          "--loops", "ember"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.startswith("  ")}
    assert set(rows) == {"raw", "ember"}
    assert float(rows["raw"][2]) == 1.0 and float(rows["ember"][2]) > 1.0


def test_counting_inside_a_function_switches_on_for_its_outermost_calls_only() -> None:
    """``--inside``: the wrapper toggles counting around the outermost call (a recursive or nested call does not
    toggle again), also when the function raises, and counts every call."""
    from benchmarks import instructions

    class Library:
        def __init__(self) -> None:
            self.on = False
            self.switches = 0

        def toggle(self) -> None:
            self.on, self.switches = not self.on, self.switches + 1

    library = Library()
    seen: list[bool] = []

    def countdown(n: int) -> int:
        seen.append(library.on)
        if n < 0:
            raise ValueError("below zero")
        return n if n == 0 else wrapped(n - 1)

    counter = instructions.Inside(countdown, library)
    wrapped = counter.wrapper()
    assert wrapped(3) == 0 and seen == [True] * 4 and not library.on
    assert library.switches == 2 and counter.calls == 4
    with pytest.raises(ValueError):
        wrapped(-1)
    assert not library.on and library.switches == 4
    assert instructions.resolve("ember.core.loop.rng:capture")[1] == "capture"
    with pytest.raises(SystemExit, match="has no 'nothing'"):
        instructions.resolve("ember.core.loop.rng:nothing")
    table = instructions.format_inside({"m:f|4": 4000}, ["m:f", "m:g"], 2, 8, "short").splitlines()
    assert table[2].split() == ["m:f", "4", "1,000", "2,000", "500"] and table[3].split()[1:] == ["0", "-", "0", "0"]


def test_counting_inside_an_inherited_method_wraps_it_on_the_subclass_and_puts_the_base_back() -> None:
    from benchmarks import instructions

    class Library:
        switches = 0

        def toggle(self) -> None:
            Library.switches += 1

    class Base:
        def step(self) -> str:
            return "base"

    class Sub(Base):
        pass

    original = instructions.inspect.getattr_static(Sub, "step")
    counter = instructions.Inside(original, Library())
    with counter.installed(Sub, "step"):
        assert Sub().step() == "base" and Base().step() == "base"
        assert "step" in vars(Sub)
    assert "step" not in vars(Sub) and Sub.step is Base.step
    assert counter.calls == 1 and Library.switches == 2  # the base class's own calls were not counted
    with counter.installed(Base, "step"):
        Sub().step()
    assert vars(Base)["step"] is original and counter.calls == 2


def test_the_no_file_work_row_serialises_as_the_defaults_and_writes_nothing(tmp_path: Any) -> None:
    """The epochs section's "no file work" row differs from ember+defaults only in the writer thread's file work:
    its checkpoints are serialised at the safe point and handed to the writer, and no file reaches the disk."""
    import time

    from benchmarks import epochs, frameworks, workloads
    from ember.core.checkpointing import checkpoint_writes

    rows = {label: kwargs for label, _, kwargs in epochs.row_args()}
    storage = rows["ember+defaults, no file work"]["checkpoint_io"]
    handed: list[tuple[str, bool]] = []
    prepare = checkpoint_writes.Writes.prepare

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = prepare(self, *args, **kwargs)
        handed.append((type(out).__name__, self.background))
        return out

    checkpoint_writes.Writes.prepare = spy  # type: ignore[method-assign]
    try:
        frameworks.ember_run(workloads.short_epochs(2), time.perf_counter, defaults=True, checkpoint_io=storage,
                             default_root_dir=str(tmp_path))
    finally:
        checkpoint_writes.Writes.prepare = prepare  # type: ignore[method-assign]
    assert handed == [("memoryview", True)] * 2  # serialised, for the writer thread, as the default storage's
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and "ckpt" in p.name]


def test_timing_inside_a_function_keeps_each_outermost_call_and_prints_per_epoch_and_step() -> None:
    """``python -m benchmarks.inside_time``: each outermost call of a named function timed on the given clock (a
    nested call inside it is not timed again), the function put back afterwards, and the table per fit."""
    import torch

    from benchmarks import inside_time, workloads

    ticks = iter(range(0, 1000, 2))  # each reading of the clock 2 s after the previous one
    original = workloads.loss_of
    net = workloads.tiny_net()
    batch = (torch.randn(4, 32), torch.randint(0, 10, (4,)))
    with inside_time.timed(["benchmarks.workloads:loss_of"], lambda: float(next(ticks))) as watches:
        assert workloads.loss_of is not original
        for _ in range(3):
            workloads.loss_of(net, batch)
    assert workloads.loss_of is original
    watch = watches["benchmarks.workloads:loss_of"]
    assert watch.durations == [2.0, 2.0, 2.0]
    rows = inside_time.format_table(watches, fits=3, epochs=2, steps=4).splitlines()
    assert rows[1].split() == ["benchmarks.workloads:loss_of", "1.0", "2,000,000.0", "1,000,000.0", "500,000.00"]
