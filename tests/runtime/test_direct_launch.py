"""Direct launches (runtime/direct_launch.py) on the CPU: the parameter bytes a planned
launch hands cuLaunchKernel, and every launch it leaves to Triton's launcher. The driver is a
stand-in that reads the parameter array back; test_launch_plans_gpu.py runs the real one."""

from __future__ import annotations

import ctypes
import dataclasses
from types import SimpleNamespace

import pytest
import torch
from test_launch_plans import FakeKernel

from kernelab.errors import KernelabError
from kernelab.runtime import compiled_replay, direct_launch, launch_plans, tensor_maps
from kernelab.runtime.launch_plans import LaunchPlans

NAMES = ["x_ptr", "out_ptr", "n", "scale", "BLOCK"]
SIGNATURE = {
    "x_ptr": "*fp32",
    "out_ptr": "*fp32",
    "n": "i32",
    "scale": "fp32",
    "BLOCK": "constexpr",
}
# the image's parameters: two pointers, an int32, a float, then Triton's two scratch pointers
IMAGE_SIZES = [8, 8, 4, 4, 8, 8]
TEMPLATE = [None, None, 1024, 0.5, 128]
SLOTS = [(0, 0), (1, 1)]


def metadata(**changes):
    fields = dict(
        num_warps=4,
        shared=1024,
        num_ctas=1,
        cluster_dims=(1, 1, 1),
        launch_cooperative_grid=False,
        launch_pdl=False,
        global_scratch_size=0,
        profile_scratch_size=0,
    )
    return SimpleNamespace(**{**fields, **changes})


class FakeCompiled:
    """A compiled kernel's face: handle, metadata, source signature; [grid](...) is Triton's
    launcher, which keeps the grids it was given."""

    function = 0x1234
    packed_metadata = object()

    def __init__(self, signature, meta):
        self.metadata = meta
        self.src = SimpleNamespace(signature=signature)
        self.through_triton = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.through_triton.append(grid)


def compiled(signature=None, **changes):
    return FakeCompiled(dict(signature or SIGNATURE), metadata(**changes))


class FakeDriver:
    """cuLaunchKernel's stand-in: keeps each launch with its parameters read back as the
    driver would, through the array of pointers."""

    def __init__(self, sizes, error=0):
        self.sizes = sizes
        self.error = error
        self.launches = []

    def __call__(self, function, gx, gy, gz, bx, by, bz, shared, stream, array_address, extra):
        kinds = {8: ctypes.c_uint64, 4: ctypes.c_uint32}
        array = (ctypes.c_void_p * len(self.sizes)).from_address(array_address)
        raw = [
            kinds[size].from_address(array[i]).value
            if size in kinds
            else ctypes.string_at(array[i], size)  # a tensor map, by value
            for i, size in enumerate(self.sizes)
        ]
        launch = (int(function), (gx, gy, gz), (bx, by, bz), shared, int(stream))
        self.launches.append((launch, raw))
        return (self.error,)


# cuLaunchKernel's C signature, for the compiled replay's stand-in
C_LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
    ctypes.c_void_p,
)  # fmt: skip


def _route(path: str, fake: FakeDriver, monkeypatch) -> FakeDriver:
    """Launches reach the stand-in from Python (cuda.bindings' place) or, for "compiled", from
    compiled_replay.c through a C function pointer (libcuda's place)."""
    monkeypatch.setattr(direct_launch, "_driver_launch", lambda: fake)
    monkeypatch.setattr(compiled_replay, "ENABLED", path == "compiled")
    fake.compiled = path == "compiled"
    if path == "compiled":
        if compiled_replay.module() is None:
            pytest.skip(f"the compiled replay does not build here: {compiled_replay.last_failure}")

        def from_c(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            return fake(function or 0, gx, gy, gz, bx, by, bz, shared, stream or 0, params, extra)[
                0
            ]

        fake.callback = C_LAUNCH(from_c)  # held for as long as the fake lives
        address = ctypes.cast(fake.callback, ctypes.c_void_p).value
        monkeypatch.setattr(compiled_replay, "launch_function", lambda: address)
    return fake


@pytest.fixture(params=["python", "compiled"])
def driver(request, monkeypatch):
    monkeypatch.setattr(direct_launch, "image_parameter_sizes", lambda handle: list(IMAGE_SIZES))
    return _route(request.param, FakeDriver(IMAGE_SIZES), monkeypatch)


def at(*addresses):
    """Stand-ins for the call's tensors: only their data pointers matter here."""
    return tuple(SimpleNamespace(data_ptr=lambda a=a: a) for a in addresses)


def as_float(bits: int) -> float:
    return ctypes.c_float.from_buffer(ctypes.c_uint32(bits)).value


def test_a_plain_launch_passes_pointers_scalars_and_null_scratch(driver):
    direct = direct_launch.build(compiled(), (8, 1, 1), NAMES, TEMPLATE, SLOTS)
    assert direct is not None and direct.compiled == driver.compiled
    direct(at(0x7000, 0x9000), 77)
    direct(at(0x7100, 0x9100), 78)  # the next call's pointers replace the last ones
    (first, first_raw), (second, second_raw) = driver.launches
    assert first == (0x1234, (8, 1, 1), (128, 1, 1), 1024, 77)
    assert first_raw[:3] == [0x7000, 0x9000, 1024] and as_float(first_raw[3]) == 0.5
    assert first_raw[4:] == [0, 0]  # the constexpr BLOCK is no parameter; scratch is null
    assert second[4] == 78 and second_raw[:2] == [0x7100, 0x9100]


def test_a_kept_workspace_is_passed_at_its_own_address(driver):
    workspace = torch.empty(16)
    template = [None, workspace, 1024, 0.5, 128]
    direct = direct_launch.build(compiled(), (8, 1, 1), NAMES, template, [(0, 0)])
    direct(at(0x7000), 0)
    [(_, raw)] = driver.launches
    assert raw[:2] == [0x7000, workspace.data_ptr()]


@pytest.mark.parametrize(
    "change",
    [
        {"cluster_dims": (2, 1, 1)},
        {"num_ctas": 2},
        {"launch_cooperative_grid": True},
        {"launch_pdl": True},
        {"global_scratch_size": 256},
        {"profile_scratch_size": 64},
        {"tensordesc_meta": [{"swizzle": 3}]},  # for a descriptor the signature lacks
    ],
)
def test_launches_that_need_more_than_cuLaunchKernel_are_left_to_triton(driver, change):
    assert direct_launch.build(compiled(**change), (8, 1, 1), NAMES, TEMPLATE, SLOTS) is None


@pytest.mark.parametrize(
    "kind",
    ["i1", "fp16", "bf16", ("*fp32", "*fp32")],  # bools, 16-bit floats, a tuple argument
)
def test_scalar_kinds_it_cannot_pack_are_left_to_triton(driver, kind):
    signature = {**SIGNATURE, "scale": kind}
    assert direct_launch.build(compiled(signature), (8, 1, 1), NAMES, TEMPLATE, SLOTS) is None


@pytest.mark.parametrize(
    "sizes",
    [
        None,  # the driver cannot say
        [8, 8, 4],  # fewer parameters than the signature's
        [8, 8, 4, 4, 4],  # a hidden parameter that is no pointer
        [8, 8, 8, 4, 8, 8],  # n wider than the signature says
    ],
)
def test_an_image_whose_parameters_differ_is_left_to_triton(monkeypatch, driver, sizes):
    monkeypatch.setattr(direct_launch, "image_parameter_sizes", lambda handle: sizes)
    assert direct_launch.build(compiled(), (8, 1, 1), NAMES, TEMPLATE, SLOTS) is None


def test_a_signature_in_another_order_than_the_parameters_is_left_to_triton(driver):
    reordered = dict(reversed(list(SIGNATURE.items())))
    assert direct_launch.build(compiled(reordered), (8, 1, 1), NAMES, TEMPLATE, SLOTS) is None


def test_a_failed_launch_raises_with_the_drivers_code_and_is_not_counted(monkeypatch, driver):
    driver.error = 700
    direct = direct_launch.build(compiled(), (8, 1, 1), NAMES, TEMPLATE, SLOTS)
    with pytest.raises(KernelabError, match="700"):
        direct(at(0x7000, 0x9000), 0)
    assert direct.launches == 0  # counted as made only when the driver took it
    driver.error = 0
    direct(at(0x7000, 0x9000), 0)
    assert direct.launches == 1


# --- in a plan: installed with the plan, used only while no launch hook is set -------------


def _kernel(x_ptr, out_ptr, n, scale, BLOCK=128):
    pass


def test_a_planned_call_launches_directly_and_honours_launch_hooks(monkeypatch, driver):
    from triton import knobs

    monkeypatch.setattr(launch_plans, "DIRECT", True)
    kernel = FakeKernel(_kernel)
    kernel.compiled = compiled()  # with a real-looking signature and metadata
    plans = LaunchPlans("test.direct_launch")
    key = (0, 5, "direct")
    for _ in range(3):
        x, out = torch.empty(1024), torch.empty(1024)
        if not plans.replay(key, (x, out)):
            with plans.recording(key, (x, out)):
                kernel[(8,)](x, out, 1024, 0.5)
    assert kernel.front_door_calls == 2 and plans.replays == 1
    [(launched, raw)] = driver.launches
    assert launched[4] == 5 and raw[:3] == [x.data_ptr(), out.data_ptr(), 1024]
    counts = launch_plans.how_launched()["test.direct_launch"]
    assert (counts["plans"], counts["steps"], counts["direct_steps"]) == (1, 1, 1)
    assert counts["tensor_map_parameters"] == 0 and counts["replays"] == 1
    assert counts["direct_launches"] == 1 and counts["compiled_steps"] == driver.compiled

    # a profiler's hook: the replay goes through Triton's launcher, which calls it
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", knobs.HookChain())
    knobs.runtime.launch_enter_hook.add(lambda metadata: None)
    assert plans.replay(key, (x, out))
    assert len(driver.launches) == 1 and kernel.compiled.through_triton == [(8, 1, 1)]


# --- TMA descriptors: the tensor map kept per address ------------------------------------


@dataclasses.dataclass
class FakeDescriptor:
    """TensorDescriptor's face: a base tensor, its sizes and strides, a box."""

    base: object
    shape: list
    strides: list
    block_shape: list


class FakeEncoder:
    """Triton's make_tensordesc_arg stand-in: 'encodes' a map as 128 bytes that start with the
    tensor's address, and counts the encodes."""

    def __init__(self):
        self.encoded = []
        self.misplace = False  # True: the address is not the map's first word

    def __call__(self, descriptor, metadata):
        pointer = descriptor.base.data_ptr()
        self.encoded.append(pointer)
        first = b"m" * 8 if self.misplace else pointer.to_bytes(8, "little")
        tensor_map = ctypes.create_string_buffer(first + b"m" * 120, 128)
        return [tensor_map, *descriptor.shape, *descriptor.strides]


TMA_NAMES = ["a_desc", "n", "BLOCK"]
TMA_SIGNATURE = {"a_desc": "tensordesc<bf16[64, 64]>", "n": "i32", "BLOCK": "constexpr"}
# the map, the two sizes (i32), the two strides (i64), n, the scratch pointers
TMA_IMAGE_SIZES = [128, 4, 4, 8, 8, 4, 8, 8]


@pytest.fixture(params=["python", "compiled"])
def tma(request, monkeypatch):
    fake = _route(request.param, FakeDriver(TMA_IMAGE_SIZES), monkeypatch)
    encoder = FakeEncoder()
    monkeypatch.setattr(direct_launch, "image_parameter_sizes", lambda handle: TMA_IMAGE_SIZES)
    monkeypatch.setattr(tensor_maps, "_triton_encoder", lambda: encoder)
    monkeypatch.setattr(tensor_maps, "map_address", lambda m: ctypes.addressof(m))
    return SimpleNamespace(driver=fake, encoder=encoder)


def tma_build(*tensors, meta=({"swizzle": 3},), signature=TMA_SIGNATURE):
    descriptor = FakeDescriptor(tensors[0], [256, 512], [512, 1], [64, 64])
    kernel = compiled(signature, tensordesc_meta=list(meta))
    return direct_launch.build(
        kernel, (4, 1, 1), TMA_NAMES, [None, 512, 64], [], [(0, 0, descriptor)]
    )


def test_a_tma_launch_passes_the_map_of_the_calls_tensor_then_its_shape_and_strides(tma):
    direct = tma_build(*at(0x7000))
    assert direct is not None and tma.encoder.encoded == [0x7000]  # checked at build
    direct(at(0x7000), 0)
    direct(at(0x8000), 0)
    direct(at(0x7000), 0)
    assert tma.encoder.encoded == [0x7000, 0x8000]  # each address encoded once
    maps = [raw[0] for _, raw in tma.driver.launches]
    assert [int.from_bytes(m[:8], "little") for m in maps] == [0x7000, 0x8000, 0x7000]
    assert all(len(m) == 128 for m in maps)
    assert tma.driver.launches[0][1][1:] == [256, 512, 512, 1, 512, 0, 0]


def test_a_tma_launch_forgets_old_maps_past_its_capacity(tma, monkeypatch):
    monkeypatch.setattr(tensor_maps, "MAPS_PER_PARAMETER", 2)
    direct = tma_build(*at(0x1000))
    for address in (0x2000, 0x3000, 0x1000):
        direct(at(address), 0)
    # 0x3000 found the cache full and emptied it: 0x1000 is encoded again
    assert tma.encoder.encoded == [0x1000, 0x2000, 0x3000, 0x1000]
    assert int.from_bytes(tma.driver.launches[-1][1][0][:8], "little") == 0x1000


@pytest.mark.parametrize(
    "meta", [(None,), (), ({"swizzle": 3}, {"swizzle": 3})], ids=["decomposed", "none", "extra"]
)
def test_a_descriptor_without_exactly_its_metadata_is_left_to_triton(tma, meta):
    assert tma_build(*at(0x7000), meta=meta) is None


def test_tma_launches_are_left_to_triton_when_turned_off(tma, monkeypatch):
    monkeypatch.setattr(direct_launch, "TENSOR_MAPS", False)
    assert tma_build(*at(0x7000)) is None and "KERNELAB_DIRECT_TMA" in direct_launch.last_refusal
    assert tma.encoder.encoded == []


def test_an_encoding_of_another_form_is_left_to_triton(tma, monkeypatch):
    monkeypatch.setattr(tensor_maps, "_triton_encoder", lambda: lambda d, m: [b"x" * 128, 1])
    assert tma_build(*at(0x7000)) is None
    monkeypatch.setattr(tensor_maps, "_triton_encoder", lambda: FakeEncoder())
    monkeypatch.setattr(tensor_maps, "map_address", lambda m: None)  # an unknown map object
    assert tma_build(*at(0x7000)) is None


def test_a_map_that_does_not_start_with_the_tensors_address_is_left_to_triton(tma, monkeypatch):
    misplaced = FakeEncoder()
    misplaced.misplace = True
    monkeypatch.setattr(tensor_maps, "_triton_encoder", lambda: misplaced)
    assert tma_build(*at(0x7000)) is None
    assert "do not start with the tensor's address" in direct_launch.last_refusal


def test_a_later_map_of_an_unknown_layout_raises_instead_of_launching(tma):
    direct = tma_build(*at(0x7000))
    tma.encoder.misplace = True
    with pytest.raises(RuntimeError, match="unknown layout"):
        direct(at(0x8000), 0)
    assert tma.driver.launches == []


@pytest.mark.parametrize("slots, header", [(22, 64), (30, 128)], ids=["triton-3.9", "triton-3.6"])
def test_map_address_reads_past_the_object_header(slots, header):
    # a Python object of a PyCUtensorMap's size: 16 header bytes and slots of 8 (192 bytes in
    # Triton 3.9, 256 in 3.6); the map is its last 128 bytes
    kind = type("PyCUtensorMap", (), {"__slots__": tuple(f"s{i}" for i in range(slots))})
    tensor_map = kind()
    assert kind.__basicsize__ == header + 128
    assert tensor_maps.map_address(tensor_map) == id(tensor_map) + header
    other = type("PyCUtensorMap", (), {"__slots__": ("a",)})()
    assert tensor_maps.map_address(other) is None
    assert tensor_maps.map_address(ctypes.create_string_buffer(192)) is None


def _tma_kernel(a_desc, n, BLOCK=64):
    pass


def test_a_planned_tma_call_launches_directly_with_the_map_of_each_calls_tensor(monkeypatch, tma):
    """Through a plan: the recorded descriptor reaches build(), and each replay passes the map
    of its own tensor (encoded once per address), with no launch through Triton's launcher."""
    monkeypatch.setattr(launch_plans, "DIRECT", True)
    kernel = FakeKernel(_tma_kernel)
    kernel.compiled = compiled(TMA_SIGNATURE, tensordesc_meta=[{"swizzle": 3}])
    plans = LaunchPlans("test.direct_tma")
    key = (0, 3, "tma")
    first, second = torch.empty(256, 512), torch.empty(256, 512)
    for a in (first, first, first, second, first):
        descriptor = FakeDescriptor(a, [256, 512], [512, 1], [64, 64])
        if not plans.replay(key, (a,)):
            with plans.recording(key, (a,)):
                kernel[(4,)](descriptor, 512)
    assert kernel.front_door_calls == 2 and plans.replays == 3
    assert kernel.compiled.through_triton == []
    maps = [int.from_bytes(raw[0][:8], "little") for _, raw in tma.driver.launches]
    assert maps == [first.data_ptr(), second.data_ptr(), first.data_ptr()]
    # encoded when the plan was built (from the second recording's tensor), then for `second`
    assert tma.encoder.encoded == [first.data_ptr(), second.data_ptr()]
    counts = launch_plans.how_launched()["test.direct_tma"]
    assert counts["tensor_map_parameters"] == 1 and counts["direct_launches"] == 3
    assert counts["compiled_steps"] == tma.driver.compiled
