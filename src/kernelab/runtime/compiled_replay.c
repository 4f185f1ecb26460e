/* The two per-call steps of a planned Triton launch that cost the most as Python bytecode,
 * done in C; compiled_replay.py builds this file with the machine's C compiler and loads it.
 *
 *   plan_key(device_index, stream, tensors, count, scalars) -> tuple
 *       launch_plans.LaunchPlans.key()'s tuple, item for item: the device index, the stream,
 *       then for each of the first `count` tensors its device, shape, strides, dtype and
 *       address modulo 16, an aliasing entry when two of them share an address, the scalars.
 *   prepare(launch_function, kernel, grid_x, grid_y, grid_z, block, shared_bytes, params,
 *           param_count, pointer_slots, map_slots) -> capsule
 *       one planned launch: cuLaunchKernel's address and arguments (params: the address of
 *       the array of param_count parameter addresses), the parameter slots that take the
 *       call's tensors' addresses ((slot address, tensor index) pairs) and the array entries
 *       that point at a TMA map ((entry index, tensor index, maps object with an
 *       address(tensor) method) triples).
 *   launch(prepared, tensors, stream) -> int
 *       writes the tensors' addresses into their slots and launches; returns the CUresult.
 *
 * No CUDA header is needed: cuLaunchKernel comes as an address (ctypes finds it in libcuda),
 * so this also builds where no GPU is, and the tests pass a recording stand-in instead. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#define MOST_TENSORS 16
#define MOST_SLOTS 64
#define PREPARED_NAME "kernelab.compiled_replay.prepared"

/* CUresult cuLaunchKernel(CUfunction, gridDim x3, blockDim x3, sharedMemBytes, CUstream,
 * void **kernelParams, void **extra) */
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);

static PyObject *name_data_ptr, *name_get_device, *name_shape, *name_stride, *name_dtype,
    *name_address;

static int address_of(PyObject *tensor, unsigned long long *address) {
    PyObject *value = PyObject_CallMethodNoArgs(tensor, name_data_ptr);
    if (value == NULL) return -1;
    *address = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    return (*address == (unsigned long long)-1 && PyErr_Occurred()) ? -1 : 0;
}

static void release(PyObject **items, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]);
}

static PyObject *plan_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "plan_key(device_index, stream, tensors, count, scalars)");
        return NULL;
    }
    PyObject *tensors = args[2];
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(tensors) || count < 0 || count > PyTuple_GET_SIZE(tensors) ||
        count > MOST_TENSORS) {
        PyErr_SetString(PyExc_ValueError, "plan_key: a tuple of at least `count` tensors, 16 at most");
        return NULL;
    }
    /* device, stream, 5 per tensor, the aliasing entry, the scalars */
    PyObject *items[2 + 5 * MOST_TENSORS + 2] = {NULL};
    unsigned long long addresses[MOST_TENSORS];
    Py_ssize_t n = 0;
    Py_INCREF(args[0]);
    items[n++] = args[0];
    Py_INCREF(args[1]);
    items[n++] = args[1];
    for (Py_ssize_t t = 0; t < count; t++) {
        PyObject *tensor = PyTuple_GET_ITEM(tensors, t);
        if (address_of(tensor, &addresses[t]) < 0) goto failed;
        if ((items[n++] = PyObject_CallMethodNoArgs(tensor, name_get_device)) == NULL) goto failed;
        if ((items[n++] = PyObject_GetAttr(tensor, name_shape)) == NULL) goto failed;
        if ((items[n++] = PyObject_CallMethodNoArgs(tensor, name_stride)) == NULL) goto failed;
        if ((items[n++] = PyObject_GetAttr(tensor, name_dtype)) == NULL) goto failed;
        if ((items[n++] = PyLong_FromUnsignedLongLong(addresses[t] & 15)) == NULL) goto failed;
    }
    /* aliasing: for each tensor, the index of the first one with its address */
    Py_ssize_t first[MOST_TENSORS];
    int aliased = 0;
    for (Py_ssize_t t = 0; t < count; t++) {
        first[t] = t;
        for (Py_ssize_t u = 0; u < t; u++) {
            if (addresses[u] == addresses[t]) {
                first[t] = u;
                aliased = 1;
                break;
            }
        }
    }
    if (aliased) {
        PyObject *which = PyTuple_New(count);
        if (which == NULL) goto failed;
        for (Py_ssize_t t = 0; t < count; t++) {
            PyObject *index = PyLong_FromSsize_t(first[t]);
            if (index == NULL) {
                Py_DECREF(which);
                goto failed;
            }
            PyTuple_SET_ITEM(which, t, index);
        }
        items[n++] = which;
    }
    Py_INCREF(args[4]);
    items[n++] = args[4];
    PyObject *key = PyTuple_New(n);
    if (key == NULL) goto failed;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(key, i, items[i]); /* steals */
    return key;
failed:
    release(items, n);
    return NULL;
}

typedef struct {
    launch_fn launch;
    void *kernel;
    unsigned grid[3], block, shared_bytes;
    void **params;
    Py_ssize_t pointer_count, map_count;
    unsigned long long *pointer_slot[MOST_SLOTS];
    Py_ssize_t pointer_tensor[MOST_SLOTS];
    Py_ssize_t map_entry[MOST_SLOTS], map_tensor[MOST_SLOTS];
    PyObject *map_owner[MOST_SLOTS];
} Prepared;

static void prepared_free(PyObject *capsule) {
    Prepared *p = PyCapsule_GetPointer(capsule, PREPARED_NAME);
    if (p == NULL) return;
    for (Py_ssize_t i = 0; i < p->map_count; i++) Py_XDECREF(p->map_owner[i]);
    free(p);
}

static int as_address(PyObject *value, void **out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

static int as_unsigned(PyObject *value, unsigned *out) {
    unsigned long v = PyLong_AsUnsignedLong(value);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (v > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_OverflowError, "a launch dimension over 32 bits");
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

static int as_index(PyObject *pair, Py_ssize_t position, Py_ssize_t *out) {
    *out = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, position));
    if (*out == -1 && PyErr_Occurred()) return -1;
    if (*out < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative slot or tensor index");
        return -1;
    }
    return 0;
}

static PyObject *prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError,
                        "prepare(launch_function, kernel, grid_x, grid_y, grid_z, block, "
                        "shared_bytes, params, param_count, pointer_slots, map_slots)");
        return NULL;
    }
    PyObject *pointer_slots = args[9], *map_slots = args[10];
    Py_ssize_t param_count = PyLong_AsSsize_t(args[8]);
    if (param_count == -1 && PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(pointer_slots) || !PyTuple_Check(map_slots) ||
        PyTuple_GET_SIZE(pointer_slots) > MOST_SLOTS || PyTuple_GET_SIZE(map_slots) > MOST_SLOTS) {
        PyErr_SetString(PyExc_ValueError, "prepare: slots as tuples, 64 of each at most");
        return NULL;
    }
    Prepared *p = calloc(1, sizeof(Prepared));
    if (p == NULL) return PyErr_NoMemory();
    void *launch = NULL;
    if (as_address(args[0], &launch) < 0 || as_address(args[1], &p->kernel) < 0 ||
        as_unsigned(args[2], &p->grid[0]) < 0 || as_unsigned(args[3], &p->grid[1]) < 0 ||
        as_unsigned(args[4], &p->grid[2]) < 0 || as_unsigned(args[5], &p->block) < 0 ||
        as_unsigned(args[6], &p->shared_bytes) < 0 || as_address(args[7], (void **)&p->params) < 0)
        goto failed;
    if (launch == NULL || p->params == NULL) {
        PyErr_SetString(PyExc_ValueError, "prepare: a null launch function or parameter array");
        goto failed;
    }
    p->launch = (launch_fn)launch;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pointer_slots); i++) {
        PyObject *pair = PyTuple_GET_ITEM(pointer_slots, i);
        void *slot = NULL;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "a pointer slot is (slot address, tensor index)");
            goto failed;
        }
        if (as_address(PyTuple_GET_ITEM(pair, 0), &slot) < 0 ||
            as_index(pair, 1, &p->pointer_tensor[i]) < 0)
            goto failed;
        p->pointer_slot[i] = slot;
        p->pointer_count = i + 1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(map_slots); i++) {
        PyObject *triple = PyTuple_GET_ITEM(map_slots, i);
        if (!PyTuple_Check(triple) || PyTuple_GET_SIZE(triple) != 3) {
            PyErr_SetString(PyExc_ValueError, "a map slot is (entry index, tensor index, maps)");
            goto failed;
        }
        if (as_index(triple, 0, &p->map_entry[i]) < 0 || as_index(triple, 1, &p->map_tensor[i]) < 0)
            goto failed;
        if (p->map_entry[i] >= param_count) { /* it would write past the array */
            PyErr_SetString(PyExc_ValueError, "a map slot past the parameter array");
            goto failed;
        }
        p->map_owner[i] = Py_NewRef(PyTuple_GET_ITEM(triple, 2));
        p->map_count = i + 1;
    }
    PyObject *capsule = PyCapsule_New(p, PREPARED_NAME, prepared_free);
    if (capsule == NULL) goto failed;
    return capsule;
failed:
    for (Py_ssize_t i = 0; i < p->map_count; i++) Py_XDECREF(p->map_owner[i]);
    free(p);
    return NULL;
}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "launch(prepared, tensors, stream)");
        return NULL;
    }
    Prepared *p = PyCapsule_GetPointer(args[0], PREPARED_NAME);
    if (p == NULL) return NULL;
    PyObject *tensors = args[1];
    if (!PyTuple_Check(tensors)) {
        PyErr_SetString(PyExc_TypeError, "launch: tensors as a tuple");
        return NULL;
    }
    void *stream = NULL;
    if (as_address(args[2], &stream) < 0) return NULL;
    Py_ssize_t size = PyTuple_GET_SIZE(tensors);
    /* First everything that runs Python (data_ptr, the maps' address()), into locals: Python
     * code may hand the GIL to another thread, which may be launching this same plan. */
    unsigned long long addresses[MOST_SLOTS];
    void *maps[MOST_SLOTS];
    for (Py_ssize_t i = 0; i < p->pointer_count; i++) {
        if (p->pointer_tensor[i] >= size) goto too_few;
        if (address_of(PyTuple_GET_ITEM(tensors, p->pointer_tensor[i]), &addresses[i]) < 0)
            return NULL;
    }
    for (Py_ssize_t i = 0; i < p->map_count; i++) {
        if (p->map_tensor[i] >= size) goto too_few;
        PyObject *tensor = PyTuple_GET_ITEM(tensors, p->map_tensor[i]);
        PyObject *address = PyObject_CallMethodOneArg(p->map_owner[i], name_address, tensor);
        if (address == NULL) return NULL;
        int bad = as_address(address, &maps[i]);
        Py_DECREF(address);
        if (bad < 0) return NULL;
    }
    /* From here to the launch no Python runs, so no other thread sees half-written slots;
     * the driver copies the parameter bytes before cuLaunchKernel returns. */
    for (Py_ssize_t i = 0; i < p->pointer_count; i++) *p->pointer_slot[i] = addresses[i];
    for (Py_ssize_t i = 0; i < p->map_count; i++) p->params[p->map_entry[i]] = maps[i];
    int result = p->launch(p->kernel, p->grid[0], p->grid[1], p->grid[2], p->block, 1, 1,
                           p->shared_bytes, stream, p->params, NULL);
    return PyLong_FromLong(result);
too_few:
    PyErr_SetString(PyExc_ValueError, "launch: fewer tensors than the plan's slots name");
    return NULL;
}

static PyMethodDef methods[] = {
    {"plan_key", (PyCFunction)(void (*)(void))plan_key, METH_FASTCALL, "LaunchPlans.key()'s tuple"},
    {"prepare", (PyCFunction)(void (*)(void))prepare, METH_FASTCALL, "one planned launch"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch a prepared plan step"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kernelab_compiled_replay", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit_kernelab_compiled_replay(void) {
    name_data_ptr = PyUnicode_InternFromString("data_ptr");
    name_get_device = PyUnicode_InternFromString("get_device");
    name_shape = PyUnicode_InternFromString("shape");
    name_stride = PyUnicode_InternFromString("stride");
    name_dtype = PyUnicode_InternFromString("dtype");
    name_address = PyUnicode_InternFromString("address");
    if (!name_data_ptr || !name_get_device || !name_shape || !name_stride || !name_dtype ||
        !name_address)
        return NULL;
    return PyModule_Create(&module);
}
