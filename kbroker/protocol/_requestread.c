/* What a request brings, read in C: its header, a Produce or Fetch body, and the batch
 * headers of produced records.
 *
 * Every request's header is parsed, Produce and Fetch are most of what a broker is sent,
 * and every append walks its batch headers; in Python these cost some 15 us of a
 * one-record produce (readers that make a method call a field) and 5-7 us of a consumer's
 * fetch. The functions here read the same bytes by the same rules, raise the same errors
 * with the same messages, and return the same dataclasses: header.py,
 * produce_request.py, batch.py and fetch_request_decode.py hold the reference
 * implementations (the *_py functions) and their documentation; the tests run both and
 * check they agree on cut, flipped and random bytes. Each module hands over its classes
 * once at import (the bind_* functions).
 *
 * The dataclasses are made without running their Python __init__: the object is
 * allocated by the class and each slot set through its descriptor, as object.__setattr__
 * does (so a frozen class is filled the way its own __init__ fills it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

static PyObject *header_cls, *partition_cls, *topic_cls, *request_cls, *malformed, *uuid_cls;
static PyObject *batch_header_cls, *corrupt_batch, *unsupported_magic, *batch_too_large,
    *invalid_records, *crc32c;
static PyObject *batch_fields[14];
static PyObject *fetch_partition_cls, *fetch_topic_cls, *forgotten_cls, *replica_state_cls,
    *fetch_request_cls, *no_replica_state, *wait_of, *uuid_of, *no_high_watermark;
static PyObject *fetch_partition_fields[8], *fetch_topic_fields[3], *forgotten_fields[3],
    *replica_state_fields[2], *fetch_request_fields[12];
static PyObject *empty_tuple, *bytes_kw;
static PyObject *header_fields[4], *partition_fields[2], *topic_fields[3], *request_fields[4];

/* The big-endian unsigned integer of n bytes at p (callers cast to the signed width). */
static int64_t be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* Before its bind_ call, a function has nothing to return. */
static int unbound(PyObject *cls)
{
    if (cls != NULL)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "_requestread: the classes are not bound yet");
    return 1;
}

/* Raise `cls` with a message formatted as printf does. */
static void raise_formatted(PyObject *cls, const char *format, va_list va)
{
    PyObject *message = PyUnicode_FromFormatV(format, va);
    if (message != NULL) {
        PyErr_SetObject(cls, message);
        Py_DECREF(message);
    }
}

/* MalformedRequest(message): -1. */
static int refuse(const char *format, ...)
{
    va_list va;
    va_start(va, format);
    raise_formatted(malformed, format, va);
    va_end(va);
    return -1;
}

/* An instance of `cls` with slots `names` set to `values` (references stolen, even on
 * failure). A NULL among the values is a constructor that failed with its error set:
 * NULL, and the other values released. */
static PyObject *make(PyObject *cls, int n, PyObject **names, PyObject **values)
{
    PyObject *obj = NULL;
    int complete = 1;
    for (int i = 0; i < n; i++)
        complete = complete && values[i] != NULL;
    if (complete) {
        PyTypeObject *type = (PyTypeObject *)cls;
        obj = type->tp_new(type, empty_tuple, NULL);
    }
    for (int i = 0; i < n; i++) {
        if (obj != NULL && PyObject_GenericSetAttr(obj, names[i], values[i]) < 0)
            Py_CLEAR(obj);
        Py_XDECREF(values[i]);
    }
    return obj;
}

/* The arguments every body decoder takes: (version, frame, offset, max_elements), the
 * frame's buffer taken (to be released by the caller); -1 with an error set. */
static int body_args(PyObject *const *args, Py_ssize_t nargs, PyObject *cls, const char *usage,
                     long *version, Py_buffer *view, Py_ssize_t *offset,
                     long long *max_elements)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    if (unbound(cls))
        return -1;
    *version = PyLong_AsLong(args[0]);
    *offset = PyLong_AsSsize_t(args[2]);
    *max_elements = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred() || PyObject_GetBuffer(args[1], view, PyBUF_SIMPLE) < 0)
        return -1;
    if (*offset < 0 || *offset > view->len) {
        PyBuffer_Release(view);
        return refuse("request body offset %zd outside a frame of %zd bytes", *offset,
                      view->len);
    }
    return 0;
}

typedef struct {
    const unsigned char *p;
    Py_ssize_t pos, end;
    int flexible;
} reader;

/* Take n bytes; their start, or -1 with MalformedRequest set. */
static Py_ssize_t need(reader *r, int64_t n)
{
    Py_ssize_t pos = r->pos;
    if (n < 0 || n > r->end - pos)
        return refuse("produce request needs %lld bytes at %zd, has %zd", (long long)n, pos,
                      r->end - pos);
    r->pos = pos + (Py_ssize_t)n;
    return pos;
}

/* An unsigned varint of at most 5 bytes (varint.read_uvarint's rule). */
static int uvarint_at(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t i = *pos;
    if (i < end && p[i] < 0x80) {
        *out = p[i];
        *pos = i + 1;
        return 0;
    }
    uint64_t v = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (i >= end)
            return refuse("truncated varint");
        unsigned char b = p[i++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)v;
            *pos = i;
            return 0;
        }
    }
    return refuse("varint longer than 5 bytes");
}

static int uvarint(reader *r, int64_t *out) { return uvarint_at(r->p, &r->pos, r->end, out); }

static int int32(reader *r, int64_t *out)
{
    Py_ssize_t at = need(r, 4);
    if (at < 0)
        return -1;
    *out = (int32_t)be(r->p + at, 4);
    return 0;
}

static int int16(reader *r, int64_t *out)
{
    Py_ssize_t at = need(r, 2);
    if (at < 0)
        return -1;
    *out = (int16_t)be(r->p + at, 2);
    return 0;
}

/* A compact (flexible) or int16 length; -1 for null. */
static int length(reader *r, int64_t *out)
{
    if (!r->flexible)
        return int16(r, out);
    if (uvarint(r, out) < 0)
        return -1;
    *out -= 1;
    return 0;
}

/* A nullable string: a new reference, Py_None for null, NULL with an error set. */
static PyObject *string(reader *r)
{
    int64_t size = 0;
    if (length(r, &size) < 0)
        return NULL;
    if (size < 0)
        Py_RETURN_NONE;
    Py_ssize_t at = need(r, size);
    if (at < 0)
        return NULL;
    return PyUnicode_DecodeUTF8((const char *)r->p + at, (Py_ssize_t)size, NULL);
}

static int array_count(reader *r, int64_t min_element_size, const char *name, int64_t *out)
{
    int64_t count = 0;
    if (r->flexible) {
        if (uvarint(r, &count) < 0)
            return -1;
        count -= 1;
    }
    else if (int32(r, &count) < 0)
        return -1;
    if (count < 0)
        return refuse("non-nullable field %s was serialized as null", name);
    if (count > 0 && count * min_element_size > r->end - r->pos)
        return refuse("array of %lld elements in %zd bytes", (long long)count, r->end - r->pos);
    *out = count;
    return 0;
}

static int tagged_fields(reader *r)
{
    if (!r->flexible)
        return 0;
    if (r->pos < r->end && r->p[r->pos] == 0) {
        r->pos += 1;
        return 0;
    }
    int64_t count = 0, tag = 0, size = 0;
    if (uvarint(r, &count) < 0)
        return -1;
    for (int64_t i = 0; i < count; i++)
        if (uvarint(r, &tag) < 0 || uvarint(r, &size) < 0 || need(r, size) < 0)
            return -1;
    return 0;
}

/* parse_header(frame, flexible) -> (RequestHeader, body offset); header.py's
 * parse_request_header. */
static PyObject *parse_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "parse_header(frame, flexible)");
        return NULL;
    }
    if (unbound(header_cls))
        return NULL;
    int flexible = PyObject_IsTrue(args[1]);
    if (flexible < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, pos = 10;
    PyObject *client_id = NULL, *result = NULL;
    if (end < 10) {
        refuse("request of %zd bytes is shorter than a header", end);
        goto done;
    }
    int client_len = (int16_t)be(p + 8, 2);
    if (client_len >= 0) {
        if (client_len > end - pos) {
            refuse("client id runs past the end of the request");
            goto done;
        }
        client_id = PyUnicode_DecodeUTF8((const char *)p + pos, client_len, "replace");
        if (client_id == NULL)
            goto done;
        pos += client_len;
    }
    else if (client_len != -1) {
        refuse("client id length %d", client_len);
        goto done;
    }
    else
        client_id = Py_NewRef(Py_None);
    if (flexible) {
        if (pos < end && p[pos] == 0)
            pos += 1;
        else {
            int64_t count = 0, tag = 0, size = 0;
            if (uvarint_at(p, &pos, end, &count) < 0)
                goto done;
            for (int64_t i = 0; i < count; i++) {
                if (uvarint_at(p, &pos, end, &tag) < 0 || uvarint_at(p, &pos, end, &size) < 0)
                    goto done;
                if (size > end - pos) {
                    refuse("tagged field runs past the end of the request");
                    goto done;
                }
                pos += (Py_ssize_t)size;
            }
        }
    }
    PyObject *values[] = {
        PyLong_FromLong((int16_t)be(p, 2)),
        PyLong_FromLong((int16_t)be(p + 2, 2)),
        PyLong_FromLong((int32_t)be(p + 4, 4)),
        client_id,
    };
    client_id = NULL;
    PyObject *header = make(header_cls, 4, header_fields, values);
    if (header != NULL) {
        result = Py_BuildValue("(Nn)", header, pos);
    }
done:
    Py_XDECREF(client_id);
    PyBuffer_Release(&view);
    return result;
}

static const unsigned char no_topic_id[16];

/* One topic's partitions: a new list, or NULL with an error set. */
static PyObject *partitions(reader *r, PyObject *frame, PyObject **records_view, int64_t *budget,
                            int64_t max_elements)
{
    int64_t count = 0;
    if (array_count(r, 5, "TopicProduceData.partition_data", &count) < 0)
        return NULL;
    *budget -= count;
    if (*budget < 0) {
        refuse("more than %lld array elements in one request", (long long)max_elements);
        return NULL;
    }
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    for (int64_t i = 0; i < count; i++) {
        int64_t index = 0, size = 0;
        if (int32(r, &index) < 0)
            goto fail;
        if (r->flexible) {
            if (uvarint(r, &size) < 0)
                goto fail;
            size -= 1;
        }
        else if (int32(r, &size) < 0)
            goto fail;
        PyObject *records;
        if (size < 0)
            records = Py_NewRef(Py_None);
        else {
            Py_ssize_t at = need(r, size);
            if (at < 0)
                goto fail;
            if (*records_view == NULL) {
                *records_view = PyMemoryView_FromObject(frame);
                if (*records_view == NULL)
                    goto fail;
            }
            records = PySequence_GetSlice(*records_view, at, at + (Py_ssize_t)size);
            if (records == NULL)
                goto fail;
        }
        PyObject *values[] = {PyLong_FromLongLong(index), records};
        PyObject *partition = make(partition_cls, 2, partition_fields, values);
        if (partition == NULL)
            goto fail;
        int appended = PyList_Append(list, partition);
        Py_DECREF(partition);
        if (appended < 0 || tagged_fields(r) < 0)
            goto fail;
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

/* decode_produce(version, frame, offset, max_elements) -> ProduceRequest;
 * produce_request.py's decode_produce_request_py. */
static PyObject *decode_produce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long version;
    Py_buffer view;
    Py_ssize_t offset;
    long long max_elements;
    if (body_args(args, nargs, request_cls, "decode_produce(version, frame, offset, max_elements)",
                  &version, &view, &offset, &max_elements) < 0)
        return NULL;
    reader r = {view.buf, offset, view.len, version >= 9};
    PyObject *transactional_id = NULL, *topics = NULL, *records_view = NULL, *result = NULL;
    int64_t budget = max_elements, acks = 0, timeout_ms = 0, topic_count = 0;
    if (version >= 3) {
        transactional_id = string(&r);
        if (transactional_id == NULL)
            goto done;
    }
    else
        transactional_id = Py_NewRef(Py_None);
    Py_ssize_t at = need(&r, 6);
    if (at < 0)
        goto done;
    acks = (int16_t)be(r.p + at, 2);
    timeout_ms = (int32_t)be(r.p + at + 2, 4);
    if (array_count(&r, 2, "ProduceRequest.topic_data", &topic_count) < 0)
        goto done;
    budget -= topic_count;
    topics = PyList_New(0);
    if (topics == NULL)
        goto done;
    for (int64_t t = 0; t < topic_count; t++) {
        PyObject *name, *topic_id;
        if (version >= 13) {
            Py_ssize_t at = need(&r, 16);
            if (at < 0)
                goto done;
            name = Py_NewRef(Py_None);
            if (memcmp(r.p + at, no_topic_id, 16) == 0)
                topic_id = Py_NewRef(Py_None);
            else {
                PyObject *raw = PyBytes_FromStringAndSize((const char *)r.p + at, 16);
                PyObject *kwargs = raw ? PyDict_New() : NULL;
                if (kwargs != NULL && PyDict_SetItem(kwargs, bytes_kw, raw) < 0)
                    Py_CLEAR(kwargs);
                topic_id = kwargs ? PyObject_Call(uuid_cls, empty_tuple, kwargs) : NULL;
                Py_XDECREF(raw);
                Py_XDECREF(kwargs);
                if (topic_id == NULL) {
                    Py_DECREF(name);
                    goto done;
                }
            }
        }
        else {
            name = string(&r);
            if (name == NULL)
                goto done;
            if (name == Py_None) {
                Py_DECREF(name);
                refuse("non-nullable field TopicProduceData.name was serialized as null");
                goto done;
            }
            topic_id = Py_NewRef(Py_None);
        }
        PyObject *list = partitions(&r, args[1], &records_view, &budget, max_elements);
        if (list == NULL) {
            Py_DECREF(name);
            Py_DECREF(topic_id);
            goto done;
        }
        PyObject *values[] = {name, topic_id, list};
        PyObject *topic = make(topic_cls, 3, topic_fields, values);
        if (topic == NULL)
            goto done;
        int appended = PyList_Append(topics, topic);
        Py_DECREF(topic);
        if (appended < 0 || tagged_fields(&r) < 0)
            goto done;
    }
    if (tagged_fields(&r) < 0)
        goto done;
    PyObject *values[] = {transactional_id, PyLong_FromLongLong(acks),
                          PyLong_FromLongLong(timeout_ms), topics};
    transactional_id = topics = NULL;
    result = make(request_cls, 4, request_fields, values);
done:
    Py_XDECREF(transactional_id);
    Py_XDECREF(topics);
    Py_XDECREF(records_view);
    PyBuffer_Release(&view);
    return result;
}

/* An error of class `cls` (message formatted as printf does): NULL. */
static PyObject *batch_error(PyObject *cls, const char *format, ...)
{
    va_list va;
    va_start(va, format);
    raise_formatted(cls, format, va);
    va_end(va);
    return NULL;
}

/* batch.py's _looks_like_old_message: magic 0 or 1 where v2 has it, and a size that fits. */
static int old_message(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end)
{
    static const int32_t min_size[2] = {14, 22};
    if (end - pos <= 16)
        return 0;
    unsigned char magic = p[pos + 16];
    if (magic > 1)
        return 0;
    int32_t size = (int32_t)be(p + pos + 8, 4);
    return min_size[magic] <= size && size <= end - pos - 12;
}

/* batch_headers(buf, max_batch_bytes, check_record_count) -> [BatchHeader];
 * batch.py's validate_batches_py, same checks in the same order, same errors. */
static PyObject *batch_headers(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "batch_headers(buf, max_batch_bytes, check_record_count)");
        return NULL;
    }
    if (unbound(batch_header_cls))
        return NULL;
    long long max_batch_bytes = PyLong_AsLongLong(args[1]);
    if (max_batch_bytes == -1 && PyErr_Occurred())
        return NULL;
    int check_count = PyObject_IsTrue(args[2]);
    if (check_count < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    PyObject *headers = NULL;
    if (end == 0) {
        batch_error(corrupt_batch, "empty records");
        goto done;
    }
    headers = PyList_New(0);
    if (headers == NULL)
        goto done;
    while (pos < end) {
        const unsigned char *h = p + pos;
        if (old_message(p, pos, end)) {
            batch_error(unsupported_magic, "magic %d (message format v%d) at byte %zd", h[16],
                        h[16], pos);
            goto fail;
        }
        if (end - pos < 61) {
            batch_error(corrupt_batch, "partial batch header at byte %zd", pos);
            goto fail;
        }
        int magic = (int8_t)h[16];
        int64_t batch_length = (int32_t)be(h + 8, 4);
        if (magic != 2) {
            batch_error(corrupt_batch, "unsupported magic %d at byte %zd", magic, pos);
            goto fail;
        }
        if (batch_length < 49) {
            batch_error(corrupt_batch, "batch length %lld below minimum at byte %zd",
                        (long long)batch_length, pos);
            goto fail;
        }
        int64_t size = batch_length + 12;
        if (size > end - pos) {
            batch_error(corrupt_batch, "partial batch at byte %zd: %lld bytes, %zd left", pos,
                        (long long)size, end - pos);
            goto fail;
        }
        if (size > max_batch_bytes) {
            batch_error(batch_too_large, "batch of %lld bytes exceeds limit %lld",
                        (long long)size, max_batch_bytes);
            goto fail;
        }
        PyObject *covered =
            PyMemoryView_FromMemory((char *)h + 21, (Py_ssize_t)size - 21, PyBUF_READ);
        PyObject *crc = covered ? PyObject_CallOneArg(crc32c, covered) : NULL;
        Py_XDECREF(covered);
        if (crc == NULL)
            goto fail;
        unsigned long long computed = PyLong_AsUnsignedLongLong(crc);
        Py_DECREF(crc);
        if (computed == (unsigned long long)-1 && PyErr_Occurred())
            goto fail;
        if (computed != (uint32_t)be(h + 17, 4)) {
            batch_error(corrupt_batch, "CRC mismatch in batch at byte %zd", pos);
            goto fail;
        }
        int64_t last_offset_delta = (int32_t)be(h + 23, 4);
        int64_t count = (int32_t)be(h + 57, 4);
        if (check_count) {
            if (count <= 0 || last_offset_delta + 1 != count) {
                batch_error(invalid_records, "record count %lld does not match lastOffsetDelta %lld",
                            (long long)count, (long long)last_offset_delta);
                goto fail;
            }
        }
        else if (last_offset_delta < 0) {
            batch_error(corrupt_batch, "negative lastOffsetDelta at byte %zd", pos);
            goto fail;
        }
        PyObject *values[14] = {
            PyLong_FromLongLong(be(h, 8)),
            PyLong_FromLongLong(batch_length),
            PyLong_FromLongLong((int32_t)be(h + 12, 4)),
            PyLong_FromLong(magic),
            PyLong_FromUnsignedLong((uint32_t)be(h + 17, 4)),
            PyLong_FromLong((int16_t)be(h + 21, 2)),
            PyLong_FromLongLong(last_offset_delta),
            PyLong_FromLongLong(be(h + 27, 8)),
            PyLong_FromLongLong(be(h + 35, 8)),
            PyLong_FromLongLong(be(h + 43, 8)),
            PyLong_FromLong((int16_t)be(h + 51, 2)),
            PyLong_FromLongLong((int32_t)be(h + 53, 4)),
            PyLong_FromLongLong(count),
            PyLong_FromSsize_t(pos),
        };
        PyObject *header = make(batch_header_cls, 14, batch_fields, values);
        if (header == NULL)
            goto fail;
        int appended = PyList_Append(headers, header);
        Py_DECREF(header);
        if (appended < 0)
            goto fail;
        pos += (Py_ssize_t)size;
    }
    goto done;
fail:
    Py_CLEAR(headers);
done:
    PyBuffer_Release(&view);
    return headers;
}

/* -- Fetch (fetch_request_decode.py's decode_fetch_request_py) -------------------------- */

/* Where the Python walk meets the end of the bytes inside a fixed-size field (an
 * IndexError or struct.error there): MalformedRequest, -1. */
static int ends_inside(Py_ssize_t pos, Py_ssize_t end)
{
    return refuse("fetch request ends inside a field (%zd bytes left at byte %zd)", end - pos,
                  pos);
}

/* The start of `n` fixed bytes at r->pos, advanced past them; -1 where they run out. */
static Py_ssize_t fixed(reader *r, Py_ssize_t n)
{
    Py_ssize_t pos = r->pos;
    if (n > r->end - pos)
        return ends_inside(pos, r->end);
    r->pos = pos + n;
    return pos;
}

/* _count: an array's count, -1 for null. */
static int fetch_count(reader *r, int64_t *out)
{
    if (r->flexible) {
        if (r->pos >= r->end)
            return ends_inside(r->pos, r->end);
        if (uvarint(r, out) < 0)
            return -1;
        *out -= 1;
        return 0;
    }
    Py_ssize_t at = fixed(r, 4);
    if (at < 0)
        return -1;
    *out = (int32_t)be(r->p + at, 4);
    return 0;
}

/* _within: not null, no more elements of `least` bytes than remain, within the budget. */
static int within(reader *r, int64_t count, int64_t least, int64_t *budget,
                  long long max_elements, const char *name)
{
    if (count < 0)
        return refuse("non-nullable field %s was serialized as null", name);
    if (count * least > r->end - r->pos)
        return refuse("array of %lld elements in the %zd bytes left of the request",
                      (long long)count, r->end - r->pos);
    *budget -= count;
    if (*budget < 0)
        return refuse("more than %lld array elements in one request", max_elements);
    return 0;
}

/* _string: a new reference (Py_None for null) or NULL; reads up to r->end. */
static PyObject *fetch_string(reader *r, const char *name)
{
    int64_t size = 0;
    if (r->flexible) {
        if (uvarint(r, &size) < 0)
            return NULL;
        size -= 1;
    }
    else {
        Py_ssize_t at = fixed(r, 2);
        if (at < 0)
            return NULL;
        size = (int16_t)be(r->p + at, 2);
    }
    if (size < 0)
        Py_RETURN_NONE;
    if (size > r->end - r->pos) {
        refuse("%s of %lld bytes in %zd", name, (long long)size, r->end - r->pos);
        return NULL;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)r->p + r->pos, (Py_ssize_t)size, NULL);
    if (text == NULL) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *message = value ? PyUnicode_FromFormat(
                                        "fetch request ends inside a field (%S)", value)
                                  : NULL;
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        if (message != NULL) {
            PyErr_SetObject(malformed, message);
            Py_DECREF(message);
        }
        return NULL;
    }
    r->pos += (Py_ssize_t)size;
    return text;
}

/* A 16-byte id as _uuid makes it (None for the zero id). */
static PyObject *fetch_uuid(const unsigned char *at)
{
    PyObject *high = PyLong_FromUnsignedLongLong((uint64_t)be(at, 8));
    PyObject *low = high ? PyLong_FromUnsignedLongLong((uint64_t)be(at + 8, 8)) : NULL;
    PyObject *id = low ? PyObject_CallFunctionObjArgs(uuid_of, high, low, NULL) : NULL;
    Py_XDECREF(high);
    Py_XDECREF(low);
    return id;
}

/* _topic: the name ("" from v13) and the id (None before v13) of a topic; -1 on error. */
static int fetch_topic_name(reader *r, int by_id, const char *field, PyObject **name,
                            PyObject **id)
{
    if (by_id) {
        if (16 > r->end - r->pos)
            return refuse("fetch request ends inside a topic id");
        *id = fetch_uuid(r->p + r->pos);
        if (*id == NULL)
            return -1;
        r->pos += 16;
        *name = PyUnicode_FromStringAndSize("", 0);
        if (*name == NULL) {
            Py_CLEAR(*id);
            return -1;
        }
        return 0;
    }
    *name = fetch_string(r, field);
    if (*name == NULL)
        return -1;
    if (*name == Py_None) {
        Py_CLEAR(*name);
        return refuse("non-nullable field %s was serialized as null", field);
    }
    *id = Py_NewRef(Py_None);
    return 0;
}

/* One tagged field's tag, start and size (the section's count read by the caller), each
 * size checked against the bytes left, as _tags does. */
static int fetch_tag(reader *r, int64_t *tag, Py_ssize_t *start, int64_t *size)
{
    if (uvarint(r, tag) < 0 || uvarint(r, size) < 0)
        return -1;
    if (*size > r->end - r->pos)
        return refuse("tagged fields run past the end of the request");
    *start = r->pos;
    r->pos += (Py_ssize_t)*size;
    return 0;
}

/* _tags' count: read, and checked against the bytes left. */
static int fetch_tag_count(reader *r, int64_t *count)
{
    if (uvarint(r, count) < 0)
        return -1;
    if (*count * 2 > r->end - r->pos)
        return refuse("%lld tagged fields in %zd bytes", (long long)*count, r->end - r->pos);
    return 0;
}

/* _skip_tags: past a tagged-field section none of whose tags is known. */
static int fetch_skip_tags(reader *r)
{
    if (r->pos >= r->end)
        return ends_inside(r->pos, r->end);
    if (r->p[r->pos] == 0) {
        r->pos += 1;
        return 0;
    }
    int64_t count = 0, tag = 0, size = 0;
    Py_ssize_t start = 0;
    if (fetch_tag_count(r, &count) < 0)
        return -1;
    for (int64_t i = 0; i < count; i++)
        if (fetch_tag(r, &tag, &start, &size) < 0)
            return -1;
    return 0;
}

static PyObject *unfilled(int64_t tag, int64_t size)
{
    refuse("tagged field %lld does not fill its %lld bytes", (long long)tag, (long long)size);
    return NULL;
}

/* A FetchPartition from its eight values (references stolen). */
static PyObject *fetch_partition(int64_t partition, int64_t fetch_offset, int64_t most,
                                 int64_t leader_epoch, int64_t fetched_epoch, int64_t log_start,
                                 PyObject *directory_id, PyObject *high_watermark)
{
    PyObject *values[8] = {
        PyLong_FromLongLong(partition),    PyLong_FromLongLong(fetch_offset),
        PyLong_FromLongLong(most),         PyLong_FromLongLong(leader_epoch),
        PyLong_FromLongLong(fetched_epoch), PyLong_FromLongLong(log_start),
        directory_id,                      high_watermark,
    };
    return make(fetch_partition_cls, 8, fetch_partition_fields, values);
}

/* One topic's partitions, as a tuple. */
static PyObject *fetch_partitions(reader *r, long version, int64_t count)
{
    PyObject *out = PyTuple_New((Py_ssize_t)count);
    if (out == NULL)
        return NULL;
    for (int64_t i = 0; i < count; i++) {
        PyObject *partition = NULL;
        if (r->flexible) {
            Py_ssize_t at = fixed(r, 33);
            if (at < 0)
                goto fail;
            const unsigned char *q = r->p + at;
            PyObject *directory_id = Py_NewRef(Py_None);
            PyObject *high_watermark = Py_NewRef(no_high_watermark);
            if (q[32]) {
                r->pos -= 1;
                int64_t count = 0, tag = 0, size = 0;
                Py_ssize_t start = 0, section = r->pos;
                /* As _tags: every size is checked before any field is read. */
                int failed = fetch_skip_tags(r) < 0;
                if (!failed) {
                    r->pos = section;
                    failed = fetch_tag_count(r, &count) < 0;
                }
                for (int64_t t = 0; !failed && t < count; t++) {
                    failed = fetch_tag(r, &tag, &start, &size) < 0;
                    if (failed)
                        break;
                    if (tag == 0 && version >= 17) {
                        if (size != 16) {
                            failed = 1;
                            unfilled(tag, size);
                            break;
                        }
                        PyObject *id = fetch_uuid(r->p + start);
                        failed = id == NULL;
                        if (!failed)
                            Py_SETREF(directory_id, id);
                    }
                    else if (tag == 1 && version >= 18) {
                        if (size != 8) {
                            failed = 1;
                            unfilled(tag, size);
                            break;
                        }
                        PyObject *hw = PyLong_FromLongLong(be(r->p + start, 8));
                        failed = hw == NULL;
                        if (!failed)
                            Py_SETREF(high_watermark, hw);
                    }
                }
                if (failed) {
                    Py_DECREF(directory_id);
                    Py_DECREF(high_watermark);
                    goto fail;
                }
            }
            partition = fetch_partition(
                (int32_t)be(q, 4), be(q + 8, 8), (int32_t)be(q + 28, 4), (int32_t)be(q + 4, 4),
                (int32_t)be(q + 16, 4), be(q + 20, 8), directory_id, high_watermark);
        }
        else {
            /* Fixed-size partitions: `within` checked that all of them are there. */
            const unsigned char *q = r->p + r->pos;
            if (version >= 9) {
                partition = fetch_partition(
                    (int32_t)be(q, 4), be(q + 8, 8), (int32_t)be(q + 24, 4),
                    (int32_t)be(q + 4, 4), -1, be(q + 16, 8), Py_NewRef(Py_None),
                    Py_NewRef(no_high_watermark));
                r->pos += 28;
            }
            else if (version >= 5) {
                partition = fetch_partition((int32_t)be(q, 4), be(q + 4, 8),
                                            (int32_t)be(q + 20, 4), -1, -1, be(q + 12, 8),
                                            Py_NewRef(Py_None), Py_NewRef(no_high_watermark));
                r->pos += 24;
            }
            else {
                partition = fetch_partition((int32_t)be(q, 4), be(q + 4, 8),
                                            (int32_t)be(q + 12, 4), -1, -1, -1,
                                            Py_NewRef(Py_None), Py_NewRef(no_high_watermark));
                r->pos += 16;
            }
        }
        if (partition == NULL)
            goto fail;
        PyTuple_SET_ITEM(out, (Py_ssize_t)i, partition);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* decode_fetch(version, frame, offset, max_elements) -> FetchRequest; the Python walk's
 * checks in its order, with its messages (a field cut short says where, not Python's
 * exception text). */
static PyObject *decode_fetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long version;
    Py_buffer view;
    Py_ssize_t offset;
    long long max_elements;
    if (body_args(args, nargs, fetch_request_cls,
                  "decode_fetch(version, frame, offset, max_elements)", &version, &view, &offset,
                  &max_elements) < 0)
        return NULL;
    if (version < 4 || version > 18) {
        PyBuffer_Release(&view);
        refuse("Fetch v%ld is not read here", version);
        return NULL;
    }
    reader r = {view.buf, offset, view.len, version >= 12};
    PyObject *topics = NULL, *forgotten = NULL, *rack_id = NULL, *cluster_id = NULL;
    PyObject *replica_state = NULL, *result = NULL;
    int64_t budget = max_elements, count = 0;
    int by_id = version >= 13;
    int64_t topic_size = r.flexible ? (by_id ? 18 : 3) : 6;
    int64_t partition_size = r.flexible ? 33 : version >= 9 ? 28 : version >= 5 ? 24 : 16;
    /* the head: (replica_id,) max_wait, min_bytes, max_bytes, isolation (, session) */
    int64_t replica_id = -1, session_id = 0, session_epoch = -1;
    Py_ssize_t at = fixed(&r, version >= 15 ? 21 : version >= 7 ? 25 : 17);
    if (at < 0)
        goto done;
    const unsigned char *h = r.p + at;
    if (version < 15) {
        replica_id = (int32_t)be(h, 4);
        h += 4;
    }
    int64_t max_wait = (int32_t)be(h, 4), min_bytes = (int32_t)be(h + 4, 4);
    int64_t max_bytes = (int32_t)be(h + 8, 4), isolation = (int8_t)h[12];
    if (version >= 7) {
        session_id = (int32_t)be(h + 13, 4);
        session_epoch = (int32_t)be(h + 17, 4);
    }

    if (fetch_count(&r, &count) < 0 ||
        within(&r, count, topic_size, &budget, max_elements, "FetchRequest.topics") < 0)
        goto done;
    topics = PyTuple_New((Py_ssize_t)count);
    if (topics == NULL)
        goto done;
    for (int64_t t = 0; t < PyTuple_GET_SIZE(topics); t++) {
        PyObject *name = NULL, *id = NULL, *partitions = NULL;
        if (fetch_topic_name(&r, by_id, "FetchTopic.topic", &name, &id) < 0)
            goto done;
        int64_t n = 0;
        if (fetch_count(&r, &n) < 0 ||
            within(&r, n, partition_size, &budget, max_elements, "FetchTopic.partitions") < 0 ||
            (partitions = fetch_partitions(&r, version, n)) == NULL) {
            Py_DECREF(name);
            Py_DECREF(id);
            goto done;
        }
        PyObject *values[3] = {name, id, partitions};
        PyObject *topic = make(fetch_topic_cls, 3, fetch_topic_fields, values);
        if (topic == NULL)
            goto done;
        PyTuple_SET_ITEM(topics, (Py_ssize_t)t, topic);
        if (r.flexible && fetch_skip_tags(&r) < 0)
            goto done;
    }

    if (version >= 7) {
        if (fetch_count(&r, &count) < 0 ||
            within(&r, count, topic_size, &budget, max_elements,
                   "FetchRequest.forgotten_topics_data") < 0)
            goto done;
    }
    else
        count = 0;
    forgotten = PyTuple_New((Py_ssize_t)count);
    if (forgotten == NULL)
        goto done;
    for (int64_t t = 0; t < count; t++) {
        PyObject *name = NULL, *id = NULL, *indexes = NULL;
        if (fetch_topic_name(&r, by_id, "ForgottenTopic.topic", &name, &id) < 0)
            goto done;
        int64_t n = 0;
        if (fetch_count(&r, &n) < 0 ||
            within(&r, n, 4, &budget, max_elements, "ForgottenTopic.partitions") < 0 ||
            (indexes = PyTuple_New((Py_ssize_t)n)) == NULL) {
            Py_DECREF(name);
            Py_DECREF(id);
            goto done;
        }
        for (int64_t i = 0; i < n; i++) {
            PyObject *index = PyLong_FromLong((int32_t)be(r.p + r.pos + 4 * i, 4));
            if (index == NULL) {
                Py_DECREF(name);
                Py_DECREF(id);
                Py_DECREF(indexes);
                goto done;
            }
            PyTuple_SET_ITEM(indexes, (Py_ssize_t)i, index);
        }
        r.pos += (Py_ssize_t)(4 * n);
        PyObject *values[3] = {name, id, indexes};
        PyObject *topic = make(forgotten_cls, 3, forgotten_fields, values);
        if (topic == NULL)
            goto done;
        PyTuple_SET_ITEM(forgotten, (Py_ssize_t)t, topic);
        if (r.flexible && fetch_skip_tags(&r) < 0)
            goto done;
    }

    if (version >= 11) {
        rack_id = fetch_string(&r, "FetchRequest.rack_id");
        if (rack_id == NULL)
            goto done;
        if (rack_id == Py_None) {
            refuse("non-nullable field FetchRequest.rack_id was serialized as null");
            goto done;
        }
    }
    else {
        rack_id = PyUnicode_FromStringAndSize("", 0);
        if (rack_id == NULL)
            goto done;
    }

    cluster_id = Py_NewRef(Py_None);
    replica_state = Py_NewRef(no_replica_state);
    if (r.flexible) {
        if (r.pos >= r.end) {
            ends_inside(r.pos, r.end);
            goto done;
        }
        if (r.p[r.pos] != 0) {
            int64_t tags = 0, tag = 0, size = 0;
            Py_ssize_t start = 0, section = r.pos;
            /* As _tags: every size is checked before any field is read. */
            if (fetch_skip_tags(&r) < 0)
                goto done;
            r.pos = section;
            if (fetch_tag_count(&r, &tags) < 0)
                goto done;
            for (int64_t i = 0; i < tags; i++) {
                if (fetch_tag(&r, &tag, &start, &size) < 0)
                    goto done;
                reader inner = {r.p, start, r.end, 1};
                Py_ssize_t stop = start + (Py_ssize_t)size;
                if (tag == 0) {
                    PyObject *text = fetch_string(&inner, "FetchRequest.cluster_id");
                    if (text == NULL)
                        goto done;
                    Py_SETREF(cluster_id, text);
                    stop = inner.pos;
                }
                else if (tag == 1 && version >= 15) {
                    if (12 > r.end - start) {
                        refuse("fetch request ends inside its replica state");
                        goto done;
                    }
                    PyObject *values[2] = {PyLong_FromLong((int32_t)be(r.p + start, 4)),
                                           PyLong_FromLongLong(be(r.p + start + 4, 8))};
                    PyObject *state = make(replica_state_cls, 2, replica_state_fields, values);
                    if (state == NULL)
                        goto done;
                    Py_SETREF(replica_state, state);
                    inner.pos = start + 12;
                    if (fetch_skip_tags(&inner) < 0)
                        goto done;
                    stop = inner.pos;
                }
                if (stop != start + (Py_ssize_t)size) {
                    unfilled(tag, size);
                    goto done;
                }
            }
        }
    }

    PyObject *wait_ms = PyLong_FromLongLong(max_wait);
    PyObject *wait = wait_ms ? PyObject_CallOneArg(wait_of, wait_ms) : NULL;
    Py_XDECREF(wait_ms);
    if (wait == NULL)
        goto done;
    PyObject *values[12] = {
        PyLong_FromLongLong(replica_id), wait,
        PyLong_FromLongLong(min_bytes),  PyLong_FromLongLong(max_bytes),
        PyLong_FromLongLong(isolation),  PyLong_FromLongLong(session_id),
        PyLong_FromLongLong(session_epoch), topics,
        forgotten,                       rack_id,
        cluster_id,                      replica_state,
    };
    topics = forgotten = rack_id = cluster_id = replica_state = NULL;
    result = make(fetch_request_cls, 12, fetch_request_fields, values);
done:
    Py_XDECREF(topics);
    Py_XDECREF(forgotten);
    Py_XDECREF(rack_id);
    Py_XDECREF(cluster_id);
    Py_XDECREF(replica_state);
    PyBuffer_Release(&view);
    return result;
}

/* Keep `n` classes (each checked to be one) in `slots`. */
static PyObject *keep(PyObject *const *args, Py_ssize_t nargs, PyObject **slots[], int n)
{
    if (nargs != n) {
        PyErr_Format(PyExc_TypeError, "expected %d classes, got %zd arguments", n, nargs);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "expected classes");
            return NULL;
        }
    for (int i = 0; i < n; i++)
        Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    Py_RETURN_NONE;
}

/* bind_header(RequestHeader, MalformedRequest), from header.py. */
static PyObject *bind_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject **slots[] = {&header_cls, &malformed};
    return keep(args, nargs, slots, 2);
}

/* bind_produce(PartitionData, TopicData, ProduceRequest, MalformedRequest, UUID), from
 * produce_request.py. */
static PyObject *bind_produce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject **slots[] = {&partition_cls, &topic_cls, &request_cls, &malformed, &uuid_cls};
    return keep(args, nargs, slots, 5);
}

/* bind_batches(BatchHeader, CorruptBatchError, UnsupportedMagicError, BatchTooLargeError,
 * InvalidRecordsError, crc32c), from batch.py. */
static PyObject *bind_batches(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyCallable_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "bind_batches takes five classes and crc32c");
        return NULL;
    }
    PyObject **slots[] = {&batch_header_cls, &corrupt_batch, &unsupported_magic,
                          &batch_too_large, &invalid_records};
    PyObject *kept = keep(args, 5, slots, 5);
    if (kept != NULL)
        Py_XSETREF(crc32c, Py_NewRef(args[5]));
    return kept;
}

/* bind_fetch(FetchPartition, FetchTopic, ForgottenTopic, ReplicaState, FetchRequest,
 * MalformedRequest, NO_REPLICA_STATE, wait, uuid_of, NO_HIGH_WATERMARK), from
 * fetch_request_decode.py: its classes, its constants and its two caches (a fetcher
 * sends the same wait and names the same topic ids in every request). */
static PyObject *bind_fetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10 || !PyCallable_Check(args[7]) || !PyCallable_Check(args[8]) ||
        !PyLong_Check(args[9])) {
        PyErr_SetString(PyExc_TypeError, "bind_fetch takes six classes, a ReplicaState, two "
                                         "functions and an int");
        return NULL;
    }
    PyObject **slots[] = {&fetch_partition_cls, &fetch_topic_cls,   &forgotten_cls,
                          &replica_state_cls,   &fetch_request_cls, &malformed};
    PyObject *kept = keep(args, 6, slots, 6);
    if (kept != NULL) {
        Py_XSETREF(no_replica_state, Py_NewRef(args[6]));
        Py_XSETREF(wait_of, Py_NewRef(args[7]));
        Py_XSETREF(uuid_of, Py_NewRef(args[8]));
        Py_XSETREF(no_high_watermark, Py_NewRef(args[9]));
    }
    return kept;
}

static PyMethodDef methods[] = {
    {"bind_header", (PyCFunction)(void (*)(void))bind_header, METH_FASTCALL,
     "bind_header(RequestHeader, MalformedRequest): what parse_header returns and raises"},
    {"bind_produce", (PyCFunction)(void (*)(void))bind_produce, METH_FASTCALL,
     "bind_produce(PartitionData, TopicData, ProduceRequest, MalformedRequest, UUID): what "
     "decode_produce returns and raises"},
    {"bind_batches", (PyCFunction)(void (*)(void))bind_batches, METH_FASTCALL,
     "bind_batches(BatchHeader, CorruptBatchError, UnsupportedMagicError, BatchTooLargeError, "
     "InvalidRecordsError, crc32c): what batch_headers returns and raises, and its checksum"},
    {"bind_fetch", (PyCFunction)(void (*)(void))bind_fetch, METH_FASTCALL,
     "bind_fetch(FetchPartition, FetchTopic, ForgottenTopic, ReplicaState, FetchRequest, "
     "MalformedRequest, NO_REPLICA_STATE, wait, uuid_of, NO_HIGH_WATERMARK)"},
    {"decode_fetch", (PyCFunction)(void (*)(void))decode_fetch, METH_FASTCALL,
     "decode_fetch(version, frame, offset, max_elements) -> FetchRequest"},
    {"batch_headers", (PyCFunction)(void (*)(void))batch_headers, METH_FASTCALL,
     "batch_headers(buf, max_batch_bytes, check_record_count) -> [BatchHeader]"},
    {"parse_header", (PyCFunction)(void (*)(void))parse_header, METH_FASTCALL,
     "parse_header(frame, flexible) -> (RequestHeader, body offset)"},
    {"decode_produce", (PyCFunction)(void (*)(void))decode_produce, METH_FASTCALL,
     "decode_produce(version, frame, offset, max_elements) -> ProduceRequest"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_requestread",
    "A request's header, its Produce or Fetch body, and produced batches' headers, read in C.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__requestread(void)
{
    /* Each class's slots, in the order its values are made. */
    struct {
        PyObject **slots;
        int n;
        const char *const names[14];
    } fields[] = {
        {header_fields, 4, {"api_key", "api_version", "correlation_id", "client_id"}},
        {partition_fields, 2, {"index", "records"}},
        {topic_fields, 3, {"name", "topic_id", "partition_data"}},
        {request_fields, 4, {"transactional_id", "acks", "timeout_ms", "topic_data"}},
        {batch_fields,
         14,
         {"base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
          "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
          "producer_epoch", "base_sequence", "record_count", "position"}},
        {fetch_partition_fields,
         8,
         {"partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch",
          "last_fetched_epoch", "log_start_offset", "replica_directory_id", "high_watermark"}},
        {fetch_topic_fields, 3, {"topic", "topic_id", "partitions"}},
        {forgotten_fields, 3, {"topic", "topic_id", "partitions"}},
        {replica_state_fields, 2, {"replica_id", "replica_epoch"}},
        {fetch_request_fields,
         12,
         {"replica_id", "max_wait", "min_bytes", "max_bytes", "isolation_level", "session_id",
          "session_epoch", "topics", "forgotten_topics_data", "rack_id", "cluster_id",
          "replica_state"}},
    };
    for (size_t c = 0; c < sizeof fields / sizeof fields[0]; c++)
        for (int i = 0; i < fields[c].n; i++) {
            fields[c].slots[i] = PyUnicode_InternFromString(fields[c].names[i]);
            if (fields[c].slots[i] == NULL)
                return NULL;
        }
    bytes_kw = PyUnicode_InternFromString("bytes");
    if (bytes_kw == NULL)
        return NULL;
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL)
        return NULL;
    return PyModule_Create(&module);
}
