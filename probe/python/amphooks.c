/*
 * amphooks.c — the PyTorch bridge's per-module hooks in C: `_ampprobe_hooks`, a CPython
 * extension on the stable ABI (one build loads in every CPython from 3.8 on).
 *
 * The bridge runs once per module output (a forward hook) and once per output gradient (a
 * pre-hook on the autograd node that made the output): dozens of times a step, on the host's
 * critical path when the training loop is host-bound. In Python each call costs 10-20 µs of
 * interpreter; PyTorch's own hook machinery around it costs a few. These are the same hooks as
 * ampprobe/torch.py's Watcher._on_output, _grad_hook and _queue (the reference, used when this
 * module is missing or AMPPROBE_PY_HOOKS is set), doing the common case here and handing every
 * other case (a container output, a leaf output, the first sampled step, a layer read at once,
 * a dtype not in the table) to those Python functions, so the logic of the rare cases lives in
 * one place. The Watcher's and StepStats's state is read from their attributes at every call
 * (they are reassigned as steps go), and written under the Watcher's lock as _queue does.
 *
 * Python API (ampprobe/torch.py is its one user):
 *   Hooks(watcher, stats, info, at_once, lock, dtypes, tensor_type, grad_enabled,
 *         queue_py, output_py, leaf_py, activation, activation_grad, batch, batch_bytes)
 *     info: dict id(module) -> (layer, op, pre-hook for output 0); dtypes: dict torch dtype ->
 *     (name or None for one without statistics, amp code or None, itemsize)
 *   .on_output(module, args, output)  the forward hook
 *   .queue(kind, layer, op, tensor)   Watcher._queue
 *   .grad_hook(layer, op, nr) -> a pre-hook queueing grad_outputs[nr]
 */
#define Py_LIMITED_API 0x03080000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

// attribute and method names, interned once
static PyObject *s_sampled, *s_rerunning, *s_training, *s_dtype, *s_numel, *s_requires_grad,
    *s_grad_fn, *s_output_nr, *s_register_prehook, *s_entries, *s_watch, *s_against, *s_version,
    *s_order, *s_pending, *s_pending_handles, *s_pending_codes, *s_pending_numels,
    *s_pending_checks, *s_pending_bytes, *s_pending_target, *s_flush, *s_acquire, *s_release;

typedef struct {
    PyObject_HEAD
    PyObject *watcher, *stats, *info, *at_once, *lock, *dtypes, *tensor_type, *grad_enabled;
    PyObject *queue_py, *output_py, *leaf_py; // the Python hooks the rare cases go to
    PyObject *activation, *activation_grad;   // the record kinds
    Py_ssize_t batch, batch_bytes;             // StepStats's BATCH, BATCH_BYTES
} Hooks;

typedef struct {
    PyObject_HEAD
    Hooks *hooks;
    PyObject *layer, *op;
    Py_ssize_t nr;
} GradHook;

static PyTypeObject *HooksType, *GradHookType;

// 1 when obj.name is true, 0 when false, -1 on error.
static int attr_true(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

// obj.name as a Py_ssize_t (-1 with an exception on error).
static Py_ssize_t attr_ssize(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) return -1;
    Py_ssize_t n = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return n;
}

// list obj.name.append(item); 0 or -1.
static int attr_append(PyObject *obj, PyObject *name, PyObject *item) {
    PyObject *list = PyObject_GetAttr(obj, name);
    if (!list) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(list);
    return r;
}

static PyObject *none(void) {
    Py_INCREF(Py_None);
    return Py_None;
}

// StepStats.defer(t, target, bounds, check, dtype, numel) for a target equal to the pending one,
// with the caller holding the lock; the entry (layer, kind, op, dtype name) goes to
// watcher.entries first, as Watcher._queue does. 0 or -1.
static int defer(Hooks *h, PyObject *entry, PyObject *t, PyObject *code, Py_ssize_t numel,
                 Py_ssize_t itemsize, int check) {
    PyObject *stats = h->stats, *handle = NULL, *n = NULL, *item = NULL;
    int rc = -1;
    if (attr_append(h->watcher, s_entries, entry) < 0) return -1;
    PyObject *order = PyObject_GetAttr(stats, s_order);
    PyObject *pending = order ? PyObject_GetAttr(stats, s_pending) : NULL;
    if (!pending) goto out;
    handle = PyLong_FromSsize_t(PyList_Size(order));
    n = PyLong_FromSsize_t(numel);
    if (!handle || !n || PyList_Append(order, Py_None) < 0) goto out;
    Py_ssize_t bytes = attr_ssize(stats, s_pending_bytes);
    if (bytes < 0 && PyErr_Occurred()) goto out;
    if (check) {
        PyObject *version = PyObject_GetAttr(t, s_version);
        if (!version) goto out;
        item = Py_BuildValue("(nOO)", PyList_Size(pending), handle, version);
        Py_DECREF(version);
        if (!item || attr_append(stats, s_pending_checks, item) < 0) goto out;
    } else {
        bytes += numel * itemsize;
        PyObject *b = PyLong_FromSsize_t(bytes);
        int r = b ? PyObject_SetAttr(stats, s_pending_bytes, b) : -1;
        Py_XDECREF(b);
        if (r < 0) goto out;
    }
    if (PyList_Append(pending, t) < 0 || attr_append(stats, s_pending_handles, handle) < 0 ||
        attr_append(stats, s_pending_codes, code) < 0 ||
        attr_append(stats, s_pending_numels, n) < 0)
        goto out;
    if (PyList_Size(pending) >= h->batch || bytes >= h->batch_bytes) {
        PyObject *r = PyObject_CallMethodObjArgs(stats, s_flush, NULL);
        if (!r) goto out;
        Py_DECREF(r);
    }
    rc = 0;
out:
    Py_XDECREF(order);
    Py_XDECREF(pending);
    Py_XDECREF(handle);
    Py_XDECREF(n);
    Py_XDECREF(item);
    return rc;
}

// Watcher._queue(kind, layer, op, t): its common case here, the rest through queue_py.
static PyObject *queue(Hooks *h, PyObject *kind, PyObject *layer, PyObject *op, PyObject *t) {
    PyObject *dtype = PyObject_GetAttr(t, s_dtype);
    if (!dtype) return NULL;
    PyObject *d = PyDict_GetItemWithError(h->dtypes, dtype); // borrowed
    Py_DECREF(dtype);
    if (!d) {
        if (PyErr_Occurred()) return NULL;
        return PyObject_CallFunctionObjArgs(h->queue_py, kind, layer, op, t, NULL);
    }
    PyObject *name = PyTuple_GetItem(d, 0), *code = PyTuple_GetItem(d, 1);
    Py_ssize_t itemsize = PyLong_AsSsize_t(PyTuple_GetItem(d, 2));
    if (!name || !code || (itemsize < 0 && PyErr_Occurred())) return NULL;
    if (name == Py_None) return none(); // not a floating dtype
    PyObject *nobj = PyObject_CallMethodObjArgs(t, s_numel, NULL);
    if (!nobj) return NULL;
    Py_ssize_t numel = PyLong_AsSsize_t(nobj);
    Py_DECREF(nobj);
    if (numel < 0 && PyErr_Occurred()) return NULL;
    if (!numel) return none();
    int check = PyObject_RichCompareBool(kind, h->activation, Py_EQ);
    if (check < 0) return NULL;
    int python = 0; // the first sampled step or a layer read at once: queue_py's
    if (check) {
        PyObject *watch = PyObject_GetAttr(h->watcher, s_watch);
        if (!watch) return NULL;
        python = watch != Py_None;
        Py_DECREF(watch);
        if (!python && (python = PySet_Contains(h->at_once, layer)) < 0) return NULL;
    }
    if (!python) { // a target other than the pending one (StepStats.defer flushes): queue_py's
        PyObject *against = PyObject_GetAttr(h->watcher, s_against);
        PyObject *pending = against ? PyObject_GetAttr(h->stats, s_pending_target) : NULL;
        PyObject *target = pending ? PyTuple_GetItem(against, 0) : NULL;
        int same = target ? PyObject_RichCompareBool(target, pending, Py_EQ) : -1;
        Py_XDECREF(against);
        Py_XDECREF(pending);
        if (same < 0) return NULL;
        python = !same;
    }
    if (python) return PyObject_CallFunctionObjArgs(h->queue_py, kind, layer, op, t, NULL);

    PyObject *entry = PyTuple_Pack(4, layer, kind, op, name);
    if (!entry) return NULL;
    PyObject *r = PyObject_CallMethodObjArgs(h->lock, s_acquire, NULL);
    if (!r) {
        Py_DECREF(entry);
        return NULL;
    }
    Py_DECREF(r);
    int rc = defer(h, entry, t, code, numel, itemsize, check);
    Py_DECREF(entry);
    PyObject *type, *value, *tb; // the release runs with the error, if any, put aside
    PyErr_Fetch(&type, &value, &tb);
    r = PyObject_CallMethodObjArgs(h->lock, s_release, NULL);
    if (!r) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return NULL;
    }
    Py_DECREF(r);
    PyErr_Restore(type, value, tb);
    return rc < 0 ? NULL : none();
}

static PyObject *grad_hook_new(Hooks *h, PyObject *layer, PyObject *op, Py_ssize_t nr) {
    GradHook *g = PyObject_GC_New(GradHook, GradHookType);
    if (!g) return NULL;
    Py_INCREF(h);
    Py_INCREF(layer);
    Py_INCREF(op);
    g->hooks = h;
    g->layer = layer;
    g->op = op;
    g->nr = nr;
    PyObject_GC_Track((PyObject *)g);
    return (PyObject *)g;
}

// ---- Hooks

static PyObject *hooks_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (kwargs && PyDict_Size(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Hooks() takes positional arguments only");
        return NULL;
    }
    PyObject *a[13];
    Py_ssize_t batch, batch_bytes;
    if (!PyArg_ParseTuple(args, "OOO!OOO!OOOOOOOnn:Hooks", &a[0], &a[1], &PyDict_Type, &a[2],
                          &a[3], &a[4], &PyDict_Type, &a[5], &a[6], &a[7], &a[8], &a[9], &a[10],
                          &a[11], &a[12], &batch, &batch_bytes))
        return NULL;
    if (!PyAnySet_Check(a[3])) {
        PyErr_SetString(PyExc_TypeError, "Hooks(): at_once must be a set");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Hooks *h = (Hooks *)alloc(type, 0);
    if (!h) return NULL;
    PyObject **f[13] = {&h->watcher,      &h->stats,    &h->info,      &h->at_once,   &h->lock,
                        &h->dtypes,       &h->tensor_type, &h->grad_enabled, &h->queue_py,
                        &h->output_py,    &h->leaf_py,  &h->activation, &h->activation_grad};
    for (int i = 0; i < 13; i++) {
        Py_INCREF(a[i]);
        *f[i] = a[i];
    }
    h->batch = batch;
    h->batch_bytes = batch_bytes;
    return (PyObject *)h;
}

static int hooks_traverse(Hooks *h, visitproc visit, void *arg) {
    Py_VISIT(h->watcher);
    Py_VISIT(h->stats);
    Py_VISIT(h->info);
    Py_VISIT(h->at_once);
    Py_VISIT(h->lock);
    Py_VISIT(h->dtypes);
    Py_VISIT(h->tensor_type);
    Py_VISIT(h->grad_enabled);
    Py_VISIT(h->queue_py);
    Py_VISIT(h->output_py);
    Py_VISIT(h->leaf_py);
    Py_VISIT(h->activation);
    Py_VISIT(h->activation_grad);
    Py_VISIT(Py_TYPE(h)); // a heap type
    return 0;
}

static int hooks_clear(Hooks *h) {
    Py_CLEAR(h->watcher);
    Py_CLEAR(h->stats);
    Py_CLEAR(h->info);
    Py_CLEAR(h->at_once);
    Py_CLEAR(h->lock);
    Py_CLEAR(h->dtypes);
    Py_CLEAR(h->tensor_type);
    Py_CLEAR(h->grad_enabled);
    Py_CLEAR(h->queue_py);
    Py_CLEAR(h->output_py);
    Py_CLEAR(h->leaf_py);
    Py_CLEAR(h->activation);
    Py_CLEAR(h->activation_grad);
    return 0;
}

static void hooks_dealloc(Hooks *h) {
    PyTypeObject *type = Py_TYPE(h);
    PyObject_GC_UnTrack(h);
    hooks_clear(h);
    freefunc free_ = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_(h);
    Py_DECREF(type);
}

static PyObject *hooks_queue(Hooks *h, PyObject *args) {
    PyObject *kind, *layer, *op, *t;
    if (!PyArg_UnpackTuple(args, "queue", 4, 4, &kind, &layer, &op, &t)) return NULL;
    return queue(h, kind, layer, op, t);
}

// Watcher._on_output: the output's statistics and a pre-hook for its gradient.
static PyObject *hooks_on_output(Hooks *h, PyObject *args) {
    PyObject *module, *margs, *out;
    if (!PyArg_UnpackTuple(args, "on_output", 3, 3, &module, &margs, &out)) return NULL;
    int on = attr_true(h->watcher, s_sampled);
    if (on > 0) on = !attr_true(h->watcher, s_rerunning);
    if (on > 0) on = attr_true(module, s_training);
    if (on > 0) {
        PyObject *g = PyObject_CallObject(h->grad_enabled, NULL);
        on = g ? PyObject_IsTrue(g) : -1;
        Py_XDECREF(g);
    }
    if (on <= 0) return on < 0 || PyErr_Occurred() ? NULL : none();
    int tensor = PyObject_IsInstance(out, h->tensor_type);
    if (tensor < 0) return NULL;
    PyObject *key = PyLong_FromVoidPtr(module);
    PyObject *info = key ? PyDict_GetItemWithError(h->info, key) : NULL; // borrowed
    Py_XDECREF(key);
    if (!info && PyErr_Occurred()) return NULL;
    if (!tensor || !info) // a container of outputs, or a module not known at watch(): Python's
        return PyObject_CallFunctionObjArgs(h->output_py, module, margs, out, NULL);
    PyObject *layer = PyTuple_GetItem(info, 0), *op = PyTuple_GetItem(info, 1);
    PyObject *hook0 = PyTuple_GetItem(info, 2);
    if (!layer || !op || !hook0) return NULL;
    PyObject *r = queue(h, h->activation, layer, op, out);
    if (!r) return NULL;
    Py_DECREF(r);
    int rg = attr_true(out, s_requires_grad);
    if (rg <= 0) return rg < 0 ? NULL : none();
    PyObject *node = PyObject_GetAttr(out, s_grad_fn);
    if (!node) return NULL;
    if (node == Py_None) { // a leaf: hooked on the tensor, once (Python's)
        Py_DECREF(node);
        return PyObject_CallFunctionObjArgs(h->leaf_py, out, layer, op, NULL);
    }
    Py_ssize_t nr = attr_ssize(out, s_output_nr);
    PyObject *hook = NULL;
    if (nr == 0) {
        Py_INCREF(hook0);
        hook = hook0;
    } else if (nr > 0) {
        hook = grad_hook_new(h, layer, op, nr);
    }
    r = hook ? PyObject_CallMethodObjArgs(node, s_register_prehook, hook, NULL) : NULL;
    Py_DECREF(node);
    Py_XDECREF(hook);
    if (!r) return NULL;
    Py_DECREF(r);
    return none();
}

static PyObject *hooks_grad_hook(Hooks *h, PyObject *args) {
    PyObject *layer, *op;
    Py_ssize_t nr;
    if (!PyArg_ParseTuple(args, "OOn:grad_hook", &layer, &op, &nr)) return NULL;
    if (nr < 0) {
        PyErr_SetString(PyExc_ValueError, "grad_hook(): nr must be >= 0");
        return NULL;
    }
    return grad_hook_new(h, layer, op, nr);
}

static PyMethodDef hooks_methods[] = {
    {"on_output", (PyCFunction)hooks_on_output, METH_VARARGS,
     "on_output(module, args, output): the forward hook (Watcher._on_output)"},
    {"queue", (PyCFunction)hooks_queue, METH_VARARGS,
     "queue(kind, layer, op, tensor): Watcher._queue"},
    {"grad_hook", (PyCFunction)hooks_grad_hook, METH_VARARGS,
     "grad_hook(layer, op, nr): an autograd node pre-hook queueing grad_outputs[nr]"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot hooks_slots[] = {
    {Py_tp_new, hooks_new},         {Py_tp_dealloc, hooks_dealloc},
    {Py_tp_traverse, hooks_traverse}, {Py_tp_clear, hooks_clear},
    {Py_tp_methods, hooks_methods}, {Py_tp_doc, "The bridge's hooks of one Watcher."},
    {0, NULL},
};

static PyType_Spec hooks_spec = {"_ampprobe_hooks.Hooks", sizeof(Hooks), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, hooks_slots};

// ---- GradHook: called by autograd with the node's incoming gradients

static PyObject *grad_hook_call(GradHook *g, PyObject *args, PyObject *kwargs) {
    PyObject *grads;
    (void)kwargs;
    if (!PyArg_UnpackTuple(args, "grad_hook", 1, 1, &grads)) return NULL;
    PyObject *grad = PySequence_GetItem(grads, g->nr);
    if (!grad) return NULL;
    PyObject *r = grad == Py_None ? none()
                                  : queue(g->hooks, g->hooks->activation_grad, g->layer, g->op,
                                          grad);
    Py_DECREF(grad);
    if (!r) return NULL;
    Py_DECREF(r);
    return none(); // the gradients unchanged
}

static int grad_hook_traverse(GradHook *g, visitproc visit, void *arg) {
    Py_VISIT(g->hooks);
    Py_VISIT(g->layer);
    Py_VISIT(g->op);
    Py_VISIT(Py_TYPE(g));
    return 0;
}

static int grad_hook_clear(GradHook *g) {
    Py_CLEAR(g->hooks);
    Py_CLEAR(g->layer);
    Py_CLEAR(g->op);
    return 0;
}

static void grad_hook_dealloc(GradHook *g) {
    PyTypeObject *type = Py_TYPE(g);
    PyObject_GC_UnTrack(g);
    grad_hook_clear(g);
    PyObject_GC_Del(g);
    Py_DECREF(type);
}

static PyType_Slot grad_hook_slots[] = {
    {Py_tp_call, grad_hook_call},         {Py_tp_dealloc, grad_hook_dealloc},
    {Py_tp_traverse, grad_hook_traverse}, {Py_tp_clear, grad_hook_clear},
    {Py_tp_doc, "A pre-hook queueing a module output's gradient."},
    {0, NULL},
};

static PyType_Spec grad_hook_spec = {"_ampprobe_hooks.GradHook", sizeof(GradHook), 0,
                                     Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, grad_hook_slots};

// ---- the module

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_ampprobe_hooks",
    "The PyTorch bridge's per-module hooks in C (see ampprobe/torch.py).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ampprobe_hooks(void) {
    struct {
        PyObject **at;
        const char *name;
    } names[] = {
        {&s_sampled, "sampled"},
        {&s_rerunning, "rerunning"},
        {&s_training, "training"},
        {&s_dtype, "dtype"},
        {&s_numel, "numel"},
        {&s_requires_grad, "requires_grad"},
        {&s_grad_fn, "grad_fn"},
        {&s_output_nr, "output_nr"},
        {&s_register_prehook, "register_prehook"},
        {&s_entries, "entries"},
        {&s_watch, "_watch"},
        {&s_against, "_against"},
        {&s_version, "_version"},
        {&s_order, "order"},
        {&s_pending, "pending"},
        {&s_pending_handles, "_pending_handles"},
        {&s_pending_codes, "_pending_codes"},
        {&s_pending_numels, "_pending_numels"},
        {&s_pending_checks, "_pending_checks"},
        {&s_pending_bytes, "_pending_bytes"},
        {&s_pending_target, "_pending_target"},
        {&s_flush, "flush"},
        {&s_acquire, "acquire"},
        {&s_release, "release"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!*names[i].at && !(*names[i].at = PyUnicode_InternFromString(names[i].name)))
            return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    HooksType = (PyTypeObject *)PyType_FromSpec(&hooks_spec);
    GradHookType = (PyTypeObject *)PyType_FromSpec(&grad_hook_spec);
    if (!HooksType || !GradHookType ||
        PyModule_AddObject(m, "Hooks", (PyObject *)HooksType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(HooksType); // PyModule_AddObject stole one; this file keeps one
    if (PyModule_AddObject(m, "GradHook", (PyObject *)GradHookType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(GradHookType);
    return m;
}
