"""OpSpec, the form every op's specification takes, with the dtype names and the seeded
drawing helpers the specifications share (kernelab.spec.reference assembles them into OPS)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernelab.errors import KernelabError, unknown

FLOAT_DTYPES = ("fp32", "bf16", "fp16")

_TORCH_DTYPE_NAMES = {
    "fp64": "float64",
    "fp32": "float32",
    "tf32": "float32",  # a math mode over fp32 storage
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp8": "float8_e4m3fn",
    "int8": "int8",
    "int32": "int32",  # histogram bin ids
    "uint8": "uint8",  # histogram bytes
}


def canonical_name(dtype: str) -> str:
    """ "bfloat16" -> "bf16"; UnknownNameError for a dtype without a torch storage type."""
    from kernelab.roofline.costs import canonical_dtype

    text = str(dtype).strip().lower().removeprefix("torch.")
    key = canonical_dtype(text) if text not in _TORCH_DTYPE_NAMES else text
    if key not in _TORCH_DTYPE_NAMES:
        raise unknown("dtype", str(dtype), _TORCH_DTYPE_NAMES)
    return key


def dtype_of(name: str):
    """The torch dtype that stores kernelab dtype `name` ("bf16" -> torch.bfloat16)."""
    import torch

    torch_name = _TORCH_DTYPE_NAMES[canonical_name(name)]
    if not hasattr(torch, torch_name):
        raise KernelabError(f"this torch ({torch.__version__}) has no {torch_name} for {name}")
    return getattr(torch, torch_name)


def name_of(dtype) -> str:
    """The kernelab name of a torch dtype (torch.float32 -> "fp32")."""
    import torch

    for name, torch_name in _TORCH_DTYPE_NAMES.items():
        if name != "tf32" and getattr(torch, torch_name, None) == dtype:
            return name
    raise KernelabError(f"kernelab has no name for torch dtype {dtype}")


@dataclass(frozen=True)
class OpSpec:
    name: str
    shape_keys: tuple[str, ...]  # required keys of `shape`
    dtypes: tuple[str, ...]  # input dtypes the op is defined for
    description: str
    _make: Callable  # (shape, torch_dtype, generator, device) -> inputs
    _reference: Callable  # (*inputs) -> float64 tensor
    _eager: Callable  # (*inputs) -> tensor in the output dtype
    _cost: Callable  # (shape, dtype) -> OpCost
    optional_keys: tuple[str, ...] = ()
    output_dtype: str | None = None  # the output's dtype whatever the input's (None: the input's)

    def validate(self, shape: dict) -> dict:
        """The shape with int values; KernelabError for a missing, extra or non-positive key."""
        if not isinstance(shape, dict):
            raise KernelabError(f"{self.name} shape must be a dict of {', '.join(self.shape_keys)}")
        missing = [key for key in self.shape_keys if key not in shape]
        if missing:
            raise KernelabError(f"{self.name} needs shape keys {', '.join(missing)}")
        allowed = self.shape_keys + self.optional_keys
        extra = [key for key in shape if key not in allowed]
        if extra:
            raise KernelabError(
                f"{self.name} takes shape keys {', '.join(allowed)}, not {', '.join(extra)}"
            )
        clean = {}
        for key, value in shape.items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise KernelabError(
                    f"{self.name} shape {key} must be a positive integer, got {value!r}"
                )
            clean[key] = value
        if "stride" in clean and clean["stride"] < clean["cols"]:
            raise KernelabError(
                f"{self.name} stride {clean['stride']} is smaller than cols {clean['cols']}"
            )
        return clean

    def check_dtype(self, dtype: str) -> str:
        name = canonical_name(dtype)
        if name == "tf32":
            name = "fp32"
        if name not in self.dtypes:
            raise unknown(f"dtype for {self.name}", name, self.dtypes)
        return name

    def out_dtype(self, dtype: str) -> str:
        """The dtype of the op's output for inputs of `dtype`."""
        name = self.check_dtype(dtype)
        if self.output_dtype is not None:
            return self.output_dtype
        return "bf16" if name == "fp8" else name

    def make_inputs(self, shape: dict, dtype: str, seed: int, device="cpu") -> tuple:
        """Fresh random inputs drawn from a generator seeded with `seed` on `device`."""
        import torch

        shape = self.validate(shape)
        torch_dtype = dtype_of(self.check_dtype(dtype))
        device = torch.device(device)
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed))
        return self._make(shape, torch_dtype, generator, device)

    def reference(self, *inputs):
        """The exact answer, computed in float64 on the inputs' device."""
        return self._reference(*inputs)

    def torch_eager(self, *inputs):
        """The plain torch op in the input dtype."""
        return self._eager(*inputs)

    def cost(self, shape: dict, dtype: str):
        """FLOPs and minimum bytes (kernelab.roofline.costs.OpCost)."""
        return self._cost(self.validate(shape), self.check_dtype(dtype))


# Drawing: normals in float32 from the seeded generator, then scaled and cast, so a seed gives
# the same data in every dtype up to rounding.


def normals(shape, generator, device, scale=1.0, offset=0.0):
    import torch

    values = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    return values * scale + offset


def rows_view(shape, torch_dtype, generator, device, scale, offset):
    """x[rows, cols], a view into a [rows, stride] buffer whose padding is NaN."""
    import torch

    rows, cols = shape["rows"], shape["cols"]
    stride = shape.get("stride", cols)
    x = normals((rows, cols), generator, device, scale, offset).to(torch_dtype)
    if stride == cols:
        return x
    buffer = torch.full((rows, stride), float("nan"), dtype=torch_dtype, device=device)
    buffer[:, :cols] = x
    return buffer[:, :cols]


def as_float64(tensor):
    import torch

    return tensor.to(torch.float64)
