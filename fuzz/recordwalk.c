/* libFuzzer target for the broker's C record walk (kbroker/protocol/_recordwalk.c).
 *
 * The walk reads every produced batch's records before anything is stored, so its input
 * is whatever a client sends. This target includes the module's source as it ships and
 * calls its functions the way record_validation.py does, with an embedded Python for
 * the objects they take and return. The section is handed over as a memoryview of
 * libFuzzer's own buffer, which is exactly as long as the input: AddressSanitizer reports
 * a read one byte past the section.
 *
 * Input: byte 0 picks the record count, byte 1 skews the last offset delta, byte 2 picks
 * the field (key or value) for the schema-id walk (and whether all_clear requires keys);
 * the rest is the records section, and the whole input is also a records blob for
 * all_clear. Besides memory errors it checks what callers rely on: an error is
 * ValueError(index, message) with index -1 or a record of the batch, a success keeps
 * min <= max and a first key-less record inside the batch, invalid indexes rise
 * strictly, and all_clear answers a bool whatever the blob.
 * Build and run: fuzz/run.sh recordwalk.
 */
#include "../kbroker/protocol/_recordwalk.c"

#include <stdlib.h>

static PyObject *valid_ids;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("PYTHONMALLOC", "malloc", 1); /* every object its own allocation, seen by ASan */
    Py_InitializeEx(0);
    valid_ids = Py_BuildValue("{iiii}", 1, 1, 7, 7); /* a dict: `in` as the set does */
    return valid_ids == NULL;
}

static void check_walk(PyObject *section, long long count, long long last_delta)
{
    PyObject *args = Py_BuildValue("(OLL)", section, count, last_delta);
    if (args == NULL)
        abort();
    PyObject *r = walk(NULL, args);
    Py_DECREF(args);
    if (r == NULL) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (type != PyExc_ValueError)
            abort();
        PyObject *eargs = PyObject_GetAttrString(value, "args");
        if (eargs == NULL || PyTuple_GET_SIZE(eargs) != 2)
            abort();
        long long index = PyLong_AsLongLong(PyTuple_GET_ITEM(eargs, 0));
        if (index < -1 || index >= count || !PyUnicode_Check(PyTuple_GET_ITEM(eargs, 1)))
            abort();
        Py_DECREF(eargs);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    long long lo, hi;
    Py_ssize_t keyless;
    if (!PyArg_ParseTuple(r, "LLn", &lo, &hi, &keyless) || lo > hi || keyless < -1 ||
        keyless >= count)
        abort();
    Py_DECREF(r);
}

static void check_schema_ids(PyObject *section, Py_ssize_t count, int field)
{
    PyObject *args = Py_BuildValue("(OniO)", section, count, field, valid_ids);
    if (args == NULL)
        abort();
    PyObject *bad = invalid_schema_ids(NULL, args);
    Py_DECREF(args);
    if (bad == NULL || !PyList_Check(bad))
        abort();
    long long previous = -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(bad); i++) {
        long long index = PyLong_AsLongLong(PyList_GET_ITEM(bad, i));
        if (index <= previous || index >= count)
            abort();
        previous = index;
    }
    Py_DECREF(bad);
}

/* all_clear over the whole input as a records blob: a bool, or a clean error. */
static void check_all_clear(PyObject *blob, int field)
{
    PyObject *args = Py_BuildValue("(OLLii)", blob, -1000LL, 1000LL, field, 1);
    if (args == NULL)
        abort();
    PyObject *r = all_clear(NULL, args);
    Py_DECREF(args);
    if (r == NULL || !PyBool_Check(r))
        abort();
    Py_DECREF(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    long long count = data[0] % 64;
    long long last_delta = count - 1 + (data[1] % 3) - 1;
    int field = data[2] & 1;
    PyObject *section = PyMemoryView_FromMemory((char *)data + 3, (Py_ssize_t)size - 3, PyBUF_READ);
    if (section == NULL)
        abort();
    check_walk(section, count, last_delta);
    check_schema_ids(section, (Py_ssize_t)count, field);
    PyObject *blob = PyMemoryView_FromMemory((char *)data, (Py_ssize_t)size, PyBUF_READ);
    if (blob == NULL)
        abort();
    check_all_clear(blob, field);
    Py_DECREF(blob);
    Py_DECREF(section);
    return 0;
}
