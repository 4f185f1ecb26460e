"""Launch plans: a Triton op's launches recorded once per input signature, then replayed.

A call through Triton's front door (`kernel[grid](*args)`) binds and specializes its
arguments, hashes them into the compile cache and asks for the current device and stream;
an op here also ranks candidates, probes occupancy and looks up tuned configs before it
launches. On the H200's host that came to 66-213 us a call against torch's 11-20 us
(host_cost_profile.py), while the launch itself is a few.
None of it changes while the shapes, strides, dtypes, pointer alignment and stream stay the
same, so each op keeps a plan per such signature: the compiled kernels, their grids and
their argument lists with the call's tensors left as slots. A hit fills the slots and
launches each compiled kernel: on the lean path (the default, see DIRECT) through one
cuLaunchKernel (direct_launch.py) or the compiled kernel's launcher without hook arguments;
with KERNELAB_DIRECT_LAUNCH=0 through `compiled[grid]` (Triton's hooked launch path).
Triton 3.5+ keeps its launch hooks as HookChain objects that are never None, so a test for
None alone would take the hooked path wherever the chains exist: _hooks_idle reads an empty
chain as no hook.

A plan is installed only when it is safe to replay:
- every tensor a launch received is one of the call's tensors (by data pointer) or a view of
  a workspace the op declared with keep(): a workspace that needs no per-call fill (scratch
  written before it is read, counters every launch leaves at zero, turn words the kernel
  itself continues). A tensor the op made and did not declare (a zeroed per-call workspace)
  leaves the call unplanned, since its fill is torch work the plan cannot see;
- two calls in a row recorded the same launches (kernels, grids, scalars, slots): a call
  that tunes, or one whose scalars change from call to call, never matches its successor;
- nothing is planned while a CUDA graph is captured, under the interpreter, or with
  KERNELAB_LAUNCH_PLANS=0;
- a key whose calls failed to plan MOST_FAILED_RECORDINGS times is given up: its calls take
  the front door unrecorded, since recording costs host time of its own.
Scalars are replayed as recorded, so each op's key must hold every scalar its caller passes
(eps, flags): callers build keys with signature(...) plus those.

An op uses it from outside: it writes a plain launch function, `launch(*tensors, *options)`
that launches its kernels as Triton has them launched (`kernel[grid](...)`, an autotuned
kernel too), declares its workspaces with keep(), and decorates it with
@planned(op, tensors=N); the decorator builds the key, replays a plan or records the call.
The op's file holds no plan object and no lambda.

A recording sees the launches through Triton's own front door: this module wraps
JITFunction.run once, when it is imported (watched()), so that every launch a thread makes
while it records is added to its recording: an autotuner's chosen config arrives with its
meta-parameters, since Triton's Autotuner and Heuristics call the wrapped run of the kernel
under them. Outside a recording the wrapper costs a thread-local lookup per launch. A launch
that must not be replayed (a tuner timing candidates inside a call) runs under unrecorded().
"""

from __future__ import annotations

import copy
import dataclasses
import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from functools import update_wrapper, wraps

# at module level: an import statement in a function runs on every call (0.4 us on the CPU
# here), and every op that plans launches has imported torch already
import torch

# Launches one call may record; a call that records more is tuning (timing candidates).
MOST_LAUNCHES_PER_CALL = 8
# Plans kept per op; the oldest goes first.
PLAN_CAPACITY = 256
# Calls of one key that may fail to plan (a refusal, or launches unlike the call before) before
# the key is given up and its calls take the front door without recording. Recording is not
# free: a forced cooperative softmax, refused every call for its zeroed workspace, cost 103 us
# of host time a call recorded against 80 unrecorded on an H100 (softmax_forced_host_cost.py).
# Eight, not one: a first call that probes or tunes refuses
# for a reason that goes away.
MOST_FAILED_RECORDINGS = 8

ENABLED = os.environ.get("KERNELAB_LAUNCH_PLANS", "1") != "0"


# The lean replay path: plain and TMA launches replay through cuLaunchKernel
# (direct_launch.py), and Triton's empty launch-hook chains count as no hook (_hooks_idle).
# On by default: on an H100 (Triton 3.6) it took the Triton ops' host cost over torch's at
# tiny sizes from +10.8-20.9 us (median of two runs, hooked path) to +1.9-8.3 us (median of
# seven). KERNELAB_DIRECT_LAUNCH=0 takes the hooked path instead.
def direct_from(environ) -> bool:
    """The lean path unless KERNELAB_DIRECT_LAUNCH is "0"."""
    return environ.get("KERNELAB_DIRECT_LAUNCH", "1") != "0"


DIRECT = direct_from(os.environ)


_NOT_LOOKED_UP = object()
# compiled_replay's plan_key, or None where the compiled replay is off or does not build.
# Looked up on the first key of a CUDA call, not at import: that is when the C file is built
# (a second, once per machine), and a process that never calls on a GPU never builds it.
_compiled_key = _NOT_LOOKED_UP


def _look_up_compiled_key():
    global _compiled_key
    from kernelab.runtime import compiled_replay

    built = compiled_replay.module() if compiled_replay.ENABLED else None
    _compiled_key = None if built is None else built.plan_key
    return _compiled_key


_local = threading.local()
_every_op: list[LaunchPlans] = []


class _Refused(Exception):
    pass


@dataclasses.dataclass
class _Launch:
    compiled: object
    grid: tuple[int, int, int]
    template: list  # the launcher's arguments, tensors of the call as None
    slots: list[tuple[int, int]]  # (position in template, index of the call's tensor)
    descriptors: list[tuple[int, int, object]]  # (position, tensor index, recorded descriptor)
    shape: tuple  # what two recordings must agree on
    names: list = dataclasses.field(default_factory=list)  # the kernel's parameters, in order
    direct: object = None  # a direct_launch.DirectLaunch, set when the plan is installed

    def run(self, tensors: tuple, stream: int, idle: bool) -> None:
        """Launch on the call's tensors; idle: no launch hook is set (_hooks_idle())."""
        if self.direct is not None and idle:
            self.direct(tensors, stream)
            return
        values = list(self.template)
        for position, index in self.slots:
            values[position] = tensors[index]
        for position, index, descriptor in self.descriptors:
            # the same sizes, strides and box over the new tensor (its alignment is in the key)
            rebased = copy.copy(descriptor)
            rebased.base = tensors[index]
            values[position] = rebased
        compiled = self.compiled
        if idle:
            # what compiled[grid](*values, stream=stream) ends in, without building its closure
            # and launch metadata each call (no profiler hook wants them)
            grid_x, grid_y, grid_z = self.grid
            compiled.run(grid_x, grid_y, grid_z, stream, compiled.function,
                         compiled.packed_metadata, None, None, None, *values)  # fmt: skip
        else:
            compiled[self.grid](*values, stream=stream)


class _Recording:
    def __init__(self, tensors: tuple):
        self.tensors = tensors
        self.pointers = [t.data_ptr() for t in tensors]
        self.kept: list = []
        self.launches: list[_Launch] = []
        self.refused: str | None = None

    def refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = reason

    def add(self, kernel, grid, args: tuple, kwargs: dict, compiled) -> None:
        if self.refused is not None:
            return
        if len(self.launches) >= MOST_LAUNCHES_PER_CALL:
            self.refuse("more launches than one call makes (tuning)")
            return
        try:
            self.launches.append(self._launch(kernel, grid, args, kwargs, compiled))
        except _Refused as why:
            self.refuse(str(why))

    def _launch(self, kernel, grid, args, kwargs, compiled) -> _Launch:
        if compiled is None or not hasattr(compiled, "packed_metadata"):
            raise _Refused("the launch returned no compiled kernel")
        if not hasattr(kernel, "params"):
            raise _Refused(f"cannot see the parameters of {type(kernel).__name__}")
        names = [p.name for p in kernel.params]
        bound = dict(zip(names, args, strict=False))
        # an autotuner's config arrives here among the keyword arguments (num_warps and the
        # like are options, not parameters)
        for name, value in kwargs.items():
            if name in names:
                bound[name] = value
        for param in kernel.params:
            if param.name not in bound:
                if not param.has_default:
                    raise _Refused(f"no value for {param.name}")
                bound[param.name] = param.default
        if callable(grid):
            grid = grid(bound)
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        template, slots, descriptors, shape = [], [], [], []
        for position, name in enumerate(names):
            value = bound[name]
            template.append(value)
            if hasattr(value, "data_ptr"):
                index = self._call_tensor(value)
                if index is not None:
                    template[position] = None
                    slots.append((position, index))
                    shape.append(("tensor", index))
                else:
                    kept = self._kept_view(value)
                    shape.append(("kept", kept, value.dtype, tuple(value.shape)))
            elif dataclasses.is_dataclass(value) and hasattr(value, "base"):
                index = self._call_tensor(value.base)
                if index is None:
                    raise _Refused(f"{name}: a descriptor of a tensor the call was not given")
                template[position] = None
                descriptors.append((position, index, value))
                fields = [
                    repr(getattr(value, f.name))
                    for f in dataclasses.fields(value)
                    if f.name != "base"
                ]
                shape.append(("descriptor", index, tuple(fields)))
            elif value is None or isinstance(value, (bool, int, float, str)):
                shape.append(("scalar", type(value).__name__, value))
            else:
                raise _Refused(f"{name}: an argument of type {type(value).__name__}")
        return _Launch(
            compiled=compiled,
            grid=grid,
            template=template,
            slots=slots,
            descriptors=descriptors,
            shape=(id(compiled), grid, tuple(shape)),
            names=names,
        )

    def _call_tensor(self, tensor) -> int | None:
        pointer = tensor.data_ptr()
        for index, (ours, theirs) in enumerate(zip(self.tensors, self.pointers, strict=True)):
            if pointer == theirs and tensor.dtype == ours.dtype:
                return index
        return None

    def _kept_view(self, tensor) -> tuple[int, int]:
        """(which declared workspace, byte offset into it) of a view of one; refuses others."""
        pointer = tensor.data_ptr()
        for number, kept in enumerate(self.kept):
            start = kept.data_ptr()
            if start <= pointer < start + kept.numel() * kept.element_size():
                return number, pointer - start
        raise _Refused("a tensor that is neither the call's nor a declared workspace")


def _direct_launch(step: _Launch):
    """The step's direct launch (direct_launch.py), or None: off, not a plain launch, or
    anything about it this process cannot check."""
    if not DIRECT:
        return None
    from kernelab.runtime import direct_launch

    try:
        return direct_launch.build(
            step.compiled, step.grid, step.names, step.template, step.slots, step.descriptors
        )
    except Exception:  # an unfamiliar Triton or driver: Triton's launcher still works
        return None


_runtime_knobs = None


def _hooks_idle() -> bool:
    """True when no launch hook (a profiler such as proton sets them) would see a launch.

    Triton 3.9 (this machine) keeps the hooks as HookChain objects that are never None; they
    came with triton-lang/triton PR #7866 (Triton 3.5). Idle is an empty
    chain (`.calls == []`) or None; anything else is a hook. Reading `is None` alone takes
    every replay down Triton's hooked path, which builds launch metadata on each call and
    never reaches a direct launch. On the H100's Triton 3.6 every replay of the launch-cost runs was a direct launch, so its default hooks read as
    idle here. Off the lean path (KERNELAB_DIRECT_LAUNCH=0) only None is idle, as before.
    The knobs object is looked up once: an import statement in here cost a microsecond a
    call."""
    global _runtime_knobs
    if _runtime_knobs is None:
        from triton import knobs

        _runtime_knobs = knobs.runtime
    enter, leave = _runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook
    if enter is None and leave is None:
        return True
    # written out, not a helper per hook: it runs on every replay, two calls fewer
    if not DIRECT:
        return False
    enter_calls = [] if enter is None else getattr(enter, "calls", None)
    leave_calls = [] if leave is None else getattr(leave, "calls", None)
    return (
        type(enter_calls) is list
        and not enter_calls
        and type(leave_calls) is list
        and not leave_calls
    )


def _active() -> _Recording | None:
    return getattr(_local, "recording", None)


def watched(front_door):
    """A kernel's run method (JITFunction.run: `run(self, *args, grid, warmup, **kwargs)`,
    what `kernel[grid](...)` calls and returns the compiled kernel of) that also adds each
    launch to the thread's recording, if one is under way. A warm-up compiles and launches
    nothing, so it is not recorded."""

    @wraps(front_door)
    def run(self, *args, grid, warmup, **kwargs):
        compiled = front_door(self, *args, grid=grid, warmup=warmup, **kwargs)
        recording = getattr(_local, "recording", None)
        if recording is not None and not warmup:
            recording.add(self, grid, args, kwargs, compiled)
        return compiled

    run.watched_by_launch_plans = True
    return run


def _watch_triton() -> None:
    """Wrap Triton's JITFunction.run in watched(), once per process."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:  # no Triton: nothing launches through it, nothing to record
        return
    if not getattr(JITFunction.run, "watched_by_launch_plans", False):
        JITFunction.run = watched(JITFunction.run)


_watch_triton()


@contextmanager
def unrecorded():
    """Launch without recording: a tuner's candidates timed inside a call are not part of
    the call's plan."""
    recording = _active()
    _local.recording = None
    try:
        yield
    finally:
        _local.recording = recording


def keep(*workspaces) -> None:
    """Declare tensors a plan may hold and pass again on every replay (see the module doc)."""
    recording = _active()
    if recording is not None:
        recording.kept.extend(workspaces)


def frozen(*options) -> tuple | None:
    """An op's options as plan-key scalars: dicts become sorted (key, value) tuples and lists
    tuples, all the way down; None when some value cannot be hashed (then the call goes
    unplanned through Triton's front door)."""
    try:
        return tuple(_frozen(option) for option in options)
    except TypeError:
        return None


def _frozen(value):
    if isinstance(value, dict):
        items = tuple(sorted(value.items()))
        try:
            hash(items)  # scalar values, the usual config: one pass (0.5 us against 3.6 here)
            return items
        except TypeError:
            return tuple(sorted((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    hash(value)
    return value


def signature(device, *tensors) -> tuple:
    """What the launches of a call depend on in its tensors: each one's device, shape, strides,
    dtype and 16-byte alignment (Triton specializes on it), which of them alias, and the
    device and stream. Each tensor's own device is in it because a direct launch passes bare
    addresses: a CPU or other-GPU tensor must never match a plan made for the device's own.

    Flat, with torch.Size kept as it is (a tuple): it is built on every call, and this form
    costs half of a nested one (1.6 us against 3.0 for three tensors on the CPU here); the
    addresses go into a set as they come, and a list of them is made only when two collide.
    get_device() and is_cuda, not device.type: that builds a string (0.19 us a call)."""
    return tuple(_described(device, tensors, len(tensors)))


def _described(device, tensors, count: int) -> list:
    """signature()'s entries for the first `count` of tensors, as a list: LaunchPlans.key()
    appends the scalars and makes the one tuple (no slice of tensors, no second tuple)."""
    cuda = count > 0 and tensors[0].is_cuda
    stream = torch._C._cuda_getCurrentRawStream(device.index) if cuda else 0
    key = [device.index, stream]
    addresses = set()
    for index in range(count):
        tensor = tensors[index]
        pointer = tensor.data_ptr()
        key += (tensor.get_device(), tensor.shape, tensor.stride(), tensor.dtype, pointer & 15)
        addresses.add(pointer)
    if len(addresses) < count:  # aliasing: say which tensors share an address
        pointers = [tensors[index].data_ptr() for index in range(count)]
        key.append(tuple(pointers.index(p) for p in pointers))
    return key


class LaunchPlans:
    """One op's plans, by key (signature() plus the op's scalars)."""

    def __init__(self, op: str):
        self.op = op
        self._plans: OrderedDict[tuple, list[_Launch]] = OrderedDict()
        self._pending: dict[tuple, tuple] = {}
        self._failed: OrderedDict[tuple, int] = OrderedDict()  # key: recordings that failed
        self.replays = 0
        self.last_refusal: str | None = None
        _every_op.append(self)

    def key(self, device, tensors: tuple, *scalars, fresh: int = 0) -> tuple | None:
        """The plan key of a call on these tensors with these scalars, or None where nothing
        is planned (off, not CUDA, a CUDA graph being captured). Under the interpreter a key
        is made but no plan ever installs: its launches return no compiled kernel.

        fresh: how many of the last tensors are outputs the op has just allocated (torch.empty
        and the like) with a shape, dtype and device that follow from the others'. They are
        left out of the signature: their strides follow too, their storage is new (it aliases
        nothing) and the caching allocator aligns every block to 512 bytes. That saves about a
        third of signature(), whose three tensors cost 2.4-3.8 us on the H100's host
        (host_cost_breakdown.py)."""
        if not ENABLED or not tensors[0].is_cuda or torch._C._cuda_isCurrentStreamCapturing():
            return None
        described = len(tensors) - fresh
        for index in range(described, len(tensors)):
            if tensors[index].data_ptr() & 15:
                return None  # another allocator's block: Triton's front door specializes on it
        compiled_key = _compiled_key
        if compiled_key is _NOT_LOOKED_UP:
            compiled_key = _look_up_compiled_key()
        if compiled_key is not None:  # the same tuple from C (compiled_replay.py)
            stream = torch._C._cuda_getCurrentRawStream(device.index)
            return compiled_key(device.index, stream, tensors, described, scalars)
        # one list, then one tuple: 18 % less than (*signature(...), scalars) with a slice and
        # a generator (1.36 against 1.65 us for vector_add's three tensors on the CPU here)
        key = _described(device, tensors, described)
        key.append(scalars)
        return tuple(key)

    def call(self, device, tensors: tuple, launches, *scalars, fresh: int = 0) -> None:
        """What an op does: replay its plan for these tensors and scalars, else run
        `launches()` (Triton's front door) and record it. fresh: as in key()."""
        key = self.key(device, tensors, *scalars, fresh=fresh)
        if not self.replay(key, tensors):
            with self.recording(key, tensors):
                launches()

    def replay(self, key, tensors: tuple) -> bool:
        """Launch the plan for key on these tensors; False when there is none."""
        plan = None if key is None else self._plans.get(key)
        if plan is None:
            return False
        stream, idle = key[1], _hooks_idle()  # once a call: a step is a few launches at most
        for step in plan:
            direct = step.direct
            if direct is not None and idle:
                direct(tensors, stream)  # what step.run does first, one call fewer
            else:
                step.run(tensors, stream, idle)
        self.replays += 1
        return True

    def installed(self, key) -> bool:
        return key in self._plans

    def given_up(self, key) -> bool:
        """Whether calls of key have failed to plan MOST_FAILED_RECORDINGS times (no install
        between): they are no longer recorded."""
        return self._failed.get(key, 0) >= MOST_FAILED_RECORDINGS

    @contextmanager
    def recording(self, key, tensors: tuple):
        """Record the launches of the body; installs a plan once two calls agree. A key of
        None records nothing."""
        if key is None or _active() is not None:  # or an op inside another op's recording
            yield
            return
        if self.given_up(key):
            yield
            return
        recording = _Recording(tensors)
        _local.recording = recording
        try:
            yield
        finally:
            _local.recording = None
        if recording.refused is None and not recording.launches:
            recording.refuse("no launches")
        if recording.refused is not None:
            self.last_refusal = recording.refused
            self._pending.pop(key, None)
            self._count_failure(key)
            return
        shape = tuple(step.shape for step in recording.launches)
        pending = self._pending.get(key)
        if pending == shape:
            del self._pending[key]
            self._failed.pop(key, None)
            for step in recording.launches:
                step.direct = _direct_launch(step)
            self._plans[key] = recording.launches
            while len(self._plans) > PLAN_CAPACITY:
                self._plans.popitem(last=False)
        else:
            if pending is not None:  # launches unlike the call before's
                self._count_failure(key)
            self._pending[key] = shape
            while len(self._pending) > PLAN_CAPACITY:
                self._pending.pop(next(iter(self._pending)))

    def _count_failure(self, key) -> None:
        self._failed[key] = self._failed.get(key, 0) + 1
        while len(self._failed) > PLAN_CAPACITY:
            self._failed.popitem(last=False)

    def forget(self) -> None:
        self._plans.clear()
        self._pending.clear()
        self._failed.clear()


def planned(op, *, tensors: int, untuned: tuple | None = (), fresh: int = 1):
    """Wrap an op's plain launch function in launch plans, so the op's file holds neither a
    plan object nor a lambda: `launch(*tensors, *options)` takes its `tensors` tensors first
    (the last `fresh` of them outputs just allocated, as in LaunchPlans.key) and its options
    after. A call with the options `untuned` (the tuned choice) is keyed by the tensors
    alone; any other by its options as well (frozen), and one whose options cannot be
    hashed runs unplanned. untuned=None: the options are hashable scalars, keyed as they are
    (no freezing on the way). `op` names the op's LaunchPlans, or is one (two launch
    functions of one op sharing its plans). The wrapper's `plans` is that LaunchPlans (tests
    reset it), its `unplanned` the launch function itself."""

    def wrap(launch):
        plans = op if isinstance(op, LaunchPlans) else LaunchPlans(op)

        def call(*args) -> None:
            # LaunchPlans.call inlined: a replay makes no closure and no extra call
            operands, options = args[:tensors], args[tensors:]
            if untuned is None:
                key = plans.key(operands[0].device, operands, *options, fresh=fresh)
            elif options == untuned:
                key = plans.key(operands[0].device, operands, fresh=fresh)
            else:
                scalars = frozen(*options)
                if scalars is None:  # a config the key cannot hold
                    launch(*args)
                    return
                key = plans.key(operands[0].device, operands, *scalars, fresh=fresh)
            if not plans.replay(key, operands):
                with plans.recording(key, operands):
                    launch(*args)

        update_wrapper(call, launch)
        call.plans = plans
        call.unplanned = launch
        return call

    return wrap


def how_launched() -> dict[str, dict]:
    """Each op's plans as counts: plans, launch steps, steps built for a direct launch, the
    tensor map parameters among them, the steps launched from C (compiled_replay), direct
    launches made, replays so far (benchmarks record it beside host costs)."""
    summary = {}
    for plans in _every_op:
        steps = [step for plan in plans._plans.values() for step in plan]
        direct = [step.direct for step in steps if step.direct is not None]
        summary[plans.op] = {
            "plans": len(plans._plans),
            "steps": len(steps),
            "direct_steps": len(direct),
            "tensor_map_parameters": sum(d.tensor_map_parameters for d in direct),
            "compiled_steps": sum(d.compiled for d in direct),
            "direct_launches": sum(d.launches for d in direct),
            "replays": plans.replays,
            "last_refusal": plans.last_refusal,
        }
    return summary


def forget_all() -> None:
    """Drop every op's plans (the next calls take the front door and record again)."""
    for plans in _every_op:
        plans.forget()
