/* The record codec of protocol/record_codec.py, in C.
 *
 * `kbroker produce` and `kbroker consume` move a record per line; building or reading a
 * record's varints in Python costs one to two microseconds, ten times what the broker
 * spends on it. These functions do the same work as the Python ones in codec.py (the
 * reference implementation and its documentation; a test checks that both agree).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} buffer;

static int grow(buffer *b, Py_ssize_t need)
{
    if (b->len + need <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + need)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int varint_size(int64_t n)
{
    uint64_t v = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    int size = 1;
    while (v >= 0x80) {
        v >>= 7;
        size++;
    }
    return size;
}

static inline void put_varint(buffer *b, int64_t n)
{
    uint64_t v = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (v >= 0x80) {
        b->data[b->len++] = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    b->data[b->len++] = (char)v;
}

/* One record: key NULL for a null key. */
static int put_record(buffer *b, int64_t offset_delta, const char *key, Py_ssize_t key_len,
                      const char *value, Py_ssize_t value_len, const char *headers,
                      Py_ssize_t headers_len)
{
    int64_t body = 1 + 1 + varint_size(offset_delta) + varint_size(key ? key_len : -1) +
                   (key ? key_len : 0) + varint_size(value ? value_len : -1) +
                   (value ? value_len : 0) + headers_len;
    if (grow(b, body + 10) < 0)
        return -1;
    put_varint(b, body);
    b->data[b->len++] = 0; /* attributes */
    b->data[b->len++] = 0; /* timestamp delta */
    put_varint(b, offset_delta);
    put_varint(b, key ? key_len : -1);
    if (key) {
        memcpy(b->data + b->len, key, key_len);
        b->len += key_len;
    }
    put_varint(b, value ? value_len : -1);
    if (value) {
        memcpy(b->data + b->len, value, value_len);
        b->len += value_len;
    }
    memcpy(b->data + b->len, headers, headers_len);
    b->len += headers_len;
    return 0;
}

static const char *find(const char *hay, Py_ssize_t hay_len, const char *needle,
                        Py_ssize_t needle_len)
{
    if (needle_len == 1)
        return memchr(hay, needle[0], hay_len);
    for (Py_ssize_t i = 0; i + needle_len <= hay_len; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, needle_len) == 0)
            return hay + i;
    return NULL;
}

/* encode_lines(data, pos, final, key_sep, headers, max_records, max_bytes)
 *     -> (section, count, new_pos)
 *
 * Records of the lines of data[pos:], offset deltas from 0; a last line without a
 * newline counts only when `final`. Raises ValueError(line index) for a line without
 * `key_sep` when one is given. */
static PyObject *encode_lines(PyObject *self, PyObject *args)
{
    Py_buffer data, sep, headers;
    Py_ssize_t pos, max_records, max_bytes;
    int final;
    PyObject *sep_obj;
    if (!PyArg_ParseTuple(args, "y*npOy*nn", &data, &pos, &final, &sep_obj, &headers,
                          &max_records, &max_bytes))
        return NULL;
    int keyed = sep_obj != Py_None;
    if (keyed && PyObject_GetBuffer(sep_obj, &sep, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&headers);
        return NULL;
    }
    buffer out = {NULL, 0, 0};
    const char *p = data.buf;
    Py_ssize_t end = data.len, count = 0;
    PyObject *result = NULL;
    while (pos < end && count < max_records && out.len < max_bytes) {
        const char *nl = memchr(p + pos, '\n', end - pos);
        Py_ssize_t line_end;
        Py_ssize_t next;
        if (nl == NULL) {
            if (!final)
                break;
            line_end = end;
            next = end;
        } else {
            line_end = nl - p;
            next = line_end + 1;
        }
        const char *line = p + pos;
        Py_ssize_t len = line_end - pos;
        const char *key = NULL;
        Py_ssize_t key_len = 0;
        if (keyed) {
            const char *cut = find(line, len, sep.buf, sep.len);
            if (cut == NULL) {
                PyObject *err = Py_BuildValue("(nn)", count, pos);
                if (err != NULL) {
                    PyErr_SetObject(PyExc_ValueError, err);
                    Py_DECREF(err);
                }
                goto done;
            }
            key = line;
            key_len = cut - line;
            line = cut + sep.len;
            len = line_end - (line - p);
        }
        if (put_record(&out, count, key, key_len, line, len, headers.buf, headers.len) < 0)
            goto done;
        count++;
        pos = next;
    }
    result = Py_BuildValue("y#nn", out.data ? out.data : "", out.len, count, pos);
done:
    PyMem_Free(out.data);
    PyBuffer_Release(&data);
    PyBuffer_Release(&headers);
    if (keyed)
        PyBuffer_Release(&sep);
    return result;
}

/* encode_pairs([(key, value), ...], headers) -> section: keys and values bytes or None. */
static PyObject *encode_pairs(PyObject *self, PyObject *args)
{
    PyObject *pairs;
    Py_buffer headers;
    if (!PyArg_ParseTuple(args, "Oy*", &pairs, &headers))
        return NULL;
    PyObject *seq = PySequence_Fast(pairs, "pairs must be a sequence");
    if (seq == NULL) {
        PyBuffer_Release(&headers);
        return NULL;
    }
    buffer out = {NULL, 0, 0};
    PyObject *result = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "each pair is a (key, value) tuple");
            goto done;
        }
        PyObject *k = PyTuple_GET_ITEM(pair, 0), *v = PyTuple_GET_ITEM(pair, 1);
        if ((k != Py_None && !PyBytes_Check(k)) || (v != Py_None && !PyBytes_Check(v))) {
            PyErr_SetString(PyExc_TypeError, "keys and values are bytes or None");
            goto done;
        }
        if (put_record(&out, i, k == Py_None ? NULL : PyBytes_AS_STRING(k),
                       k == Py_None ? 0 : PyBytes_GET_SIZE(k),
                       v == Py_None ? NULL : PyBytes_AS_STRING(v),
                       v == Py_None ? 0 : PyBytes_GET_SIZE(v), headers.buf, headers.len) < 0)
            goto done;
    }
    result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
done:
    PyMem_Free(out.data);
    Py_DECREF(seq);
    PyBuffer_Release(&headers);
    return result;
}

/* A zigzag varint inside [*pos, end); -1 when truncated or too long. */
static inline int get_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                             int64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    Py_ssize_t i = *pos;
    for (int n = 0; n < 10; n++) {
        if (i >= end)
            return -1;
        unsigned char b = p[i++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pos = i;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* Bytes of a length-prefixed field: *start is NULL for a null field. */
static inline int get_bytes(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                            const unsigned char **start, Py_ssize_t *len)
{
    int64_t n;
    if (get_varint(p, pos, end, &n) < 0 || n > end - *pos || n < -1)
        return -1;
    if (n < 0) {
        *start = NULL;
        *len = 0;
        return 0;
    }
    *start = p + *pos;
    *len = (Py_ssize_t)n;
    *pos += n;
    return 0;
}

typedef struct {
    int64_t offset_delta, timestamp_delta;
    const unsigned char *key, *value, *headers;
    Py_ssize_t key_len, value_len, headers_len, header_count;
} record;

/* The next record at *pos; the headers are left encoded (start, length, count). */
static int next_record(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, record *r)
{
    int64_t length, count;
    if (get_varint(p, pos, end, &length) < 0 || length < 0 || length > end - *pos)
        return -1;
    Py_ssize_t rec_end = *pos + length;
    *pos += 1; /* attributes */
    if (get_varint(p, pos, rec_end, &r->timestamp_delta) < 0 ||
        get_varint(p, pos, rec_end, &r->offset_delta) < 0 ||
        get_bytes(p, pos, rec_end, &r->key, &r->key_len) < 0 ||
        get_bytes(p, pos, rec_end, &r->value, &r->value_len) < 0 ||
        get_varint(p, pos, rec_end, &count) < 0 || count < 0)
        return -1;
    r->headers = p + *pos;
    r->header_count = (Py_ssize_t)count;
    for (int64_t i = 0; i < count; i++) {
        const unsigned char *s;
        Py_ssize_t n;
        if (get_bytes(p, pos, rec_end, &s, &n) < 0 || s == NULL ||
            get_bytes(p, pos, rec_end, &s, &n) < 0)
            return -1;
    }
    r->headers_len = (p + *pos) - r->headers;
    if (*pos != rec_end)
        return -1;
    return 0;
}

static PyObject *bytes_or_none(const unsigned char *s, Py_ssize_t n)
{
    if (s == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)s, n);
}

static PyObject *corrupt(void)
{
    PyErr_SetString(PyExc_ValueError, "corrupt record");
    return NULL;
}

/* decode(section, count, min_delta) -> [(offset_delta, timestamp_delta, key, value,
 * ((header_key, header_value), ...)), ...] for the records whose offset delta is at least
 * min_delta. */
static PyObject *decode(PyObject *self, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t count;
    long long min_delta;
    if (!PyArg_ParseTuple(args, "y*nL", &data, &count, &min_delta))
        return NULL;
    const unsigned char *p = data.buf;
    Py_ssize_t pos = 0, end = data.len;
    PyObject *list = PyList_New(0);
    if (list == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        record r;
        if (next_record(p, &pos, end, &r) < 0) {
            corrupt();
            goto fail;
        }
        if (r.offset_delta < min_delta)
            continue;
        PyObject *headers = PyTuple_New(r.header_count);
        if (headers == NULL)
            goto fail;
        Py_ssize_t hp = r.headers - p, hend = hp + r.headers_len;
        for (Py_ssize_t h = 0; h < r.header_count; h++) {
            const unsigned char *ks = NULL, *vs = NULL;
            Py_ssize_t kn = 0, vn = 0;
            get_bytes(p, &hp, hend, &ks, &kn);
            get_bytes(p, &hp, hend, &vs, &vn);
            PyObject *pair = Py_BuildValue("(NN)", bytes_or_none(ks, kn), bytes_or_none(vs, vn));
            if (pair == NULL) {
                Py_DECREF(headers);
                goto fail;
            }
            PyTuple_SET_ITEM(headers, h, pair);
        }
        PyObject *item = Py_BuildValue("(LLNNN)", (long long)r.offset_delta,
                                       (long long)r.timestamp_delta, bytes_or_none(r.key, r.key_len),
                                       bytes_or_none(r.value, r.value_len), headers);
        if (item == NULL || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    PyBuffer_Release(&data);
    return list;
fail:
    Py_XDECREF(list);
    PyBuffer_Release(&data);
    return NULL;
}

/* join_values(section, count, min_delta, key_sep, end) -> (text, printed): each record's
 * value (empty when null) followed by `end`, after its key and `key_sep` when key_sep is
 * not None. */
static PyObject *join_values(PyObject *self, PyObject *args)
{
    Py_buffer data, term;
    Py_ssize_t count;
    long long min_delta;
    PyObject *sep_obj;
    if (!PyArg_ParseTuple(args, "y*nLOy*", &data, &count, &min_delta, &sep_obj, &term))
        return NULL;
    Py_buffer sep = {0};
    int keyed = sep_obj != Py_None;
    if (keyed && PyObject_GetBuffer(sep_obj, &sep, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&term);
        return NULL;
    }
    const unsigned char *p = data.buf;
    Py_ssize_t pos = 0, printed = 0;
    buffer out = {NULL, 0, 0};
    PyObject *result = NULL;
    /* Every record takes at least a byte of the section: a count larger than that (a
     * hostile batch header) must not size the buffer. */
    Py_ssize_t most = count < data.len ? count : data.len;
    if (grow(&out, data.len + most * (term.len + (keyed ? sep.len : 0)) + 1) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        record r;
        if (next_record(p, &pos, data.len, &r) < 0) {
            corrupt();
            goto done;
        }
        if (r.offset_delta < min_delta)
            continue;
        /* The buffer holds the whole section plus separators: no record outgrows it. */
        if (keyed) {
            if (r.key)
                memcpy(out.data + out.len, r.key, r.key_len), out.len += r.key_len;
            memcpy(out.data + out.len, sep.buf, sep.len);
            out.len += sep.len;
        }
        if (r.value)
            memcpy(out.data + out.len, r.value, r.value_len), out.len += r.value_len;
        memcpy(out.data + out.len, term.buf, term.len);
        out.len += term.len;
        printed++;
    }
    result = Py_BuildValue("y#n", out.data ? out.data : "", out.len, printed);
done:
    PyMem_Free(out.data);
    PyBuffer_Release(&data);
    PyBuffer_Release(&term);
    if (keyed)
        PyBuffer_Release(&sep);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_lines", encode_lines, METH_VARARGS,
     "encode_lines(data, pos, final, key_sep, headers, max_records, max_bytes) -> "
     "(section, count, new_pos)"},
    {"encode_pairs", encode_pairs, METH_VARARGS, "encode_pairs(pairs, headers) -> section"},
    {"decode", decode, METH_VARARGS, "decode(section, count, min_delta) -> [record, ...]"},
    {"join_values", join_values, METH_VARARGS,
     "join_values(section, count, min_delta, key_sep, end) -> (text, printed)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordcodec", "The record codec of protocol/record_codec.py, in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__recordcodec(void) { return PyModule_Create(&module); }
