"""_vocab.py — the names and texts the bridge shares with libampcore's instrumentation.

  LayerTable   qualified module names -> layer ids and parent ids (AMP_LAYERS), the root model
               named by its class; each layer is emitted once, before the first record naming it.
  class_name   a module's class name as the model defines it (FSDP2's FSDPBlock -> Block).
  op_name      a module class or a torch/aten function as the op name the report knows
               (Linear -> linear, LayerNorm -> layer_norm, aten.mm.default -> mm, __mul__ -> mul).
  op_row       the AMP_OPS columns of one torch function call (in/out dtypes after autocast's
               casts, shapes, analytic FLOPs and bytes), as libampcore's instrumentation fills
               them.
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


def class_name(m):
    """The name of m's class as the model defines it: FSDP2's fully_shard gives a module a class
    of its own, FSDP<name>, deriving from FSDPModule and the module's class."""
    bases = type(m).__bases__
    if len(bases) == 2 and bases[0].__name__ == "FSDPModule":
        return bases[1].__name__
    return type(m).__name__


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


# Tensor.grad's getter, an item assignment, the augmented assignments (+= ...)
_STATE_DUNDERS = {"__get__", "__setitem__"} | {"__i%s__" % op for op in (
    "add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
    "lshift", "rshift")}


def touches_state(name, kwargs=None):
    """Whether the torch function of that __name__ (called with those keyword arguments) reads
    or writes what its first argument holds rather than computing a new tensor: a property
    getter (Tensor.grad), an in-place method (add_, torch._foreach_zero_), an augmented
    assignment (__iadd__), an item assignment (__setitem__), a function told inplace=True
    (F.relu, F.dropout)."""
    return name in _STATE_DUNDERS or (name.endswith("_") and not name.startswith("__")) or \
        bool(kwargs and kwargs.get("inplace"))


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


_FLOATS = {"f16", "bf16", "f32"}  # what autocast casts
_CASTING = {"lower_precision_fp", "fp32", "promote"}  # policies that cast the floating inputs
_MATMULS = {"linear", "matmul", "mm", "bmm", "mv"}  # (a, b, ...): K = a's last dimension
_BIASED_MATMULS = {"addmm", "baddbmm", "addbmm"}  # (bias, a, b)
_CONVS = {"conv1d", "conv2d", "conv3d"}  # (x, w, ...): K = w's dimensions but the first


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def op_row(name, ins, out, policy):
    """The AMP_OPS columns of one call of a torch function named name (its __name__) as
    (op, in_dtypes, out_dtype, shapes, flops, bytes). ins: its tensor arguments as (dtype name,
    shape, item size), out: its (first) output likewise; policy: autocast's policy for name
    (None: autocast off). As in libampcore's rows, in_dtypes are the dtypes after autocast's
    casts (a GEMM's f32 inputs become the autocast dtype, an fp32-policy op's f16 inputs f32;
    fp32_set_opt_dtype ops such as softmax keep theirs), FLOPs are 2*M*N*K for GEMMs and
    convolutions and one per output value otherwise, bytes are those of the inputs and the
    output."""
    op = op_name(name)
    out_dtype, out_shape, out_size = out
    numel = _numel(out_shape)
    cast = policy in _CASTING
    in_dtypes = ",".join(out_dtype if cast and dt in _FLOATS else dt for dt, _, _ in ins)
    shapes = ",".join(_shape(sh) for _, sh, _ in ins)
    flops = numel
    if op in _MATMULS and len(ins) >= 2 and ins[0][1]:
        flops = 2 * numel * int(ins[0][1][-1])
    elif op in _BIASED_MATMULS and len(ins) >= 3 and ins[1][1]:
        flops = 2 * numel * int(ins[1][1][-1])
    elif op in _CONVS and len(ins) >= 2 and len(ins[1][1]) >= 2:
        flops = 2 * numel * _numel(ins[1][1][1:])
    nbytes = numel * out_size + sum(_numel(sh) * size for _, sh, size in ins)
    return op, in_dtypes, out_dtype, shapes, flops, nbytes


def describe(what, dtype, shape, mn, mx, amax, n_nan=0, n_posinf=0, n_neginf=0):
    """One segment of an event's detail, as libampcore's describe() writes it (the range over the
    finite values; amax NaN: there is none)."""
    s = "%s %s %s " % (what, dtype, _shape(shape))
    s += "no finite value" if amax != amax else "min %.6g max %.6g amax %.6g" % (mn, mx, amax)
    if n_nan or n_posinf or n_neginf:
        s += " (%d nan, %d +inf, %d -inf)" % (n_nan, n_posinf, n_neginf)
    return s + "; "
