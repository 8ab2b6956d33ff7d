/* libFuzzer target for the C record codec (kbroker/protocol/_recordcodec.c).
 *
 * `kbroker consume` decodes whatever a broker returns, so its reader takes hostile input
 * too. This target includes the module's source as it ships and calls `decode` and
 * `join_values` with an embedded Python, over a memoryview of libFuzzer's exactly sized
 * buffer (AddressSanitizer reports a read one byte past it). A corrupt section must end
 * in ValueError, never in a memory error, an allocation sized by a hostile count, or any
 * other exception; both readers must agree on how many records they print.
 *
 * Input: bytes 0-3 are the record count (little-endian, as large as a batch header
 * allows), byte 4 the minimum offset delta; the rest is the records section.
 * Build and run: fuzz/run.sh recordcodec.
 */
#include "../kbroker/protocol/_recordcodec.c"

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("PYTHONMALLOC", "malloc", 1);
    Py_InitializeEx(0);
    return 0;
}

/* -1 for a ValueError (corrupt input), the count otherwise; aborts on anything else. */
static Py_ssize_t outcome(PyObject *r, int is_list)
{
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            abort();
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t n;
    if (is_list) {
        n = PyList_GET_SIZE(r);
    } else {
        n = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
    }
    Py_DECREF(r);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    uint32_t raw = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                   (uint32_t)data[3] << 24;
    Py_ssize_t count = (Py_ssize_t)(raw & 0x7fffffff);
    long long min_delta = data[4] % 4;
    PyObject *section = PyMemoryView_FromMemory((char *)data + 5, (Py_ssize_t)size - 5, PyBUF_READ);
    if (section == NULL)
        abort();
    PyObject *args = Py_BuildValue("(OnL)", section, count, min_delta);
    Py_ssize_t decoded = outcome(decode(NULL, args), 1);
    Py_DECREF(args);
    args = Py_BuildValue("(OnLy#y#)", section, count, min_delta, "\t", (Py_ssize_t)1, "\n",
                         (Py_ssize_t)1);
    Py_ssize_t printed = outcome(join_values(NULL, args), 0);
    Py_DECREF(args);
    if (decoded != printed)
        abort();
    Py_DECREF(section);
    return 0;
}
