"""Launch plans (runtime/launch_plans.py) on the CPU: what gets recorded, when a plan is
installed, what a replay passes. The kernels are stand-ins with a JIT function's parameters;
the GPU tests (test_launch_plans_gpu.py) replay the real ops against torch."""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import pytest
import torch

from kernelab.runtime import launch_plans
from kernelab.runtime.launch_plans import LaunchPlans, keep, signature, unrecorded, watched


@pytest.fixture(autouse=True)
def hooked(monkeypatch):
    """Triton's hooked replay path (KERNELAB_DIRECT_LAUNCH=0) unless a test asks for `lean`:
    FakeCompiled below records what compiled[grid] is given."""
    monkeypatch.setattr(launch_plans, "DIRECT", False)


@pytest.fixture
def lean(monkeypatch):
    """The lean replay path (the default): empty hook chains are idle."""
    monkeypatch.setattr(launch_plans, "DIRECT", True)


class _Param:
    def __init__(self, parameter: inspect.Parameter):
        self.name = parameter.name
        self.default = parameter.default
        self.has_default = parameter.default is not inspect.Parameter.empty


class FakeCompiled:
    """What Triton's front door returns: a compiled kernel whose [grid](*args) launches."""

    packed_metadata = object()
    function = object()

    def __init__(self):
        self.launches: list[tuple] = []
        self.direct: list[tuple] = []

    def run(self, grid_x, grid_y, grid_z, stream, function, metadata, launch_metadata, *rest):
        enter_hook, exit_hook, *args = rest
        assert function is self.function and metadata is self.packed_metadata
        assert (launch_metadata, enter_hook, exit_hook) == (None, None, None)
        self.direct.append(((grid_x, grid_y, grid_z), tuple(args), stream))

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            self.launches.append((grid, args, stream))

        return runner


class FakeKernel:
    """A JIT function's face: parameters, and kernel[grid](...) calling its run method, which
    returns the compiled kernel; run is watched as launch_plans watches JITFunction.run."""

    def __init__(self, fn):
        self.fn = fn
        self.params = [_Param(p) for p in inspect.signature(fn).parameters.values()]
        self.arg_names = [p.name for p in self.params]
        self.compiled = FakeCompiled()
        self.front_door_calls = 0
        self.front_door_kwargs: list[dict] = []

    def _front_door(self, *args, grid, warmup, **kwargs):
        self.front_door_calls += 1
        self.front_door_kwargs.append(kwargs)
        return self.compiled

    run = watched(_front_door)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


# a plan key is (device index, stream, ...): replays launch on key[1]
KEY = (0, 0, "test")


def _kernel(x_ptr, out_ptr, n, scale, BLOCK=128):
    pass


def _call(plans, key, tensors, body):
    """What an op does: replay, else record the front-door launches of body."""
    if not plans.replay(key, tensors):
        with plans.recording(key, tensors):
            body(*tensors)


def test_a_plan_is_installed_after_two_matching_calls_and_replays_the_new_tensors():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.plain")
    key = (KEY, 7)

    def body(x, out):
        kernel[lambda meta: (meta["n"] // meta["BLOCK"],)](x, out, 1024, 0.5)

    for _ in range(2):
        x, out = torch.empty(1024), torch.empty(1024)
        _call(plans, key, (x, out), body)
        assert kernel.front_door_calls <= 2
    assert plans.installed(key)
    assert kernel.compiled.launches == []  # the recorded calls went through the front door

    x, out = torch.empty(1024), torch.empty(1024)
    _call(plans, key, (x, out), body)
    assert kernel.front_door_calls == 2 and plans.replays == 1
    (grid, args, stream) = kernel.compiled.launches[0]
    assert grid == (8, 1, 1)  # the callable grid, evaluated on the bound arguments, padded
    assert args[0] is x and args[1] is out  # the call's tensors, not the recorded ones
    assert args[2:] == (1024, 0.5, 128)  # scalars as recorded, the default filled in
    assert stream == key[1]


def _two_pointer_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n):
    pass


def test_a_tensor_given_once_fills_every_parameter_it_was_passed_to():
    """rmsnorm without a bias passes weight as the bias pointer too, and names weight once
    among the call's tensors: a replay puts the new weight in both places."""
    kernel = FakeKernel(_two_pointer_kernel)
    plans = LaunchPlans("test.shared")
    key = (KEY, "shared")

    def body(x, w, out):
        kernel[(1,)](x, w, w, out, 64)

    for _ in range(2):
        _call(plans, key, (torch.empty(64), torch.empty(64), torch.empty(64)), body)
    assert plans.installed(key)
    x, w, out = torch.empty(64), torch.empty(64), torch.empty(64)
    _call(plans, key, (x, w, out), body)
    (_, args, _) = kernel.compiled.launches[0]
    assert args[0] is x and args[1] is w and args[2] is w and args[3] is out


def test_without_launch_hooks_a_replay_calls_the_launcher_directly(lean):
    """The launcher's own arguments, as JITFunction.run passes them (Triton 3.6 and 3.9), under
    Triton's own default hooks: empty HookChains, never None, in Triton 3.9."""
    assert launch_plans._hooks_idle()
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.direct")
    for _ in range(3):
        x, out = torch.empty(64), torch.empty(64)
        _call(plans, KEY, (x, out), lambda x, out: kernel[(4, 2)](x, out, 64, 2.0))
    assert kernel.compiled.launches == []
    [(grid, args, stream)] = kernel.compiled.direct
    assert grid == (4, 2, 1) and stream == KEY[1]
    assert args[0] is x and args[1] is out and args[2:] == (64, 2.0, 128)


def test_scalars_that_change_between_calls_never_install_a_plan():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.turns")
    for turn in range(4):
        tensors = (torch.empty(16), torch.empty(16))
        _call(plans, KEY, tensors, lambda x, out, t=turn: kernel[(1,)](x, out, 16, t))
    assert not plans.installed(KEY)
    assert kernel.front_door_calls == 4


def test_an_undeclared_tensor_leaves_the_call_unplanned():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.scratch")

    def body(x, out):
        scratch = torch.zeros(16)  # a per-call fill the plan could not repeat
        kernel[(1,)](x, scratch, 16, 1.0)

    for _ in range(3):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)), body)
    assert not plans.installed(KEY)
    assert "neither the call's nor a declared workspace" in plans.last_refusal


def test_a_key_that_keeps_failing_is_given_up_and_no_longer_recorded(monkeypatch):
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.given_up")

    def refused(x, out):
        kernel[(1,)](x, torch.zeros(16), 16, 1.0)  # an undeclared per-call tensor

    for call in range(launch_plans.MOST_FAILED_RECORDINGS):
        assert not plans.given_up(KEY), call
        _call(plans, KEY, (torch.empty(16), torch.empty(16)), refused)
    assert plans.given_up(KEY)

    def no_recording(tensors):
        raise AssertionError("a given-up key was recorded")

    monkeypatch.setattr(launch_plans, "_Recording", no_recording)
    _call(plans, KEY, (torch.empty(16), torch.empty(16)), refused)
    assert kernel.front_door_calls == launch_plans.MOST_FAILED_RECORDINGS + 1  # still runs
    other = (1, 0, "another key")
    assert not plans.given_up(other)  # only the failing key
    plans.forget()
    assert not plans.given_up(KEY)


def test_launches_that_differ_call_to_call_give_the_key_up_too():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.turns_given_up")
    for turn in range(launch_plans.MOST_FAILED_RECORDINGS + 1):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)),
              lambda x, out, t=turn: kernel[(1,)](x, out, 16, t))  # fmt: skip
    assert plans.given_up(KEY)  # the first call had nothing to differ from


def test_a_key_that_plans_after_a_tuning_call_is_not_held_against_it():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.tuned_then_planned")
    tuning = [True]

    def body(x, out):
        for _ in range(launch_plans.MOST_LAUNCHES_PER_CALL + 1 if tuning.pop() else 1):
            kernel[(1,)](x, out, 16, 1.0)
        tuning.append(False)

    for _ in range(3):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)), body)
    assert plans.installed(KEY) and not plans.given_up(KEY)
    assert plans._failed == {}  # the tuning call's refusal went with the install


def test_a_view_of_a_declared_workspace_is_held_and_passed_again():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.kept")
    words = torch.zeros(64, dtype=torch.int64)

    def body(x, out):
        keep(words)
        kernel[(1,)](x, words[32:], 16, 1.0)

    for _ in range(2):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)), body)
    assert plans.installed(KEY)
    _call(plans, KEY, (torch.empty(16), torch.empty(16)), body)
    args = kernel.compiled.launches[0][1]
    assert args[1].data_ptr() == words[32:].data_ptr()


def test_a_call_that_launches_too_often_is_tuning_and_is_not_planned():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.tuning")

    def body(x, out):
        for _ in range(launch_plans.MOST_LAUNCHES_PER_CALL + 1):
            kernel[(1,)](x, out, 16, 1.0)

    for _ in range(3):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)), body)
    assert not plans.installed(KEY)
    assert "tuning" in plans.last_refusal


def test_a_call_without_launches_is_not_planned():
    plans = LaunchPlans("test.empty")
    for _ in range(3):
        _call(plans, KEY, (torch.empty(16),), lambda x: None)
    assert not plans.installed(KEY)
    assert plans.last_refusal == "no launches"


def test_unknown_argument_types_refuse_instead_of_being_replayed_blind():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.other")
    for _ in range(3):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)),
              lambda x, out: kernel[(1,)](x, out, 16, object()))  # fmt: skip
    assert not plans.installed(KEY)
    assert "argument of type object" in plans.last_refusal


@dataclasses.dataclass
class Descriptor:
    base: object
    shape: list
    block_shape: list


def test_descriptors_of_the_calls_tensors_are_rebased_on_replay():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.descriptors")

    def body(x, out):
        kernel[(2,)](Descriptor(x, [4, 4], [2, 4]), out, 16, 1.0)

    for _ in range(2):
        _call(plans, KEY, (torch.empty(4, 4), torch.empty(16)), body)
    assert plans.installed(KEY)
    x = torch.empty(4, 4)
    _call(plans, KEY, (x, torch.empty(16)), body)
    descriptor = kernel.compiled.launches[0][1][0]
    assert descriptor.base is x and descriptor.block_shape == [2, 4]


def _scale_kernel(x_ptr, out_ptr, n, scale, BLOCK=64, EXTRA=3):
    pass


def test_an_autotuned_kernel_is_recorded_with_its_configs_meta_parameters():
    """Triton's Autotuner launches the kernel under it through that kernel's run, with the
    chosen config among the keyword arguments: the recording sees the launch as it is made."""
    triton = pytest.importorskip("triton")
    kernel = FakeKernel(_scale_kernel)
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2)], key=["n"])(
        kernel
    )
    plans = LaunchPlans("test.autotuned")
    for _ in range(3):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)),
              lambda x, out: tuned[(1,)](x, out, 16, 1.0))  # fmt: skip
    assert plans.installed(KEY) and plans.replays == 1
    assert kernel.front_door_calls == 2 and kernel.front_door_kwargs[0]["BLOCK"] == 256
    (_, args, _) = kernel.compiled.launches[0]
    assert args[2:] == (16, 1.0, 256, 3)  # the config's BLOCK, EXTRA's default


def test_a_warm_up_and_an_unrecorded_launch_are_left_out_of_the_plan():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.unrecorded")

    def body(x, out):
        kernel.run(x, out, 16, 1.0, grid=(1,), warmup=True)  # compiles, launches nothing
        with unrecorded():  # a tuner timing a candidate inside the call
            kernel[(2,)](x, out, 16, 2.0)
        kernel[(1,)](x, out, 16, 1.0)

    for _ in range(3):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)), body)
    assert plans.installed(KEY)
    (grid, args, _) = kernel.compiled.launches[-1]
    assert grid == (1, 1, 1) and args[2:] == (16, 1.0, 128)  # the one recorded launch


def test_tritons_own_kernels_are_watched():
    """Every JITFunction's run (what kernel[grid] and an autotuner call) adds its launches to
    the recording: a kernel launched without our help cannot be left out of a plan."""
    jit = pytest.importorskip("triton.runtime.jit")
    assert getattr(jit.JITFunction.run, "watched_by_launch_plans", False)


def test_recording_nests_into_the_outer_call_only():
    kernel = FakeKernel(_kernel)
    outer, inner = LaunchPlans("test.outer"), LaunchPlans("test.inner")

    def body(x, out):
        with inner.recording("inner", (x, out)):
            kernel[(1,)](x, out, 16, 1.0)

    for _ in range(2):
        _call(outer, "outer", (torch.empty(16), torch.empty(16)), body)
    assert outer.installed("outer") and not inner.installed("inner")


def test_signature_tells_alignment_aliasing_and_layout_apart():
    device = torch.device("cpu")
    base = torch.empty(64)
    assert signature(device, base[:16]) != signature(device, base[1:17])  # 16-byte alignment
    assert signature(device, base, base) != signature(device, base, torch.empty(64))
    assert signature(device, base.view(8, 8)) != signature(device, base.view(8, 8).t())


def _tensor_on(device: int, address: int = 0x1000):
    """A tensor's face for signature(): on a GPU (device >= 0) or the CPU (-1)."""
    return SimpleNamespace(
        is_cuda=device >= 0, get_device=lambda: device, data_ptr=lambda: address,
        shape=torch.Size([64]), stride=lambda: (1,), dtype=torch.float32,
    )  # fmt: skip


def test_signature_tells_each_tensors_device_apart(monkeypatch):
    """A direct launch passes bare addresses: y on the CPU or another GPU must not replay the
    plan made for x and y both on GPU 0."""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    gpu0 = torch.device("cuda", 0)
    both = signature(gpu0, _tensor_on(0), _tensor_on(0, 0x2000))
    assert both[:2] == (0, 7)  # the device and its current stream
    assert signature(gpu0, _tensor_on(0), _tensor_on(-1, 0x2000)) != both
    assert signature(gpu0, _tensor_on(0), _tensor_on(1, 0x2000)) != both


def test_fresh_outputs_are_left_out_of_the_key_unless_misaligned(monkeypatch):
    """An op's new output follows from its inputs, so the key need not describe it (fresh);
    one from an allocator that does not align to 16 bytes leaves the call unplanned."""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False, raising=False)
    plans = LaunchPlans("test.fresh")
    gpu0 = torch.device("cuda", 0)
    x, out = _tensor_on(0), _tensor_on(0, 0x2000)
    assert plans.key(gpu0, (x, out), 1.5, fresh=1) == (*signature(gpu0, x), (1.5,))
    assert plans.key(gpu0, (x, out), 1.5) == (*signature(gpu0, x, out), (1.5,))
    assert plans.key(gpu0, (x, _tensor_on(0, 0x2008)), 1.5, fresh=1) is None


def test_the_lean_path_is_the_default_and_zero_turns_it_off():
    assert launch_plans.direct_from({}) is True
    assert launch_plans.direct_from({"KERNELAB_DIRECT_LAUNCH": "1"}) is True
    assert launch_plans.direct_from({"KERNELAB_DIRECT_LAUNCH": "0"}) is False


def test_nothing_is_planned_off_the_gpu_or_when_switched_off(monkeypatch):
    plans = LaunchPlans("test.off")
    assert plans.key(torch.device("cpu"), (torch.empty(4),)) is None
    monkeypatch.setattr(launch_plans, "ENABLED", False)
    assert plans.key(torch.device("cuda", 0), (torch.empty(4),)) is None
    assert plans.replay(None, ()) is False


def test_call_runs_the_front_door_every_time_where_nothing_is_planned():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.cpu")
    x, out = torch.empty(16), torch.empty(16)
    for _ in range(3):
        plans.call(x.device, (x, out), lambda: kernel[(1,)](x, out, 16, 1.0))
    assert kernel.front_door_calls == 3 and plans.replays == 0


def test_forget_all_drops_every_ops_plans():
    kernel = FakeKernel(_kernel)
    plans = LaunchPlans("test.forget")
    for _ in range(2):
        _call(plans, KEY, (torch.empty(16), torch.empty(16)),
              lambda x, out: kernel[(1,)](x, out, 16, 1.0))  # fmt: skip
    assert plans.installed(KEY)
    launch_plans.forget_all()
    assert not plans.installed(KEY)


@pytest.mark.parametrize(
    "enter, exit, idle",
    [
        (None, None, True),  # an older Triton's knobs
        ("empty chain", "empty chain", True),  # Triton 3.5+'s defaults (3.9 here)
        ("chain with a hook", "empty chain", False),
        ("empty chain", "chain with a hook", False),
        (print, None, False),  # a bare callable is a hook
    ],
)
def test_launch_hooks_are_idle_only_when_nothing_would_be_called(
    monkeypatch, lean, enter, exit, idle
):
    from triton import knobs

    def hook(value):
        if value == "empty chain":
            return knobs.HookChain()
        if value == "chain with a hook":
            chain = knobs.HookChain()
            chain.add(lambda metadata: None)
            return chain
        return value

    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hook(enter))
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", hook(exit))
    assert launch_plans._hooks_idle() is idle


def test_off_the_lean_path_only_none_is_idle(monkeypatch):
    """KERNELAB_DIRECT_LAUNCH off: a replay takes the path the GPU suite has passed, Triton's
    hooked one whenever a hook slot holds anything, an empty chain included."""
    from triton import knobs

    monkeypatch.setattr(launch_plans, "DIRECT", False)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", knobs.HookChain())
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", knobs.HookChain())
    assert not launch_plans._hooks_idle()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", None)
    assert launch_plans._hooks_idle()


def test_frozen_options_hash_alike_when_equal_and_refuse_what_cannot_hash():
    first = launch_plans.frozen("tma", None, {"BM": 64, "BN": 128, "extra": [1, {"x": 2}]})
    again = launch_plans.frozen("tma", None, {"extra": [1, {"x": 2}], "BN": 128, "BM": 64})
    assert first == again and hash(first) == hash(again)
    assert first != launch_plans.frozen("tma", None, {"BM": 128, "BN": 64, "extra": [1, {"x": 2}]})
    assert launch_plans.frozen("plain", None, None) == ("plain", None, None)
    assert launch_plans.frozen("tma", None, {"BM": {1, 2}}) is None  # a set cannot hash


def test_planned_keys_the_untuned_call_by_its_tensors_and_a_forced_one_by_its_options(
    monkeypatch,
):
    """launch_plans.planned wraps an op's plain launch function: the untuned options key by the
    tensors alone, others frozen into the key, unhashable ones run unplanned; every call
    launches once, and the wrapper exposes its plans and the unwrapped function."""
    launched, keys = [], []

    @launch_plans.planned("test.planned", tensors=2, untuned=(None, None))
    def run(x, out, path, config):
        """the plain launch"""
        launched.append((path, config))

    def key(device, tensors, *scalars, fresh=0):
        keys.append((tensors, scalars, fresh))
        return None

    monkeypatch.setattr(run.plans, "key", key)
    x, out = torch.zeros(3), torch.zeros(3)
    run(x, out, None, None)
    run(x, out, "plain", {"BLOCK": 64})
    run(x, out, None, {"note": {"a set"}})  # unhashable: no key, still launched
    assert launched == [(None, None), ("plain", {"BLOCK": 64}), (None, {"note": {"a set"}})]
    assert keys == [((x, out), (), 1), ((x, out), ("plain", (("BLOCK", 64),)), 1)]
    assert run.plans.op == "test.planned" and run.unplanned.__doc__ == "the plain launch"
    assert run.__name__ == "run"


def test_planned_raw_options_key_as_they_are_and_two_functions_share_one_ops_plans(monkeypatch):
    keys = []

    @launch_plans.planned("test.shared", tensors=1, untuned=None)
    def one(x, eps, flag):
        pass

    @launch_plans.planned(one.plans, tensors=2, untuned=None)
    def two(x, y, eps, flag):
        pass

    def key(device, tensors, *scalars, fresh=0):
        keys.append((len(tensors), scalars))
        return None

    monkeypatch.setattr(one.plans, "key", key)
    one(torch.zeros(2), 1e-5, True)
    two(torch.zeros(2), torch.zeros(2), 1e-6, False)
    assert two.plans is one.plans
    assert keys == [(1, (1e-5, True)), (2, (1e-6, False))]


def test_planned_replays_an_installed_plan_without_launching_again(monkeypatch):
    launched = []

    @launch_plans.planned("test.replay", tensors=1)
    def run(x):
        launched.append(x)

    replays = []
    monkeypatch.setattr(run.plans, "key", lambda device, tensors, *scalars, fresh=0: ("k",))
    monkeypatch.setattr(run.plans, "replay", lambda key, tensors: replays.append(key) or True)
    run(torch.zeros(2))
    assert launched == [] and replays == [("k",)]
