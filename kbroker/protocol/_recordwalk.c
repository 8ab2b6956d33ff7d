/* The record walk of protocol/record_validation.py, in C.
 *
 * Validating a produced batch means reading every record's varints; in Python that
 * costs about a microsecond a record, several times what the rest of the produce path
 * costs. This module does the same walk with the same rules and the same messages
 * (record_validation.py holds the reference implementation and its documentation; a test
 * checks that both agree over random input). It also makes the buffers that frames too
 * big for protocol/framing.py's scratch buffer are read into (frame_buffer, below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>

#define VARINT_OK 0
#define VARINT_TRUNCATED 1
#define VARINT_TOO_LONG 2

/* Kafka's zigzag varint of at most `max_bytes` bytes, inside [*pos, end). Most fields of
 * a record (attributes aside) fit one byte: that case is decided before the loop. */
static inline int read_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                              int max_bytes, int64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    Py_ssize_t i = *pos;
    if (i < end && p[i] < 0x80) {
        v = p[i];
        *pos = i + 1;
        *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        return VARINT_OK;
    }
    for (int n = 0; n < max_bytes; n++) {
        if (i >= end)
            return VARINT_TRUNCATED;
        unsigned char b = p[i++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pos = i;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return VARINT_OK;
        }
        shift += 7;
    }
    return VARINT_TOO_LONG;
}

/* ValueError(index, message), as record_validation.walk_py raises it. */
static PyObject *fail(Py_ssize_t index, const char *what)
{
    PyObject *args = Py_BuildValue("(ns)", index, what);
    if (args != NULL) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* What a walk found: the timestamp deltas' range and the first record without a key,
 * or the first broken rule (the record's index, -1 for the batch, and the message). */
typedef struct {
    int64_t min_ts, max_ts;
    Py_ssize_t first_keyless;
    Py_ssize_t bad;
    char message[96];
} walked;

static int broken(walked *w, Py_ssize_t index, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    w->bad = index;
    vsnprintf(w->message, sizeof w->message, format, args);
    va_end(args);
    return -1;
}

/* The walk's rules over the records section p[0, end) of `count_ll` records: 0, or -1 at
 * the first broken rule (in `w`). */
static int walk_section(const unsigned char *p, const Py_ssize_t end, long long count_ll,
                        long long last_delta_ll, walked *w)
{
    Py_ssize_t pos = 0;
    Py_ssize_t i = 0;
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
    Py_ssize_t first_keyless = -1;

    if (count_ll <= 0 || last_delta_ll != count_ll - 1)
        return broken(w, -1, "record count %lld does not match last offset delta %lld",
                      count_ll, last_delta_ll);
    for (; i < count_ll; i++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len, n_headers, hk, hv;
        if (pos >= end) {
            return broken(w, i, "missing: the batch holds fewer records than its count");
        }
        int rc = read_varint(p, &pos, end, 5, &length);
        if (rc != VARINT_OK || length < 0 || length > INT32_MAX) {
            return broken(w, i, "invalid record length");
        }
        if (length > end - pos) {
            return broken(w, i, "length runs past the batch");
        }
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        if (pos >= rec_end) {
            return broken(w, i, "empty record");
        }
        pos++; /* attributes */
        rc = read_varint(p, &pos, rec_end, 10, &ts_delta);
        if (rc != VARINT_OK) {
            return broken(w, i, "timestamp delta runs past the record");
        }
#define CHECKED(dst, what)                                                                   \
    do {                                                                                     \
        rc = read_varint(p, &pos, rec_end, 5, &(dst));                                       \
        if (rc != VARINT_OK || (dst) < INT32_MIN || (dst) > INT32_MAX) {                    \
            return broken(w, i, what " runs past the record");                          \
        }                                                                                    \
    } while (0)
        CHECKED(offset_delta, "offset delta");
        if (offset_delta != i) {
            return broken(w, i, "offset delta out of sequence");
        }
        CHECKED(key_len, "key length");
        if (key_len < -1 || key_len > rec_end - pos) {
            return broken(w, i, "key length runs past the record");
        }
        if (key_len < 0) {
            if (first_keyless < 0)
                first_keyless = i;
        } else {
            pos += (Py_ssize_t)key_len;
        }
        CHECKED(value_len, "value length");
        if (value_len < -1 || value_len > rec_end - pos) {
            return broken(w, i, "value length runs past the record");
        }
        if (value_len > 0)
            pos += (Py_ssize_t)value_len;
        CHECKED(n_headers, "header count");
        if (n_headers < 0 || n_headers > (rec_end - pos) / 2) {
            return broken(w, i, "header count exceeds the bytes present");
        }
        for (int64_t h = 0; h < n_headers; h++) {
            CHECKED(hk, "header key length");
            if (hk < 0 || hk > rec_end - pos) {
                return broken(w, i, "header key length runs past the record");
            }
            pos += (Py_ssize_t)hk;
            CHECKED(hv, "header value length");
            if (hv < -1 || hv > rec_end - pos) {
                return broken(w, i, "header value length runs past the record");
            }
            if (hv > 0)
                pos += (Py_ssize_t)hv;
        }
#undef CHECKED
        if (pos != rec_end) {
            return broken(w, i, "fields do not fill the record's length");
        }
        if (ts_delta < min_ts)
            min_ts = ts_delta;
        if (ts_delta > max_ts)
            max_ts = ts_delta;
    }
    if (pos != end)
        return broken(w, -1, "%zd bytes follow the batch's %lld records", end - pos, count_ll);
    w->min_ts = min_ts;
    w->max_ts = max_ts;
    w->first_keyless = first_keyless;
    return 0;
}

/* walk(section, count, last_offset_delta) -> (min_ts_delta, max_ts_delta, first_keyless)
 *
 * Raises ValueError(record index or -1, message) at the first broken rule. */
static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count_ll, last_delta_ll;
    if (!PyArg_ParseTuple(args, "y*LL", &view, &count_ll, &last_delta_ll))
        return NULL;
    walked w;
    PyObject *result;
    if (walk_section(view.buf, view.len, count_ll, last_delta_ll, &w) < 0)
        result = fail(w.bad, w.message);
    else
        result = Py_BuildValue("LLn", (long long)w.min_ts, (long long)w.max_ts,
                               w.first_keyless);
    PyBuffer_Release(&view);
    return result;
}

/* The big-endian unsigned integer of n bytes at p (callers cast to the signed width). */
static int64_t be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* Where a v2 batch header's fields lie (batch.py names the same offsets). */
enum {
    BATCH_LENGTH_AT = 8,
    ATTRIBUTES_AT = 21,
    LAST_OFFSET_DELTA_AT = 23,
    BASE_TIMESTAMP_AT = 27,
    MAX_TIMESTAMP_AT = 35,
    RECORD_COUNT_AT = 57,
    BATCH_HEADER_SIZE = 61, /* the records section follows */
    LOG_OVERHEAD = 12,      /* base offset and batch length, outside batchLength */
    COMPRESSION_BITS = 0x07,
    CONTROL_BIT = 0x20,
};

/* all_clear(buf, earliest, latest, require_keys, check_time) -> bool
 *
 * True when record_validation.validate_records has nothing to do for the batches of `buf`
 * (which passed validate_batches): every batch uncompressed, its records well formed (the
 * walk above), and unless it is a control batch, a key on every record where keys are
 * required and, where timestamps are checked, every one within [earliest, latest] and
 * the largest equal to the batch's maxTimestamp. False sends the batches through
 * validate_records' own loop, which then refuses, fixes or inflates them: this decides
 * only that nothing is to be done, so it refuses nothing itself. */
static PyObject *all_clear(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long earliest, latest;
    int require_keys, check_time;
    if (!PyArg_ParseTuple(args, "y*LLpp", &view, &earliest, &latest, &require_keys, &check_time))
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0, end = view.len;
    while (pos < end) {
        const unsigned char *h = p + pos;
        int64_t size = end - pos < BATCH_HEADER_SIZE
                           ? 0
                           : (int32_t)be(h + BATCH_LENGTH_AT, 4) + (int64_t)LOG_OVERHEAD;
        if (size < BATCH_HEADER_SIZE || size > end - pos)
            break; /* not a whole batch: the loop decides */
        int64_t attributes = be(h + ATTRIBUTES_AT, 2);
        if (attributes & COMPRESSION_BITS)
            break; /* its records are walked once inflated, by the loop */
        walked w;
        if (walk_section(h + BATCH_HEADER_SIZE, (Py_ssize_t)size - BATCH_HEADER_SIZE,
                         (int32_t)be(h + RECORD_COUNT_AT, 4),
                         (int32_t)be(h + LAST_OFFSET_DELTA_AT, 4), &w) < 0)
            break; /* a broken record: the loop names it */
        if (!(attributes & CONTROL_BIT)) { /* control batches carry no keys or times to check */
            long long base = be(h + BASE_TIMESTAMP_AT, 8), first, last;
            if (require_keys && w.first_keyless >= 0)
                break;
            if (check_time && (__builtin_add_overflow(base, (long long)w.min_ts, &first) ||
                               __builtin_add_overflow(base, (long long)w.max_ts, &last) ||
                               first < earliest || last > latest ||
                               last != be(h + MAX_TIMESTAMP_AT, 8)))
                break;
        }
        pos += (Py_ssize_t)size;
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(pos == end); /* every batch clear */
}

/* invalid_schema_ids(section, count, field, valid) -> list of record indexes
 *
 * Broker-side schema validation: the indexes of the records of a batch's (inflated)
 * records section whose key (field 0) or value (field 1) does not start with magic
 * byte 0 and a big-endian schema id found in the set `valid`. A record that cannot be
 * read ends the walk as invalid (the record walk names what is wrong with it). One set
 * lookup per distinct id in a row: a batch of one schema costs one lookup. */
static PyObject *invalid_schema_ids(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    int field;
    PyObject *valid;
    if (!PyArg_ParseTuple(args, "y*niO", &view, &count, &field, &valid))
        return NULL;
    PyObject *bad = PyList_New(0);
    if (bad == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    int64_t last_ok = -1;
    int64_t v;
    for (Py_ssize_t i = 0; i < count; i++) {
        int ok = 0;
        Py_ssize_t rec_end;
        if (read_varint(p, &pos, end, 5, &v) != VARINT_OK || v < 0 || v > end - pos)
            goto broken;
        rec_end = pos + (Py_ssize_t)v;
        pos += 1; /* attributes */
        if (read_varint(p, &pos, rec_end, 10, &v) != VARINT_OK) /* timestamp delta */
            goto broken;
        if (read_varint(p, &pos, rec_end, 5, &v) != VARINT_OK) /* offset delta */
            goto broken;
        for (int f = 0; f <= field; f++) {
            if (read_varint(p, &pos, rec_end, 5, &v) != VARINT_OK || v < -1 || v > rec_end - pos)
                goto broken;
            if (f == field && v >= 5 && p[pos] == 0) {
                int64_t id = ((int64_t)p[pos + 1] << 24) | ((int64_t)p[pos + 2] << 16) |
                             ((int64_t)p[pos + 3] << 8) | (int64_t)p[pos + 4];
                if (id == last_ok) {
                    ok = 1;
                } else {
                    PyObject *key = PyLong_FromLongLong(id);
                    if (key == NULL)
                        goto error;
                    int found = PySequence_Contains(valid, key);
                    Py_DECREF(key);
                    if (found < 0)
                        goto error;
                    if (found) {
                        ok = 1;
                        last_ok = id;
                    }
                }
            }
            if (v > 0)
                pos += (Py_ssize_t)v;
        }
        if (!ok) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(bad, index) < 0) {
                Py_XDECREF(index);
                goto error;
            }
            Py_DECREF(index);
        }
        pos = rec_end;
        continue;
    broken: {
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(bad, index) < 0) {
            Py_XDECREF(index);
            goto error;
        }
        Py_DECREF(index);
        break;
    }
    }
    PyBuffer_Release(&view);
    return bad;
error:
    Py_DECREF(bad);
    PyBuffer_Release(&view);
    return NULL;
}

/* frame_buffer(size) -> bytearray of `size` bytes, not zeroed.
 *
 * A frame bigger than the read scratch buffer (protocol/framing.py) is read into a
 * buffer of its own, and every byte of it is overwritten by the socket before the frame
 * is handed out; bytearray(size) would first zero all of it, some 10 us for a 330 KB
 * produce request, the price of a pass over memory the kernel is about to fill. */
static PyObject *frame_buffer(PyObject *self, PyObject *arg)
{
    Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "negative frame size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, size);
}

static PyMethodDef methods[] = {
    {"frame_buffer", frame_buffer, METH_O,
     "frame_buffer(size) -> bytearray of size bytes whose contents are not set"},
    {"walk", walk, METH_VARARGS,
     "walk(section, count, last_offset_delta) -> (min_ts_delta, max_ts_delta, first_keyless)"},
    {"all_clear", all_clear, METH_VARARGS,
     "all_clear(buf, earliest, latest, require_keys, check_time) -> whether validate_records "
     "has nothing to do"},
    {"invalid_schema_ids", invalid_schema_ids, METH_VARARGS,
     "invalid_schema_ids(section, count, field, valid) -> indexes of records without a valid "
     "schema id"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordwalk", "The record walk of record_validation.py, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__recordwalk(void) { return PyModule_Create(&module); }
