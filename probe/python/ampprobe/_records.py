"""_records.py — libampcore's record API (libampcore/include/amp-record.h) through ctypes.

The bridge writes the same records as libampcore's own instrumentation, through the same C
writer (libamprecord.so: record.c and the spool codec), so the collector, the database, the
report and the TUI see no difference. The structures below mirror amp-record.h field by field
(ctypes lays them out as the C compiler does); optional values follow the header's conventions:
None for a string, NaN for a double, -1 for a count, all stored as SQL NULL.

The library is found, in this order: $AMPPROBE_LIB (set by `ampprobe run --torch`), next to the
`ampprobe` binary on PATH, then the directory above this package (build/python/.. is the build
folder). Recording is on when the library says so (AMPPROBE_SPOOL_DIR from the launcher, or
AMPPROBE_OUT); otherwise every emit function returns at once.

Needs nothing but the standard library (no torch): the CI tests run it with the system python3.
"""
import ctypes
import os
import shutil
import time
import traceback

_c_str = ctypes.c_char_p

# amp_stats_kind, amp_phase, amp_severity (C enums: int)
ACTIVATION, ACTIVATION_GRAD, WEIGHT, WEIGHT_GRAD, WEIGHT_UPDATE = 0, 1, 2, 3, 4
SUPERSEDED = -1  # an entry amp_record_tensor_stats_many leaves out (a read done again later)
PHASE_NONE, PHASE_FWD, PHASE_BWD, PHASE_OPTIM = 0, 1, 2, 3
INFO, WARNING, ERROR = 0, 1, 2


class _Meta(ctypes.Structure):
    _fields_ = [("key", _c_str), ("value", _c_str)]


class _Layer(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int32), ("parent_id", ctypes.c_int32), ("name", _c_str)]


class _Step(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("start_ns", ctypes.c_int64), ("end_ns", ctypes.c_int64),
                ("loss", ctypes.c_double), ("grad_norm", ctypes.c_double),
                ("mem_peak_bytes", ctypes.c_int64)]


class _Scale(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("scale_before", ctypes.c_double),
                ("scale_after", ctypes.c_double), ("found_inf", ctypes.c_int32),
                ("growth_tracker", ctypes.c_int32), ("skipped", ctypes.c_bool)]


class _TensorStats(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("layer_id", ctypes.c_int32), ("op", _c_str),
                ("kind", ctypes.c_int), ("dtype", _c_str), ("target_dtype", _c_str),
                ("numel", ctypes.c_int64), ("min", ctypes.c_double), ("max", ctypes.c_double),
                ("amax", ctypes.c_double), ("n_nan", ctypes.c_int64), ("n_posinf", ctypes.c_int64),
                ("n_neginf", ctypes.c_int64), ("n_overflow", ctypes.c_int64),
                ("n_underflow", ctypes.c_int64), ("n_zero", ctypes.c_int64)]


class AmpStats(ctypes.Structure):
    """amp_stats (amp.h) as the fused device reduction leaves it: min > max when no value was
    finite, amax not yet derived."""
    _fields_ = [("numel", ctypes.c_int64), ("min", ctypes.c_float), ("max", ctypes.c_float),
                ("amax", ctypes.c_float), ("n_nan", ctypes.c_int64),
                ("n_posinf", ctypes.c_int64), ("n_neginf", ctypes.c_int64),
                ("n_overflow", ctypes.c_int64), ("n_underflow", ctypes.c_int64),
                ("n_zero", ctypes.c_int64), ("sumsq", ctypes.c_double)]


class StatsEntry(ctypes.Structure):
    """amp_rec_stats_entry: what one of amp_record_tensor_stats_many's figures belongs to."""
    _fields_ = [("layer_id", ctypes.c_int32), ("kind", ctypes.c_int), ("op", _c_str),
                ("dtype", _c_str), ("zero_share", ctypes.c_float)]


class StatsSummary(ctypes.Structure):
    _fields_ = [("nonfinite", ctypes.c_int64 * 4), ("f32_overflow", ctypes.c_int64),
                ("weight_grad_sumsq", ctypes.c_double), ("weight_grads", ctypes.c_int32),
                ("zero_jump", ctypes.c_int32)]


class _Op(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("layer_id", ctypes.c_int32), ("op", _c_str),
                ("phase", ctypes.c_int), ("in_dtypes", _c_str), ("out_dtype", _c_str),
                ("policy", _c_str), ("shapes", _c_str), ("flops", ctypes.c_int64),
                ("bytes", ctypes.c_int64), ("start_ns", ctypes.c_int64),
                ("end_ns", ctypes.c_int64)]


class _Event(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("layer_id", ctypes.c_int32), ("op", _c_str),
                ("phase", ctypes.c_int), ("kind", _c_str), ("severity", ctypes.c_int),
                ("count", ctypes.c_int64), ("value", ctypes.c_double), ("detail", _c_str)]


LIBRARY = "libamprecord.so"


def find_library():
    """The path of libamprecord.so, or None."""
    env = os.environ.get("AMPPROBE_LIB")
    candidates = [env] if env else []
    exe = shutil.which("ampprobe")
    if exe:
        candidates.append(os.path.join(os.path.dirname(os.path.realpath(exe)), LIBRARY))
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "..", "..", LIBRARY))
    for c in candidates:
        if c and os.path.isfile(c):
            return c
    return None


def record_exception(kind, value):
    """Records an uncaught exception in META (`exception`, this process's row: its type and
    message, as the traceback's last line says them) when the process records: what a failed
    run died of, for the report. The startup module of `ampprobe run --torch` calls it from
    sys.excepthook, before Python prints the traceback."""
    record_meta("exception", "".join(traceback.format_exception_only(kind, value)).strip())


def record_meta(key, text):
    """A META row of this process (text cut to 600 characters) when the process records."""
    rec = Recorder()
    if rec.enabled:
        rec.meta(key, text if len(text) <= 600 else text[:597] + "...")


def _b(s):
    return None if s is None else str(s).encode("utf-8", "replace")


def _f(x):
    return float("nan") if x is None else float(x)


class Recorder:
    """The record API of one loaded libamprecord.so. `enabled` is amp_record_enabled()."""

    def __init__(self, path=None):
        path = path or find_library()
        if not path:
            raise OSError(LIBRARY + " not found: set AMPPROBE_LIB to it, or put the ampprobe "
                          "build folder on PATH (ampprobe run --torch sets AMPPROBE_LIB)")
        self.path = path
        self._lib = lib = ctypes.CDLL(path)
        self._mask = ctypes.c_uint.in_dll(lib, "amp_record_trace_mask")
        lib.amp_record_now_ns.restype = ctypes.c_int64
        lib.amp_record_now_ns.argtypes = []
        for name, struct in (("meta", _Meta), ("layer", _Layer), ("step", _Step),
                             ("scale", _Scale), ("tensor_stats", _TensorStats), ("event", _Event),
                             ("op", _Op)):
            fn = getattr(lib, "amp_record_" + name)
            fn.restype = None
            fn.argtypes = [ctypes.POINTER(struct)]

        lib.amp_record_tensor_stats_many.restype = None
        lib.amp_record_tensor_stats_many.argtypes = [
            ctypes.c_int64, _c_str, ctypes.c_int, ctypes.POINTER(StatsEntry), ctypes.c_void_p,
            ctypes.POINTER(StatsSummary)]
        lib.ampbridge_autocast_policy.restype = _c_str
        lib.ampbridge_autocast_policy.argtypes = [_c_str]
        self._policies = {}

    @property
    def enabled(self):
        return bool(self._mask.value & 1)  # AMP_TRACE_AMP

    # The records' clock: amp_record_now_ns()'s CLOCK_REALTIME, read without a ctypes call (the
    # op recorder reads it twice per function; CI checks that both agree).
    now_ns = staticmethod(time.time_ns)

    def lib_now_ns(self):
        return self._lib.amp_record_now_ns()

    def meta(self, key, value):
        self._lib.amp_record_meta(ctypes.byref(_Meta(_b(key), _b(value))))

    def layer(self, id, parent_id, name):
        self._lib.amp_record_layer(ctypes.byref(_Layer(id, parent_id, _b(name))))

    def step(self, step, start_ns, end_ns, loss, grad_norm=None, mem_peak_bytes=0):
        """mem_peak_bytes: the peak of memory held by tensors up to the step's end (0: not
        known)."""
        self._lib.amp_record_step(ctypes.byref(_Step(step, start_ns, end_ns, _f(loss),
                                                     _f(grad_norm), int(mem_peak_bytes))))

    def scale(self, step, before, after, found_inf, growth_tracker, skipped):
        self._lib.amp_record_scale(ctypes.byref(_Scale(step, before, after, int(found_inf),
                                                       int(growth_tracker), bool(skipped))))

    def tensor_stats(self, step, layer_id, op, kind, dtype, target_dtype, numel, mn, mx, amax,
                     n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero):
        r = _TensorStats(step, layer_id, _b(op), kind, _b(dtype), _b(target_dtype), numel,
                         _f(mn), _f(mx), _f(amax), n_nan, n_posinf, n_neginf, n_overflow,
                         n_underflow, n_zero)
        self._lib.amp_record_tensor_stats(ctypes.byref(r))

    def tensor_stats_many(self, step, target_dtype, entries, stats_address):
        """Records len(entries) tensors' statistics from the amp_stats array at stats_address
        (entries: a StatsEntry array, see entries()); returns the StatsSummary."""
        summary = StatsSummary()
        self._lib.amp_record_tensor_stats_many(step, _b(target_dtype), len(entries), entries,
                                               stats_address, ctypes.byref(summary))
        return summary

    @staticmethod
    def entries(rows):
        """A StatsEntry array from (layer_id, kind, op, dtype) rows; the strings are kept
        alive by the array."""
        arr = (StatsEntry * len(rows))()
        keep = []
        for k, (layer, kind, op, dtype) in enumerate(rows):
            o, d = _b(op), _b(dtype)
            keep += [o, d]
            arr[k] = StatsEntry(layer, kind, o, d, -1.0)
        arr._keep = keep
        return arr

    def op(self, step, layer_id, op, phase, in_dtypes, out_dtype, policy, shapes, flops, nbytes,
           start_ns, end_ns):
        """One op call with its autocast decision (AMP_OPS; policy None: autocast off)."""
        r = _Op(step, layer_id, _b(op), phase, _b(in_dtypes), _b(out_dtype), _b(policy),
                _b(shapes), flops, nbytes, start_ns, end_ns)
        self._lib.amp_record_op(ctypes.byref(r))

    def autocast_policy(self, name):
        """The autocast policy of a torch function or aten op name, from libampcore's lists
        ("linear" -> "lower_precision_fp", "softmax" -> "fp32_set_opt_dtype")."""
        p = self._policies.get(name)
        if p is None:
            p = self._policies[name] = self._lib.ampbridge_autocast_policy(_b(name)).decode()
        return p

    def event(self, step, layer_id, op, phase, kind, severity, count=-1, value=None,
              detail=None):
        r = _Event(step, layer_id, _b(op), phase, _b(kind), severity, count, _f(value),
                   _b(detail))
        self._lib.amp_record_event(ctypes.byref(r))

