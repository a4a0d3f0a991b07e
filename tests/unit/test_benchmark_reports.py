"""The benchmarks' report logic: speedups, geometric means, table rows and notes.

Nothing here times anything: results are built by hand.
"""

from __future__ import annotations

import math

import pytest

from benchmarks import common, first_call
from examples.compare import Target, parse_variant


def case(label: str = "softmax::softmax", spec: str = "f32[4,8]") -> common.Case:
    module, name = label.split("::")
    variant = parse_variant({"x": spec, "device": "cuda"})
    return common.Case(Target(f"examples/{module}.py::{name}", (), (variant,)), variant)


def result(
    eager: float | None = 2.0,
    generated: float | None = 1.0,
    gen_ok: str = "yes",
    **compiled: tuple[float | None, str],
) -> common.Result:
    r = common.Result(case(), eager_ms=eager, generated_ms=generated)
    r.generated_ok = gen_ok
    r.compiled = {
        name.replace("_", "-"): common.Timed(ms, ok)
        for name, (ms, ok) in compiled.items()
    }
    return r


def rows(table: str) -> list[list[str]]:
    """The cells of each `|` row of a markdown table."""
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("|")
    ]


def test_geomean():
    assert common.geomean([]) is None
    assert common.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert common.geomean([0.5, 2.0]) == pytest.approx(1.0)


def test_geomean_cell_says_how_many_cases_count():
    assert common.geomean_cell([], 3) == "-"
    assert common.geomean_cell([2.0, 8.0], 2) == "4.00x"
    assert common.geomean_cell([2.0, 8.0], 3) == "4.00x (2 of 3)"


def test_speedups_count_only_cases_timed_and_correct():
    results = [
        result(4.0, 2.0, compile=(3.0, "yes")),  # counts: 2.0x eager, 1.5x compile
        result(4.0, 2.0, gen_ok="no (max abs 1e-2)", compile=(3.0, "yes")),
        result(4.0, None, compile=(3.0, "yes")),  # not generated
        result(4.0, 1.0, compile=(2.0, "no (raised RuntimeError: x)")),
        result(4.0, 1.0, compile=(None, "-")),
    ]
    assert common.speedups(results, "eager") == [2.0, 4.0, 4.0]
    assert common.speedups(results, "compile") == [1.5]
    assert common.speedups(results, "max-autotune") == []


def test_table_has_a_column_per_compiler_and_a_geomean_row():
    results = [
        result(4.0, 2.0, compile=(2.0, "yes"), max_autotune=(1.0, "yes")),
        result(1.0, 1.0, compile=(2.0, "yes"), max_autotune=(None, "no (raised E: x)")),
    ]
    table = common.markdown_table(results, 100.0, ("compile", "max-autotune"))
    header, _, first, second, mean = rows(table.split("\n\n")[0])
    assert "max-autotune ms" in header and "gen vs max-autotune" in header
    assert header[-1] == "correct (gen / compile / max-autotune)"
    assert all(len(row) == len(header) for row in (first, second, mean))
    cell = dict(zip(header, first))
    assert cell["gen vs eager"] == "2.00x"
    assert cell["gen vs compile"] == "1.00x"
    assert cell["gen vs max-autotune"] == "0.50x"
    assert cell["correct (gen / compile / max-autotune)"] == "yes / yes / yes"
    assert dict(zip(header, second))["max-autotune ms"] == "-"
    means = dict(zip(header, mean))
    assert means["case"] == "geomean"
    assert means["gen vs eager"] == f"{math.sqrt(2.0):.2f}x"
    assert means["gen vs compile"] == f"{math.sqrt(2.0):.2f}x"
    assert means["gen vs max-autotune"] == "0.50x (1 of 2)"
    assert table.endswith("- softmax::softmax, max-autotune: no (raised E: x)")


def test_table_marks_latency_cases_and_skips_gbps_for_them():
    memory = result(compile=(1.0, "yes"))
    memory.nbytes = 10**9  # 1 GB in 1 ms: 1000 GB/s, 50% of 2000
    latency = common.Result(
        case("toy::ToyModule"), eager_ms=0.02, generated_ms=0.01, latency=True
    )
    latency.generated_ok = "yes"
    latency.compiled = {"compile": common.Timed(0.04, "yes")}
    header, _, mem, lat, _ = rows(common.markdown_table([memory, latency], 2000.0))
    assert dict(zip(header, mem))["gen GB/s"] == "1000"
    assert dict(zip(header, mem))["% of copy BW"] == "50%"
    assert dict(zip(header, lat))["case"] == f"toy::ToyModule {common.LATENCY_MARK}"
    assert dict(zip(header, lat))["gen GB/s"] == "-"


def test_table_of_missing_generated_module():
    missing = result(generated=None, compile=(1.0, "yes"))
    missing.generated_missing = True
    missing.generated_ok = "benchmarks.generated.softmax not generated"
    table = common.markdown_table([missing], 1.0)
    header, _, row, mean = rows(table.split("\n\n")[0])
    assert dict(zip(header, row))["generated ms"] == "not generated"
    assert dict(zip(header, mean))["gen vs eager"] == "-"
    assert "- softmax::softmax, generated: benchmarks.generated.softmax" in table


def test_first_call_table_and_child_output():
    block = case("gpt_block::Block", "f32[2,16,64]")
    good = first_call.parse_child_output(
        0,
        'warming up\n{"import_s": 0.5, "first_s": 2.0, "steady_ms": 1.5, "ok": "yes"}',
        "",
    )
    assert good == first_call.Figures(0.5, 2.0, 1.5, "yes")
    crashed = first_call.parse_child_output(1, "", "Traceback\nRuntimeError: boom")
    assert crashed.error == "exit status 1: RuntimeError: boom"
    eager = first_call.Figures(0.0, 0.25, 1.0, "-")
    table = first_call.markdown_table(
        [
            (block, first_call.Run("eager"), eager),
            (block, first_call.Run("generated"), good),
            (block, first_call.Run("compile", warm=True), crashed),
        ]
    )
    header, _, *body = rows(table.split("\n\n")[0])
    cells = [dict(zip(header, row)) for row in body]
    assert [c["case"] for c in cells] == ["gpt_block::Block", "", ""]
    assert cells[0]["import s"] == "-" and cells[0]["import + first call s"] == "0.250"
    assert cells[1]["caches"] == "empty"
    assert cells[1]["import + first call s"] == "2.500"
    assert cells[2]["run"] == "torch.compile" and cells[2]["caches"] == "warm"
    assert cells[2]["correct"] == "failed"
    assert table.endswith(
        "- gpt_block::Block, torch.compile (warm caches): exit status 1: "
        "RuntimeError: boom"
    )


def test_first_call_caches_are_per_approach(tmp_path):
    cold = first_call.cache_env(tmp_path, first_call.Run("generated"))
    warm = first_call.cache_env(tmp_path, first_call.Run("generated", warm=True))
    other = first_call.cache_env(tmp_path, first_call.Run("compile"))
    for var in first_call.CACHE_VARS:
        assert cold[var] == warm[var]
        assert cold[var] != other[var]
        assert cold[var].startswith(str(tmp_path))


def test_latency_race_interleaves_batches_and_reports_each_median(monkeypatch):
    """Each round runs a batch of every function, starting one further along."""
    clock = [0.0]
    monkeypatch.setattr(common, "time", _FakeTime(clock))
    ran: list[str] = []
    batches: list[str] = []

    def work(name: str, seconds: float):
        def fn():
            clock[0] += seconds
            ran.append(name)

        return fn

    race, how = common.latency_race(True, lambda: batches.append(ran[-1]))
    ms = race({"eager": work("eager", 2e-3), "generated": work("generated", 1e-3)})
    assert ms == pytest.approx({"eager": 2.0, "generated": 1.0})
    rounds = batches[-10:]  # after each function's calibration batches
    assert rounds == ["eager", "generated", "generated", "eager"] * 2 + [
        "eager",
        "generated",
    ]
    assert "interleaved" in how


class _FakeTime:
    def __init__(self, clock: list[float]):
        self.clock = clock

    def perf_counter(self) -> float:
        return self.clock[0]


def test_an_overhead_bound_case_is_timed_in_one_race(tmp_path):
    """`toy::ToyModule` on the CPU, the race faked: eager and generated are built,
    checked against eager, then handed to the race together."""
    package, cases = common.load_cases("cpu", ["toy::ToyModule"])
    raced: list[list[str]] = []

    def race(fns):
        raced.append(list(fns))
        for fn in fns.values():
            fn()
        return {name: float(i + 1) for i, name in enumerate(fns)}

    def no_race(fns):
        raise AssertionError("an overhead-bound case is timed by `latency` only")

    r = common.run_case(package, cases[0], "cpu", no_race, (), latency=race)
    assert raced == [["eager", "generated"]]
    assert (r.latency, r.eager_ms, r.generated_ms) == (True, 1.0, 2.0)
    assert r.generated_ok == "yes"


def test_interleaved_rounds_rotate_and_take_medians():
    order: list[str] = []
    times = {"eager": iter([5.0, 1.0, 2.0]), "generated": iter([9.0, 3.0, 4.0])}

    def timer(fn):
        name = fn()
        order.append(name)
        return next(times[name])

    race = common.interleaved(timer, rounds=3)
    ms = race({"eager": lambda: "eager", "generated": lambda: "generated"})
    assert order == ["eager", "generated", "generated", "eager", "eager", "generated"]
    assert ms == {"eager": 2.0, "generated": 4.0}
