"""`kernelab hierarchy`: the pointer-chase chains, the record, its rendering, the microbenchmark
sources (CPU), and the measurements themselves (gpu)."""

from __future__ import annotations

import json
import re

import pytest

from kernelab.cli import main
from kernelab.errors import KernelabError
from kernelab.hardware import get_gpu
from kernelab.lenses import hierarchy, pipeline
from kernelab.lenses.hierarchy import (
    LUO_2024,
    BandwidthMeasurement,
    HierarchyRecord,
    LatencyMeasurement,
    comparison,
    hierarchy_rows,
    load_measured_latencies,
    load_record,
    record_path,
    save_record,
)
from kernelab.probes import bandwidth as micro_bandwidth
from kernelab.probes.chase import (
    GPU_PAGE_BYTES,
    PLANS,
    ChasePlan,
    plan_order,
    successor_table,
    visiting_order,
)
from kernelab.runtime.cuda import build as cuda_build

needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="needs nvcc")
MICRO_SOURCES = ("probes/pointer_chase.cu", "probes/bandwidth.cu")


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


PLAN = {p.level: p for p in PLANS}


def _cycle_from(successors, start: int = 0) -> list[int]:
    seen, node = [], start
    while True:
        seen.append(node)
        node = int(successors[node])
        if node == start or len(seen) > len(successors):
            return seen


# --- the chains ---------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [2, 3, 128, 1000])
def test_random_order_links_into_one_cycle_over_every_node(nodes):
    order = visiting_order(nodes, seed=7)
    assert sorted(order.tolist()) == list(range(nodes))
    successors = successor_table(order)
    cycle = _cycle_from(successors, int(order[0]))
    assert len(cycle) == nodes
    assert cycle == order.tolist()  # the chain is walked in the visiting order


def test_page_local_order_finishes_each_page_before_the_next():
    group = 16
    order = visiting_order(64 * group, seed=3, group=group)
    assert sorted(order.tolist()) == list(range(64 * group))
    pages = (order // group).reshape(-1, group)
    assert (pages == pages[:, :1]).all()  # each run of `group` stays in one page
    assert len(set(pages[:, 0].tolist())) == 64  # and every page comes once
    assert pages[:, 0].tolist() != sorted(pages[:, 0].tolist())  # in random page order
    assert len(_cycle_from(successor_table(order))) == 64 * group


def test_orders_differ_by_seed_and_repeat_by_seed():
    assert visiting_order(500, seed=1).tolist() == visiting_order(500, seed=1).tolist()
    assert visiting_order(500, seed=1).tolist() != visiting_order(500, seed=2).tolist()


def test_bad_chains_are_refused():
    with pytest.raises(KernelabError):
        visiting_order(1)
    with pytest.raises(KernelabError):
        visiting_order(100, group=7)


def test_hbm_plan_is_page_local_with_a_page_per_group():
    plan = PLAN["hbm"]
    order = plan_order(plan)
    group = GPU_PAGE_BYTES // plan.stride_bytes
    assert len(order) == plan.nodes
    first_pages = order[: 3 * group] // group
    assert len(set(first_pages[:group].tolist())) == 1
    assert len(set(first_pages.tolist())) == 3


def test_working_sets_select_the_level_on_the_h200():
    h200 = get_gpu("h200")
    l1, l2 = h200.l1_per_sm_kib * 1024, h200.l2_kib * 1024
    assert PLAN["l1"].working_set_bytes <= l1 // 8
    assert PLAN["shared"].working_set_bytes <= h200.smem_per_block_kib * 1024
    assert l1 < PLAN["l2"].working_set_bytes <= l2 // 8  # misses L1, fits either L2 partition
    for level in ("hbm", "hbm_tlb"):
        assert PLAN[level].working_set_bytes >= 16 * l2
        assert PLAN[level].flush_l2 and not PLAN[level].warm
        assert PLAN[level].stride_bytes >= 128  # one node per cache line
    for plan in PLANS:
        assert plan.working_set_bytes % plan.stride_bytes == 0
        assert plan.steps >= 10_000  # the clock-read overlap stays below 0.01 %
        if plan.kernel != "chase_shared":
            assert plan.stride_bytes % 8 == 0  # 8-byte words hold the addresses


# --- the sources --------------------------------------------------------------------------


def test_launcher_constants_match_the_kernel_source():
    source = (cuda_build.KERNEL_DIR / micro_bandwidth.SOURCE).read_text()
    assert f"kSmemChunks = {micro_bandwidth.SMEM_CHUNKS};" in source
    assert f"kSmemShifts = {micro_bandwidth.SMEM_SHIFTS};" in source
    h200 = get_gpu("h200")
    chunks = micro_bandwidth.SMEM_CHUNKS * micro_bandwidth.SMEM_THREADS
    smem_per_block = (chunks + (micro_bandwidth.SMEM_SHIFTS - 1) * 32) * 16
    assert smem_per_block * micro_bandwidth.SMEM_BLOCKS_PER_SM <= h200.smem_per_sm_kib * 1024
    threads = micro_bandwidth.SMEM_THREADS * micro_bandwidth.SMEM_BLOCKS_PER_SM
    assert threads <= h200.max_threads_per_sm


@needs_nvcc
@pytest.mark.parametrize("source", MICRO_SOURCES)
def test_micro_kernels_compile_for_sm90_without_spills(source, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))
    built = cuda_build.build(source, arch="sm_90")
    kernels = re.findall(r'extern "C" __global__ void (\w+)', built.source.read_text())
    assert kernels and set(kernels) <= set(built.reports)
    for name in kernels:
        report = built.report(name)
        assert report.arch == "sm_90"
        assert not report.spills, f"{name} spills"
        assert report.stack_frame_bytes == 0, f"{name} uses local memory"


@needs_nvcc
def test_sass_has_the_intended_loads(tmp_path, monkeypatch):
    from kernelab.runtime.cuda import sass

    if sass.find_tool("cuobjdump") is None:
        pytest.skip("no cuobjdump")
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))
    bandwidth = cuda_build.build("probes/bandwidth.cu").cubin
    chase = cuda_build.build("probes/pointer_chase.cu").cubin
    smem = sass.sass_facts(bandwidth, "smem_read")
    assert smem["lds_128"] > 0 and smem["lds_128"] == smem["lds"]
    for kernel in ("l2_read", "hbm_read", "hbm_copy"):
        facts = sass.sass_facts(bandwidth, kernel)
        assert facts["ldg_128"] == facts["ldg"] > 0, kernel
        assert facts["local_loads"] == facts["local_stores"] == 0
    assert sass.sass_facts(bandwidth, "hbm_copy")["stg_128"] > 0
    # .cg loads become GPU-scope loads (served by L2), .ca ones SM-scope (L1 may serve them).
    assert any(
        op.startswith("LDG.E.64.STRONG.GPU") for op in sass.opcode_counts(chase, "chase_global_cg")
    )
    ca = sass.opcode_counts(chase, "chase_global_ca")
    assert any(op.startswith("LDG.E.64") for op in ca)
    assert not any("STRONG.GPU" in op for op in ca)
    assert sass.has(sass.opcode_counts(chase, "chase_shared"), "LDS")


# --- the record ---------------------------------------------------------------------------


def _made_up_record(gpu_id="h200", timestamp="2026-12-01T10:00:00+00:00") -> HierarchyRecord:
    """A record with invented figures, to exercise storage and rendering: not a measurement."""

    def latency(level, cycles, ns):
        return LatencyMeasurement(
            level, level, 4096, 128, "random", 10_000, cycles, ns, cycles / ns * 1e3,
            [cycles], [ns],
        )  # fmt: skip

    def rate(name, gbps, datasheet=None):
        return BandwidthMeasurement(name, name, 1 << 20, 1 << 30, "hot", 1.0, 0.01, gbps, datasheet)

    return HierarchyRecord(
        gpu="NVIDIA H200",
        gpu_id=gpu_id,
        driver="580.00",
        timestamp=timestamp,
        quick=True,
        latencies={
            "l1": latency("l1", 40.0, 20.0),
            "shared": latency("shared", 30.0, 15.0),
            "l2": latency("l2", 300.0, 150.0),
            "hbm": latency("hbm", 1000.0, 500.0),
        },
        bandwidths={
            "hbm_read": rate("hbm_read", 4000.0, 4800.0),
            "smem": rate("smem", 30000.0),
            "h2d": rate("h2d", 50.0, 64.0),
        },
        warnings=["made up"],
    )


def test_record_round_trip(tmp_path):
    record = _made_up_record()
    path = save_record(record, tmp_path / "h.json")
    again = load_record(path)
    assert again.to_dict() == record.to_dict()
    assert again.bandwidths["hbm_read"].pct_of_datasheet == pytest.approx(4000 / 4800 * 100)


def test_damaged_record_is_one_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu": "x"}')
    with pytest.raises(KernelabError, match="not a hierarchy record"):
        load_record(bad)
    bad.write_text("not json")
    with pytest.raises(KernelabError, match="not JSON"):
        load_record(bad)


def test_pipeline_lens_uses_the_newest_cached_latencies(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))
    monkeypatch.delenv(hierarchy.RECORD_ENV, raising=False)
    h200 = get_gpu("h200")
    assert load_measured_latencies(h200) is None
    assert not pipeline.memory_latency(h200, "hbm").measured

    older = _made_up_record(timestamp="2026-01-01T00:00:00+00:00")
    older.latencies["hbm"].ns_per_load = 999.0
    save_record(older, record_path("h200", "older-driver"))
    save_record(_made_up_record(), record_path("h200", "580.00"))
    save_record(_made_up_record(gpu_id="h100-sxm"), record_path("h100-sxm", "580.00"))
    (tmp_path / "hierarchy" / "h200-driver-broken.json").write_text("{")

    assert load_measured_latencies(h200) == {"hbm": 500.0, "l2": 150.0}
    hbm = pipeline.memory_latency(h200, "hbm")
    assert hbm.measured and hbm.ns == 500.0
    assert pipeline.memory_latency(h200, "l2").ns == 150.0
    assert load_measured_latencies(get_gpu("a100-sxm")) is None


def test_record_named_by_environment_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path / "empty"))
    path = save_record(_made_up_record(), tmp_path / "chosen.json")
    monkeypatch.setenv(hierarchy.RECORD_ENV, str(path))
    assert load_measured_latencies(get_gpu("h200")) == {"hbm": 500.0, "l2": 150.0}
    assert load_measured_latencies(get_gpu("h100-sxm")) is None  # measured on another GPU


# --- the view -----------------------------------------------------------------------------


def test_rows_put_catalog_sizes_beside_measurements():
    rows = {row["level"]: row for row in hierarchy_rows(_made_up_record(), get_gpu("h200"))}
    assert list(rows)[0] == "HBM"
    assert rows["HBM"]["size_bytes"] == 141_000_000_000
    assert rows["HBM"]["latency_cycles"] == 1000.0
    assert rows["HBM"]["pct_of_datasheet"] == pytest.approx(4000 / 4800 * 100)
    assert rows["L2"]["size_bytes"] == 60 * 2**20
    assert rows["shared memory"]["per_sm_bytes"] == 228 * 1024
    assert rows["shared memory"]["luo_h800_cycles"] == LUO_2024["latency_cycles"]["shared"]
    assert rows["registers"]["per_sm_bytes"] == 256 * 1024
    assert rows["registers"]["latency_cycles"] is None
    assert "copy (read + write)" not in rows  # not measured in this record: no row


def test_comparison_with_luo_et_al():
    items = {item["level"]: item for item in comparison(_made_up_record())}
    assert set(items) == {"l1", "shared", "l2", "hbm"}
    assert items["l2"]["difference_pct"] == pytest.approx((300 - 263.0) / 263.0 * 100)
    assert all(item["why"] for item in items.values())


def test_import_renders_a_stored_record(tmp_path, capsys):
    path = save_record(_made_up_record(), tmp_path / "h.json")
    assert main(["hierarchy", "--import", str(path)]) == 0
    text = capsys.readouterr().out
    for expected in ("HBM", "L2", "shared", "registers", "host to device", "2402.13499"):
        assert expected in text

    assert main(["hierarchy", "--import", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_id"] == "h200"
    assert data["latencies"]["l2"]["cycles_per_load"] == 300.0
    assert [row["level"] for row in data["rows"]][:2] == ["HBM", "L2"]
    assert data["comparison"][0]["luo_h800_cycles"] > 0


def test_import_of_a_missing_file_is_one_line(tmp_path, capsys):
    assert main(["hierarchy", "--import", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelab: --import") and "no such file" in err and "\n" not in err


@pytest.mark.skipif(_has_cuda(), reason="checks the no-GPU path")
def test_without_a_gpu_it_is_one_line(capsys):
    assert main(["hierarchy", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == "kernelab: kernelab hierarchy needs a CUDA GPU; none found"


# --- on the GPU ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One `kernelab hierarchy --quick --json` run, its cache in a temporary folder."""
    folder = tmp_path_factory.mktemp("hierarchy")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELAB_CACHE", str(folder))
        patch.delenv(hierarchy.RECORD_ENV, raising=False)
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["hierarchy", "--quick", "--json"])
        assert code == 0
        data = json.loads(out.getvalue())
        yield data, folder


@pytest.mark.gpu
def test_latency_grows_outward(measured):
    data, _ = measured
    cycles = {level: m["cycles_per_load"] for level, m in data["latencies"].items()}
    assert cycles["shared"] < cycles["l2"]
    assert cycles["l1"] < cycles["l2"] < cycles["hbm"]
    assert cycles["hbm"] <= cycles["hbm_tlb"] * 1.05  # TLB misses only add
    for m in data["latencies"].values():
        assert 300 < m["clock_mhz"] < 2500  # cycles and ns agree on a plausible SM clock
        assert m["ns_per_load"] > 0


@pytest.mark.gpu
def test_hbm_bandwidth_matches_the_copy_ceiling(measured):
    data, _ = measured
    rates = {name: b["gbps"] for name, b in data["bandwidths"].items()}
    ceiling = rates["copy_ceiling"]  # torch's copy, as `kernelab ceilings` times it
    # Like with like: a copy (read + write) against the copy ceiling, same buffers.
    assert rates["hbm_copy"] == pytest.approx(ceiling, rel=0.05)
    # A read-only stream skips the write turnaround and may beat a copy, never fall far short.
    assert rates["hbm_read"] >= 0.95 * ceiling
    datasheet = data["bandwidths"]["hbm_read"]["datasheet_gbps"]
    assert datasheet is None or rates["hbm_read"] <= 1.02 * datasheet


@pytest.mark.gpu
def test_bandwidth_falls_outward_and_stays_physical(measured):
    data, _ = measured
    b = data["bandwidths"]
    # Half the L2 may not all stay resident (two partitions); an eighth of it does.
    l2 = max(b["l2"]["gbps"], b["l2_small"]["gbps"])
    assert b["smem"]["gbps"] > l2 > b["hbm_read"]["gbps"] > b["h2d"]["gbps"]
    # 128 B/clk/SM at the boost clock and the PCIe rate are caps no measurement may pass.
    for name in ("smem", "h2d", "d2h"):
        cap = b[name]["datasheet_gbps"]
        assert cap is None or b[name]["gbps"] <= 1.02 * cap, name
    assert b["h2d"]["gbps"] > 5 and b["d2h"]["gbps"] > 5


@pytest.mark.gpu
def test_the_record_is_cached_for_the_pipeline_lens(measured, monkeypatch):
    data, folder = measured
    monkeypatch.setenv("KERNELAB_CACHE", str(folder))
    monkeypatch.delenv(hierarchy.RECORD_ENV, raising=False)
    spec = get_gpu(data["gpu_id"])
    latencies = load_measured_latencies(spec)
    assert latencies == {
        "hbm": data["latencies"]["hbm"]["ns_per_load"],
        "l2": data["latencies"]["l2"]["ns_per_load"],
    }
    assert pipeline.memory_latency(spec, "hbm").measured


@pytest.mark.gpu
def test_a_chase_on_the_device_walks_the_whole_cycle(tmp_path, monkeypatch):
    """A small L2 chase: a warm lap and then `nodes` timed steps end where they began."""
    import torch

    from kernelab.probes.chase import run_chase

    monkeypatch.setenv("KERNELAB_CACHE", str(tmp_path))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    plan = ChasePlan("l2", "small", "chase_global_cg", 64 * 1024, 128, 512, True)
    assert plan.nodes == 512
    (run,) = run_chase(plan, l2_bytes=l2, repeats=1)
    assert run.cycles > 0 and run.ns > 0
    assert run.last == run.start  # 1024 loads around a 512-node cycle: back at the start

    off_by_one = ChasePlan("l2", "small", "chase_global_cg", 64 * 1024, 128, 511, True)
    (run,) = run_chase(off_by_one, l2_bytes=l2, repeats=1)
    assert run.last != run.start
