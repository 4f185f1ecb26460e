"""The wall around a solution's worker (kernelab.evaluate.wall), seen from inside and out: a
small probe started through the launcher reports what it can reach; a step the kernel
refuses is named, with its consequence. What the wall costs per solution is measured by
benchmarks/wall_cost.py."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelab.evaluate import wall

EVAL = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
PR_GET_DUMPABLE = 3

PROBE = textwrap.dedent(
    """
    import ctypes, errno, json, os, signal, sys
    judge, problem = int(sys.argv[1]), sys.argv[2]
    seen = {"pid": os.getpid(), "uid": os.getuid(),
            "judge_listed": str(judge) in os.listdir("/proc")}
    libc = ctypes.CDLL(None, use_errno=True)
    seen["ptrace"] = libc.ptrace(16, judge, None, None) == 0 or ctypes.get_errno()
    try:
        os.kill(judge, 0)
        seen["signal"] = "sent"
    except OSError as exc:
        seen["signal"] = errno.errorcode[exc.errno]
    try:
        open(problem, "a").close()
        seen["write"] = "written"
    except OSError as exc:
        seen["write"] = errno.errorcode[exc.errno]
    try:
        import socket
        socket.create_connection(("1.1.1.1", 53), timeout=1)
        seen["network"] = "connected"
    except OSError as exc:
        seen["network"] = type(exc).__name__
    print(json.dumps(seen))
    """
)


def through_the_wall(argv: list[str], read_only: list[str]) -> tuple[dict, str]:
    """Run `argv` behind the wall as the judge would; (the wall's report, the program's
    stdout)."""
    report, done = wall.run_behind(argv, read_only=read_only)
    assert done.returncode == 0, done.stderr
    return report, done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the full wall needs root (CI runs as root)")
def test_from_inside_the_wall_the_judge_is_out_of_reach(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text("# a problem file\n")
    report, out = through_the_wall(
        [sys.executable, "-I", "-c", PROBE, str(os.getpid()), str(problem)],
        read_only=[str(tmp_path), sys.prefix],
    )
    seen = json.loads(out)
    assert report["refused"] == [], report
    assert seen["pid"] == 1  # PID 1 of its own namespace: its death ends every descendant
    assert seen["uid"] >= wall.WORKER_UID_BASE
    assert not seen["judge_listed"]  # a /proc of its own
    assert seen["ptrace"] in ("ESRCH", errno.ESRCH, errno.EPERM)
    assert seen["signal"] in ("ESRCH", "EPERM")
    assert seen["write"] in ("EROFS", "EACCES")
    assert seen["network"] != "connected"
    assert problem.read_text() == "# a problem file\n"


def test_the_worker_and_its_children_are_the_oom_killers_first_pick():
    # the rlimits hold per process: forked workers could take the machine's memory together
    child = "import os; os.waitpid(os.spawnv(os.P_NOWAIT, '/bin/cat', ['cat', "
    child += "'/proc/self/oom_score_adj']), 0); print(open('/proc/self/oom_score_adj').read())"
    report, out = through_the_wall([sys.executable, "-I", "-c", child], read_only=[sys.prefix])
    assert "first for the OOM killer" in report["applied"], report
    assert out.split() == [str(wall.OOM_SCORE_ADJ)] * 2  # a child's, then the worker's own


def test_a_namespace_the_kernel_refuses_is_named_with_its_consequence(monkeypatch):
    asked = []

    def refuse_pid_namespaces(flags: int) -> None:
        asked.append(flags)
        if flags & wall.CLONE_NEWPID:
            raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(wall, "unshare", refuse_pid_namespaces)
    report = wall.Report()
    made = wall._unshare(report, as_root=True)
    assert made == {"mount", "network", "ipc"}
    [refusal] = report.refused
    assert refusal.startswith("pid namespace refused (EPERM")
    assert "a daemon it starts is found by its uid only" in refusal
    assert "mount namespace" in report.applied


def test_the_judges_downgrades_reach_the_verdict(monkeypatch):
    from kernelab.evaluate import sandbox
    from kernelab.evaluate.evaluator import Evaluator
    from kernelab.evaluate.formats import load_problem
    from kernelab.evaluate.verdict import Options

    real_plan = wall.plan

    def plan_with_a_root_only_gpu(**kwargs):
        plan, notes = real_plan(**kwargs)
        return plan, [*notes, "uid switch skipped: /dev/nvidiactl is open to root only"]

    monkeypatch.setattr(sandbox.wall, "plan", plan_with_a_root_only_gpu)
    problem = load_problem(EVAL / "kernelbench" / "relu.py", device="cpu", scale=0.0625)
    found = Evaluator(problem, Options(seeds=1, seed=5, repeat_calls=2))
    verdict = found.evaluate(EVAL / "kernelbench/solutions/relu/correct/model_new.py")
    assert verdict.status == "pass", verdict.message
    assert "wall lowered: uid switch skipped: /dev/nvidiactl is open to root only" in verdict.notes
    assert any("uid switch skipped" in line for line in verdict.wall["refused"])
    assert ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0  # the judge, undumpable


def test_read_only_roots_are_deduplicated_and_spare_the_scratch_directory():
    roots = wall.read_only_roots(["/usr/lib", "/usr", "/tmp/x/y", "/tmp", "/"], "/tmp/kw-1")
    assert roots == ["/usr", "/tmp/x/y"]


def test_gpu_nodes_open_to_a_group_lend_it_and_root_only_nodes_keep_root(monkeypatch, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the uid switch is planned for a root judge only")
    shared, grouped, private = tmp_path / "nvidia0", tmp_path / "nvidiactl", tmp_path / "nvidia-uvm"
    folder = tmp_path / "nvidia-caps"  # a directory beside the nodes: not a node
    folder.mkdir()
    for node, mode in ((shared, 0o666), (grouped, 0o660), (private, 0o600)):
        os.mknod(node, 0o020000 | mode, os.makedev(1, 3))  # character devices, like /dev/null
        os.chown(node, 0, 44)
        node.chmod(mode)
    monkeypatch.setattr(wall, "_gpu_nodes", lambda: [str(folder), str(shared), str(grouped)])
    plan, notes = wall.plan(read_only=[], scratch=str(tmp_path), on_gpu=True, cpu_seconds=1)
    assert plan["uid"] is not None and plan["groups"] == [44] and notes == []
    monkeypatch.setattr(wall, "_gpu_nodes", lambda: [str(shared), str(private)])
    plan, notes = wall.plan(read_only=[], scratch=str(tmp_path), on_gpu=True, cpu_seconds=1)
    assert plan["uid"] is None
    [note] = notes
    assert note.startswith(f"uid switch skipped: {private} is open to root only (mode 0o600)")


JUDGE_THAT_DIES = textwrap.dedent(
    """
    import json, os, subprocess, sys, tempfile, time
    from kernelab.evaluate import wall
    scratch = tempfile.mkdtemp(prefix="kernelab-worker-")
    plan, _ = wall.plan(read_only=[sys.prefix], scratch=scratch, on_gpu=False, cpu_seconds=60)
    if plan["uid"] is not None:
        os.chown(scratch, plan["uid"], plan["gid"])
    read, write = os.pipe()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "kernelab.evaluate.wall", json.dumps(plan), str(write), "--",
         sys.executable, "-I", "-c", "import time; time.sleep(120)"], pass_fds=(write,),
        start_new_session=True)
    os.close(write)
    report = [json.loads(line) for line in os.fdopen(read).read().splitlines()]  # to its end
    worker = report[0]["pid"]  # set up and exec'd: the wall's report is closed
    print(json.dumps({"launcher": launcher.pid, "worker": worker}), flush=True)
    time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and waiting for its reaper, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def test_a_judge_killed_from_outside_takes_its_launcher_and_worker_along():
    # As a Ray actor cut at its deadline is: SIGKILL, no chance to close its workers.
    judge = subprocess.Popen([sys.executable, "-c", JUDGE_THAT_DIES], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    try:
        pids = json.loads(judge.stdout.readline())
        assert _alive(pids["launcher"]) and _alive(pids["worker"])
    finally:
        judge.kill()
        judge.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (_alive(pids["launcher"]) or _alive(pids["worker"])):
        time.sleep(0.05)
    assert not _alive(pids["launcher"]) and not _alive(pids["worker"])


def test_the_workers_import_path_is_absolute_and_finds_this_kernelab(monkeypatch, tmp_path):
    """The launcher and the worker start in the worker's scratch folder: a relative
    PYTHONPATH entry (gpu_suite.sh's src) would name a folder in there, so every entry is
    made absolute against the judge's folder, after the folder that holds this kernelab."""
    import os

    import kernelab
    from kernelab.evaluate import wall

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["src", "", "/opt/x"]))
    entries = wall.import_path().split(os.pathsep)
    assert entries[0] == os.path.dirname(os.path.dirname(os.path.realpath(kernelab.__file__)))
    assert entries[1:] == [str(tmp_path / "src"), "/opt/x"]
    assert wall.worker_environment(str(tmp_path / "scratch"))["PYTHONPATH"] == wall.import_path()
