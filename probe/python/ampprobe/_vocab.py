"""_vocab.py — the names and texts the bridge shares with libampcore's instrumentation.

  LayerTable   qualified module names -> layer ids and parent ids (AMP_LAYERS), the root model
               named by its class; each layer is emitted once, before the first record naming it.
  op_name      a module class or a torch/aten function as the op name the report knows
               (Linear -> linear, LayerNorm -> layer_norm, aten.mm.default -> mm, __mul__ -> mul).
  describe     "input 0 f16 (8, 64) min .. max .. amax ..[ (n nan, n +inf, n -inf)]; ", the
               event detail format libampcore writes and report/rule_nonfinite.c parses.
  DTYPES       storage names (f16, bf16, f32) and each dtype's overflow and underflow bounds.

No torch here: the CI tests run it with the system python3.
"""
import re

# name -> (the smallest magnitude that rounds to inf, the smallest normal): a finite value at or
# above the first overflows in that dtype; a non-zero one below the second underflows (it
# rounds to zero or to a subnormal).
DTYPES = {
    "f16": (65520.0, 2.0 ** -14),
    "bf16": (3.3961775292304e38, 2.0 ** -126),
    "f32": (float("inf"), 2.0 ** -126),
}

_TORCH_DTYPE_NAMES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
                      "int32": "i32", "int64": "i64", "bool": "bool", "uint8": "u8",
                      "int8": "i8"}


_dtype_names = {}  # dtype (or its text) -> name: called for every recorded tensor


def dtype_name(torch_dtype):
    """'torch.float16' (or the dtype itself) -> 'f16'."""
    name = _dtype_names.get(torch_dtype)
    if name is None:
        s = str(torch_dtype).replace("torch.", "")
        name = _dtype_names[torch_dtype] = _TORCH_DTYPE_NAMES.get(s, s)
    return name


def op_name(x):
    """An op name as libampcore and the report spell it."""
    s = x if isinstance(x, str) else getattr(x, "__name__", str(x))
    if s.startswith("aten."):
        s = s.split(".")[1]
    s = s.strip("_")
    if s.startswith("r") and s[1:] in ("add", "sub", "mul", "truediv", "matmul", "pow"):
        s = s[1:]  # __rmul__ -> mul
    if s.startswith("i") and s[1:] in ("add", "sub", "mul", "truediv", "pow"):
        s = s[1:]  # __imul__ -> mul
    s = {"truediv": "div", "div_": "div"}.get(s, s)
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", s).lower()  # LayerNorm -> layer_norm
    return s.rstrip("_") or "op"


class LayerTable:
    """Layer ids of one process: add() qualified names in module-tree order, pending() the
    records not yet emitted."""

    def __init__(self):
        self.ids = {}
        self.rows = []  # (id, parent_id, name)
        self._emitted = 0

    def add(self, name, parent=-1):
        """The id of name, registered under its longest registered prefix (else parent)."""
        if name in self.ids:
            return self.ids[name]
        head = name
        while "." in head:
            head = head.rsplit(".", 1)[0]
            if head in self.ids:
                parent = self.ids[head]
                break
        i = len(self.rows)
        self.ids[name] = i
        self.rows.append((i, parent, name))
        return i

    def add_model(self, root_name, module_names):
        """Registers a model: the root as a layer named root_name, its modules under their own
        qualified names ("blocks.0.attn", as libampcore names layers), the top-level ones under
        the root. Returns {module name: id}, '' for the root."""
        root = self.add(root_name)
        out = {"": root}
        for n in module_names:
            if n:
                out[n] = self.add(n, root)
        return out

    def pending(self):
        rows = self.rows[self._emitted:]
        self._emitted = len(self.rows)
        return rows


def _shape(shape):
    dims = [str(int(d)) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def describe(what, dtype, shape, mn, mx, amax, n_nan=0, n_posinf=0, n_neginf=0):
    """One segment of an event's detail, as libampcore's describe() writes it."""
    s = "%s %s %s min %.6g max %.6g amax %.6g" % (what, dtype, _shape(shape), mn, mx, amax)
    if n_nan or n_posinf or n_neginf:
        s += " (%d nan, %d +inf, %d -inf)" % (n_nan, n_posinf, n_neginf)
    return s + "; "
