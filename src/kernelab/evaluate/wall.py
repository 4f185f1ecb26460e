"""The wall between a solution's worker and the judge, in the manner of isolate, nsjail and
bubblewrap: `python -m kernelab.evaluate.wall PLAN_JSON REPORT_FD -- WORKER_ARGV...`.

The judge starts this launcher (stdlib only, so it costs an interpreter start and no more);
the launcher builds the wall and then becomes the worker's parent:

1. new PID, mount, network and IPC namespaces (as root directly; otherwise inside a new user
   namespace that maps the judge's uid onto itself);
2. a fork: the child is PID 1 of the new PID namespace, so when it dies the kernel kills
   every process left in the namespace, a double-forked setsid() daemon included;
3. in the child: mounts made private, a fresh /proc (only the namespace's processes: the
   judge has no /proc entry there to read, write or signal), the problem, the solution, the
   judge's code and the interpreter's tree bind-mounted read-only;
4. rlimits (processes, file size, core dumps, CPU time; address space on a CPU-only run),
   and the OOM killer's first pick (oom_score_adj 1000, inherited by every child: the limits
   hold per process, so forked workers could take the machine's memory together);
5. as root: supplementary groups of the GPU's device nodes, then a dedicated unprivileged
   uid and gid. The worker keeps one capability, CAP_DAC_READ_SEARCH (read and traverse any
   file), because the interpreter and its packages may sit where only root can read (a
   pyenv under /root); it can write only what its uid may;
6. no_new_privs, and SIGKILL when the launcher dies; then exec the worker.

Every step that the kernel refuses is skipped and named in the report, which the launcher
writes (one JSON line) to REPORT_FD before exec: the judge puts it in the verdict. The
launcher's own line comes first ({"pid": the worker's pid as the judge sees it}).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import random
import resource
import signal
import stat
import sys

OOM_SCORE_ADJ = 1000  # the most: the worker and its children are the OOM killer's first pick
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
# statvfs flags a remount must keep (a user namespace may not drop them: they are locked)
KEPT_MOUNT_FLAGS = {
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
CAP_DAC_READ_SEARCH = 2
CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def prctl(option: int, value: int = 0, extra: int = 0) -> None:
    _check(
        _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(extra),
                    ctypes.c_ulong(0), ctypes.c_ulong(0)),
        f"prctl({option})",
    )  # fmt: skip


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:  # fmt: skip
    _check(
        _libc.mount(
            None if source is None else source.encode(), target.encode(),
            None if fstype is None else fstype.encode(), ctypes.c_ulong(flags),
            None if data is None else data.encode(),
        ),
        f"mount {target}",
    )  # fmt: skip


def unshare(flags: int) -> None:
    """unshare(2) (os.unshare exists from Python 3.12 only)."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def forbid_tracing() -> None:
    """Make this process (the judge) undumpable: only a process with CAP_SYS_PTRACE in its
    user namespace may ptrace it or open its /proc/PID/mem and fd/ links."""
    prctl(PR_SET_DUMPABLE, 0)


def _keep_read_capability() -> None:
    """After the switch to an unprivileged uid: keep CAP_DAC_READ_SEARCH (and nothing else)
    across exec, as an ambient capability."""
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    bit = 1 << CAP_DAC_READ_SEARCH
    data[0].effective = data[0].permitted = data[0].inheritable = bit
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{errno.errorcode.get(exc.errno, exc.errno)}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"


class Report:
    def __init__(self) -> None:
        self.applied: list[str] = []
        self.refused: list[str] = []

    def step(self, name: str, action, *, consequence: str) -> bool:
        try:
            action()
        except Exception as exc:
            self.refused.append(f"{name} refused ({_why(exc)}): {consequence}")
            return False
        self.applied.append(name)
        return True


def _unshare(report: Report, as_root: bool) -> set[str]:
    """The namespaces the kernel grants, all at once where it can, else one by one."""
    made: set[str] = set()
    wanted = {"pid": CLONE_NEWPID, "mount": CLONE_NEWNS, "network": CLONE_NEWNET,
              "ipc": CLONE_NEWIPC}  # fmt: skip
    if not as_root:
        uid, gid = os.getuid(), os.getgid()

        def user_namespace() -> None:
            unshare(CLONE_NEWUSER)
            with open("/proc/self/setgroups", "w") as handle:
                handle.write("deny")
            with open("/proc/self/uid_map", "w") as handle:
                handle.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as handle:
                handle.write(f"{gid} {gid} 1")

        if not report.step(
            "user namespace", user_namespace,
            consequence="no PID, mount or network namespace without root: the worker can see "
            "the judge's processes and write whatever the judge's user may",
        ):  # fmt: skip
            return made
    try:
        flags = 0
        for flag in wanted.values():
            flags |= flag
        unshare(flags)
        made = set(wanted)
        report.applied.append("pid, mount, network and ipc namespaces")
        return made
    except OSError:
        pass
    consequences = {
        "pid": "the worker sees the judge's processes, and a daemon it starts "
        + ("is found by its uid only" if as_root else "may outlive the run"),
        "mount": "no private /proc and no read-only view of the judge's files",
        "network": "the worker may use the network",
        "ipc": "the worker shares System V IPC with the host",
    }
    for name, flag in wanted.items():
        if report.step(f"{name} namespace", lambda flag=flag: unshare(flag),
                       consequence=consequences[name]):  # fmt: skip
            made.add(name)
    return made


def _private_mounts(report: Report, made: set[str], read_only: list[str]) -> None:
    if "mount" not in made:
        return
    if not report.step(
        "private mounts", lambda: _mount(None, "/", None, MS_REC | MS_PRIVATE),
        consequence="no private /proc and no read-only view of the judge's files",
    ):  # fmt: skip
        return
    if "pid" in made:
        report.step(
            "private /proc",
            lambda: _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC),
            consequence="the worker's /proc lists the judge's processes",
        )
    if os.path.isdir("/dev/shm"):
        # A tmpfs of the worker's own: what it leaves in shared memory goes with its namespace.
        report.step(
            "private /dev/shm",
            lambda: _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"),
            consequence="files the worker leaves in /dev/shm outlive it until the sweep",
        )
    for path in read_only:
        try:
            os.stat(path)
        except FileNotFoundError:
            continue  # nothing there to protect
        except OSError as exc:
            report.refused.append(f"read-only {path} refused ({_why(exc)}): it is not protected")
            continue

        def bind(path=path) -> None:
            _mount(path, path, None, MS_BIND | MS_REC)
            kept = 0
            flags = os.statvfs(path).f_flag
            for statvfs_flag, mount_flag in KEPT_MOUNT_FLAGS.items():
                if flags & statvfs_flag:
                    kept |= mount_flag
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept)

        report.step(
            f"read-only {path}", bind, consequence=f"{path} is as writable as its modes allow"
        )


def _limits(report: Report, limits: dict) -> None:
    names = {"processes": resource.RLIMIT_NPROC, "file_bytes": resource.RLIMIT_FSIZE,
             "core_bytes": resource.RLIMIT_CORE, "cpu_seconds": resource.RLIMIT_CPU,
             "address_bytes": resource.RLIMIT_AS}  # fmt: skip
    for name, value in limits.items():
        if value is None:
            continue
        report.step(
            f"limit {name}={value}",
            lambda kind=names[name], value=value: resource.setrlimit(kind, (value, value)),
            consequence=f"no limit on {name.replace('_', ' ')}",
        )


def _drop_user(report: Report, plan: dict) -> None:
    uid, gid, groups = plan["uid"], plan["gid"], plan["groups"]

    def switch() -> None:
        os.setgroups(groups)
        os.setresgid(gid, gid, gid)
        prctl(PR_SET_KEEPCAPS, 1)
        os.setresuid(uid, uid, uid)
        _keep_read_capability()

    report.step(
        f"uid {uid}", switch,
        consequence="the worker runs as root: it can undo the namespaces and read-only mounts",
    )  # fmt: skip


def _first_for_the_oom_killer() -> None:
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write(str(OOM_SCORE_ADJ))


def _child(plan: dict, made: set[str], report: Report, report_fd: int, argv: list[str]) -> None:
    _private_mounts(report, made, plan["read_only"])
    _limits(report, plan["limits"])
    # The rlimits hold per process, and a worker may fork: whatever memory they take together,
    # when the machine runs out the kernel kills the worker's processes before the judge.
    report.step("first for the OOM killer", _first_for_the_oom_killer,
                consequence="out of memory, the kernel may kill the judge before the worker")  # fmt: skip
    if plan.get("uid") is not None:
        _drop_user(report, plan)
    report.step("no_new_privs", lambda: prctl(PR_SET_NO_NEW_PRIVS, 1),
                consequence="a setuid program could raise the worker's privileges")  # fmt: skip
    report.step("killed with its launcher", lambda: prctl(PR_SET_PDEATHSIG, signal.SIGKILL),
                consequence="the worker may outlive a killed launcher")  # fmt: skip
    line = json.dumps({"applied": report.applied, "refused": report.refused})
    os.write(report_fd, (line + "\n").encode())
    os.close(report_fd)
    os.execve(argv[0], argv, plan["env"])


def launch(plan: dict, report_fd: int, argv: list[str]) -> int:
    report = Report()
    as_root = os.geteuid() == 0
    made = _unshare(report, as_root)
    # The launcher dies with the judge (a judge killed from outside, as a Ray actor cut at its
    # deadline is), and the worker with its launcher (_child): nothing outlives a dead judge.
    # Set after the namespaces, whose new capabilities clear it; a judge already gone by then
    # has left this launcher to init: stop.
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != plan.get("judge_pid", os.getppid()):
        return 1
    child = os.fork()
    if child == 0:
        try:
            _child(plan, made, report, report_fd, argv)
        except BaseException as exc:  # never return into the launcher's code
            os.write(2, f"kernelab wall: {_why(exc)}\n".encode())
            os._exit(126)
    os.write(report_fd, (json.dumps({"pid": child}) + "\n").encode())
    os.close(report_fd)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # the judge sees the worker's signal as the launcher's
    return os.waitstatus_to_exitcode(status)


# --- the judge's side ---------------------------------------------------------------------

WORKER_UID_BASE = 200_000  # dedicated uids, one per worker, far from any real user's
WORKER_UID_SPAN = 1_000_000
PROCESS_LIMIT = 4096  # threads count: torch's pools and a compile's workers fit
FILE_BYTES_LIMIT = 8 << 30
SWEEP_ROUNDS = 10
ENVIRONMENT_KEPT = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "LANG", "TZ")
ENVIRONMENT_PREFIXES = ("CUDA_", "NVIDIA_", "TRITON_", "TORCH", "KERNELAB_", "OMP_", "MKL_",
                        "LC_", "PYTORCH_", "NCCL_")  # fmt: skip
GPU_NODES = "/dev"


def _gpu_nodes() -> list[str]:
    try:
        names = os.listdir(GPU_NODES)
    except OSError:
        return []
    return sorted(os.path.join(GPU_NODES, n) for n in names if n.startswith("nvidia"))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def read_only_roots(paths: list[str], keep_writable: str) -> list[str]:
    """The directories and files to bind read-only: each path once, none inside another,
    none that holds `keep_writable` (the worker's scratch directory)."""
    roots: list[str] = []
    for path in sorted({os.path.realpath(p) for p in paths if p}, key=len):
        if path == "/" or _within(keep_writable, path):
            continue
        if not any(_within(path, root) for root in roots):
            roots.append(path)
    return roots


def python_command() -> list[str]:
    """How the judge starts the launcher and the worker: this interpreter, without the user's
    own site-packages (-s) unless kernelab itself is installed there. A worker that keeps the
    judge's uid (a judge run without root) could write a .pth file into that folder, which
    every later Python of the user would run at start, outside the wall."""
    import site

    import kernelab

    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and _within(os.path.realpath(kernelab.__file__), os.path.realpath(user_site)):
        return [sys.executable]
    return [sys.executable, "-s"]


def import_path() -> str:
    """PYTHONPATH for the launcher and the worker, which start in the worker's scratch folder:
    the folder that holds this kernelab first (the judge may have found it through its own
    working folder), then the judge's PYTHONPATH, every entry made absolute against the
    judge's working folder (a relative one would name a folder inside the scratch)."""
    import kernelab

    entries = [os.path.dirname(os.path.dirname(os.path.realpath(kernelab.__file__)))]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry:
            entries.append(os.path.abspath(entry))
    return os.pathsep.join(dict.fromkeys(entries))


def worker_environment(scratch: str) -> dict:
    """The judge's environment, less what the worker has no use for (tokens, keys), and the
    caches and home pointed into its own scratch directory."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key in ENVIRONMENT_KEPT or key.startswith(ENVIRONMENT_PREFIXES)
    }
    env.update(
        PYTHONPATH=import_path(),
        HOME=scratch, TMPDIR=os.path.join(scratch, "tmp"), USER="kernelab-worker",
        LOGNAME="kernelab-worker", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
        XDG_CACHE_HOME=os.path.join(scratch, "cache"),
        TRITON_CACHE_DIR=os.path.join(scratch, "triton"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(scratch, "inductor"),
        CUDA_CACHE_PATH=os.path.join(scratch, "nv"),
    )  # fmt: skip
    return env


def plan(*, read_only: list[str], scratch: str, on_gpu: bool, cpu_seconds: float,
         uid: int | None = None) -> tuple[dict, list[str]]:  # fmt: skip
    """The launcher's plan for one worker, and the judge's own downgrades (said before the
    launcher runs: a GPU node only root may open keeps the worker root)."""
    notes: list[str] = []
    groups: set[int] = set()
    as_root = os.geteuid() == 0
    if as_root and uid is None:
        uid = WORKER_UID_BASE + random.SystemRandom().randrange(WORKER_UID_SPAN)
    if as_root and on_gpu:
        for node in _gpu_nodes():
            try:
                mode = os.stat(node)
            except OSError:
                continue
            if not stat.S_ISCHR(mode.st_mode) or mode.st_mode & 0o006 == 0o006:
                continue
            if mode.st_mode & 0o060 == 0o060:
                groups.add(mode.st_gid)
                continue
            notes.append(
                f"uid switch skipped: {node} is open to root only (mode "
                f"{oct(mode.st_mode & 0o777)}): the worker runs as root behind the namespaces, "
                "which a root worker can undo"
            )
            uid = None
            break
    if not as_root:
        uid = None
        notes.append(
            "uid switch skipped: the judge is not root, so the worker keeps the judge's uid and "
            "may write wherever the judge's user may (its home, any folder it owns); what it "
            "leaves there is neither read-only nor swept"
        )
    limits = {
        "processes": PROCESS_LIMIT,
        "file_bytes": FILE_BYTES_LIMIT,
        "core_bytes": 0,
        "cpu_seconds": int(cpu_seconds * (os.cpu_count() or 1)) + 60,
        "address_bytes": None if on_gpu else max(
            2 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), 32 << 30
        ),
    }  # fmt: skip
    return {
        "uid": uid,
        "gid": uid,
        "groups": sorted(groups),
        "read_only": read_only_roots(read_only, scratch),
        "limits": limits,
        "env": worker_environment(scratch),
        "judge_pid": os.getpid(),
    }, notes


# Folders anyone may write: where a worker's files could outlive it. sweep() removes what the
# worker's uid left there, walking only into folders anyone may write (the worker can create
# nothing elsewhere) and removing a folder of its own whole, links never followed.
WORLD_WRITABLE_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")


def remove_tree(path: str) -> bool:
    """Remove a folder and everything in it, however deep, links never followed; whether it
    is gone. Iterative, each level opened relative to its parent (O_NOFOLLOW): a worker's
    folder nested thousands deep, whose path outgrows PATH_MAX and whose depth outgrows
    Python's recursion (shutil.rmtree recurses), goes as a shallow one does."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    parent, name = os.path.split(os.path.abspath(path))
    try:
        top_parent = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return not os.path.lexists(path)
    # a stack of (fd of a folder, its name in its parent): the deepest folder last
    stack: list[tuple[int, str]] = []
    try:
        try:
            stack.append((os.open(name, flags, dir_fd=top_parent), name))
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=top_parent)  # a file or a link, not a folder
            return not os.path.lexists(path)
        while stack:
            fd, _ = stack[-1]
            descended = False
            try:
                entries = list(os.scandir(fd))
            except OSError:
                entries = []
            for entry in entries:
                try:
                    is_folder = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_folder = False
                if is_folder:
                    try:
                        stack.append((os.open(entry.name, flags, dir_fd=fd), entry.name))
                        descended = True
                        break
                    except OSError:
                        pass
                with contextlib.suppress(OSError):
                    os.unlink(entry.name, dir_fd=fd)
            if descended:
                continue
            fd, folder = stack.pop()
            os.close(fd)
            parent_fd = stack[-1][0] if stack else top_parent
            try:
                os.rmdir(folder, dir_fd=parent_fd)
            except OSError:
                if stack:  # a folder that cannot go would be revisited forever: give up
                    return False
    finally:
        for fd, _ in stack:
            with contextlib.suppress(OSError):
                os.close(fd)
        os.close(top_parent)
    return not os.path.lexists(path)


def sweep_roots() -> tuple[str, ...]:
    """WORLD_WRITABLE_ROOTS, and the judge's working folder when anyone may write it (a
    shared folder outside them, where a worker could leave a module for whoever runs Python
    there next)."""
    try:
        here = os.getcwd()
        shared = os.stat(here).st_mode & stat.S_IWOTH
    except OSError:
        return WORLD_WRITABLE_ROOTS
    # (inside /tmp too: the walk from /tmp reaches it only through folders anyone may write)
    return WORLD_WRITABLE_ROOTS + ((here,) if shared and here not in WORLD_WRITABLE_ROOTS else ())


def sweep_files(uid: int, roots=None) -> int:
    """Remove every file and folder owned by `uid` under `roots` (sweep_roots()); how many
    were removed. Never raises: whatever the worker left, the judge's closing goes on."""
    removed = 0
    stack = [root for root in (roots or sweep_roots()) if os.path.isdir(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid == uid:
                try:
                    if stat.S_ISDIR(info.st_mode):
                        gone = remove_tree(entry.path)
                    else:
                        os.unlink(entry.path)
                        gone = True
                    removed += gone
                except Exception:  # noqa: BLE001 - one odd entry must not stop the sweep
                    continue
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
                stack.append(entry.path)
    return removed


def sweep(uid: int | None) -> int:
    """Kill every process of `uid` (a dedicated worker uid: nobody else's), until none is
    left; how many were killed. Where the PID namespace was refused, this is what finds a
    daemon the worker left behind."""
    if uid is None:
        return 0
    killed = 0
    for _ in range(SWEEP_ROUNDS):
        found = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/status") as handle:
                    owner = next(
                        (int(line.split()[1]) for line in handle if line.startswith("Uid:")),
                        None,
                    )
            except (OSError, ValueError):
                continue
            if owner == uid:
                found += 1
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    continue
        killed += found
        if not found:
            break
    return killed


def run_behind(argv: list[str], *, read_only: list[str], on_gpu: bool = False,
               cpu_seconds: float = 60, timeout: float = 60):  # fmt: skip
    """Run `argv` behind the wall as the judge starts a worker (its plan, a scratch folder of
    the worker's uid, the launcher, then the sweep and the folder's removal), for a program
    that needs no pipes to the judge; (what the wall applied and refused, the finished
    process with its output)."""
    import subprocess
    import tempfile

    scratch = tempfile.mkdtemp(prefix="kernelab-worker-")
    plan_, notes = plan(read_only=read_only, scratch=scratch, on_gpu=on_gpu,
                        cpu_seconds=cpu_seconds)  # fmt: skip
    if plan_["uid"] is not None:
        os.chown(scratch, plan_["uid"], plan_["gid"])
    read, write = os.pipe()
    try:
        done = subprocess.run(
            [*python_command(), "-m", "kernelab.evaluate.wall", json.dumps(plan_), str(write), "--",
             *argv],
            pass_fds=(write,), capture_output=True, text=True, timeout=timeout,
            cwd=scratch, env={**os.environ, "PYTHONPATH": import_path()},
        )  # fmt: skip
    finally:
        os.close(write)
        with os.fdopen(read) as handle:
            lines = [json.loads(line) for line in handle.read().splitlines()]
        sweep(plan_["uid"])
        remove_tree(scratch)
    report = {"applied": [], "refused": list(notes)}
    for line in lines:
        report["applied"] += line.get("applied", [])
        report["refused"] += line.get("refused", [])
    return report, done


def main(args: list[str]) -> int:
    plan = json.loads(args[0])
    report_fd = int(args[1])
    argv = args[args.index("--") + 1 :]
    return launch(plan, report_fd, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
