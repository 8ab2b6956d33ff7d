/* libFuzzer target for the request reader (kbroker/protocol/_requestread.c).
 *
 * Its functions read bytes straight off a client's socket (a request's header, a Produce
 * or Fetch body, the batch headers of produced records) before anything else looks at
 * them. This target includes the module's source as it ships and calls it as header.py
 * and produce_request.py do, with an embedded Python for the objects it takes and returns
 * (stand-ins for the dataclasses, with the same slots). The frame is handed over as a
 * memoryview of libFuzzer's own buffer, exactly as long as the input: AddressSanitizer
 * reports a read one byte past it.
 *
 * Input: byte 0 picks the Produce version (0-13), the Fetch version (4-18) and, with its
 * top bit, a flexible header; byte 1 is the element budget, and its low bit asks the
 * batch walk to check record counts; the rest is the frame, read as a header and, after
 * the header where one parses (else from its start), as a Produce body and as a Fetch
 * body; and read whole as a records blob. The
 * stand-in checksum is 0 for every batch, so a batch whose CRC field is 0 passes it and
 * the checks after it are reached. Besides memory errors it checks what callers rely on:
 * the only errors are MalformedRequest and, for a topic name, UnicodeDecodeError, and the
 * batch errors; a header ends inside the frame; a request holds no more partitions than
 * the budget, each partition's records inside the frame; a Fetch no more topics,
 * partitions and forgotten partitions than the budget; batches follow each other inside
 * the blob.
 * Build and run: fuzz/run.sh requestread.
 */
#include "../kbroker/protocol/_requestread.c"

#include <stdlib.h>

static const char classes[] =
    "import uuid\n"
    "from dataclasses import dataclass\n"
    "class MalformedRequest(ValueError):\n"
    "    pass\n"
    "@dataclass(slots=True, frozen=True)\n"
    "class RequestHeader:\n"
    "    api_key: int\n"
    "    api_version: int\n"
    "    correlation_id: int\n"
    "    client_id: object\n"
    "@dataclass(slots=True)\n"
    "class PartitionData:\n"
    "    index: int\n"
    "    records: object\n"
    "@dataclass(slots=True)\n"
    "class TopicData:\n"
    "    name: object\n"
    "    topic_id: object\n"
    "    partition_data: list\n"
    "@dataclass(slots=True)\n"
    "class ProduceRequest:\n"
    "    transactional_id: object\n"
    "    acks: int\n"
    "    timeout_ms: int\n"
    "    topic_data: list\n"
    "UUID = uuid.UUID\n"
    "class InvalidBatchError(Exception):\n"
    "    pass\n"
    "class CorruptBatchError(InvalidBatchError):\n"
    "    pass\n"
    "class UnsupportedMagicError(CorruptBatchError):\n"
    "    pass\n"
    "class BatchTooLargeError(InvalidBatchError):\n"
    "    pass\n"
    "class InvalidRecordsError(InvalidBatchError):\n"
    "    pass\n"
    "@dataclass(slots=True)\n"
    "class BatchHeader:\n"
    "    base_offset: int\n"
    "    batch_length: int\n"
    "    partition_leader_epoch: int\n"
    "    magic: int\n"
    "    crc: int\n"
    "    attributes: int\n"
    "    last_offset_delta: int\n"
    "    base_timestamp: int\n"
    "    max_timestamp: int\n"
    "    producer_id: int\n"
    "    producer_epoch: int\n"
    "    base_sequence: int\n"
    "    record_count: int\n"
    "    position: int = 0\n"
    "@dataclass(slots=True)\n"
    "class FetchPartition:\n"
    "    partition: int\n"
    "    fetch_offset: int\n"
    "    partition_max_bytes: int\n"
    "    current_leader_epoch: int\n"
    "    last_fetched_epoch: int\n"
    "    log_start_offset: int\n"
    "    replica_directory_id: object\n"
    "    high_watermark: int\n"
    "@dataclass(slots=True)\n"
    "class FetchTopic:\n"
    "    topic: str\n"
    "    topic_id: object\n"
    "    partitions: tuple\n"
    "@dataclass(slots=True)\n"
    "class ForgottenTopic:\n"
    "    topic: str\n"
    "    topic_id: object\n"
    "    partitions: tuple\n"
    "@dataclass(frozen=True, slots=True)\n"
    "class ReplicaState:\n"
    "    replica_id: int\n"
    "    replica_epoch: int\n"
    "@dataclass(slots=True)\n"
    "class FetchRequest:\n"
    "    replica_id: int\n"
    "    max_wait: object\n"
    "    min_bytes: int\n"
    "    max_bytes: int\n"
    "    isolation_level: int\n"
    "    session_id: int\n"
    "    session_epoch: int\n"
    "    topics: tuple\n"
    "    forgotten_topics_data: tuple\n"
    "    rack_id: str\n"
    "    cluster_id: object\n"
    "    replica_state: object\n"
    "NO_REPLICA_STATE = ReplicaState(-1, -1)\n"
    "def wait(ms):\n"
    "    return ms\n"
    "def uuid_of(high, low):\n"
    "    return (high, low) if high or low else None\n"
    "NO_HIGH_WATERMARK = 2**63 - 1\n"
    "def crc32c(view):\n"
    "    return len(bytes(view)) * 0\n";

static PyObject *globals;

static PyObject *named(const char *name)
{
    PyObject *value = PyDict_GetItemString(globals, name);
    if (value == NULL)
        abort();
    return value;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("PYTHONMALLOC", "malloc", 1); /* every object its own allocation, seen by ASan */
    Py_InitializeEx(0);
    PyObject *module = PyInit__requestread();
    globals = PyDict_New();
    if (module == NULL || globals == NULL ||
        PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) < 0)
        abort();
    PyObject *ran = PyRun_String(classes, Py_file_input, globals, globals);
    if (ran == NULL) {
        PyErr_Print();
        abort();
    }
    Py_DECREF(ran);
    PyObject *header_args[] = {named("RequestHeader"), named("MalformedRequest")};
    PyObject *produce_args[] = {named("PartitionData"), named("TopicData"),
                                named("ProduceRequest"), named("MalformedRequest"),
                                named("UUID")};
    PyObject *batch_args[] = {named("BatchHeader"),       named("CorruptBatchError"),
                              named("UnsupportedMagicError"), named("BatchTooLargeError"),
                              named("InvalidRecordsError"), named("crc32c")};
    PyObject *a = bind_header(NULL, header_args, 2), *b = bind_produce(NULL, produce_args, 5);
    PyObject *c = bind_batches(NULL, batch_args, 6);
    PyObject *fetch_args[] = {named("FetchPartition"),   named("FetchTopic"),
                              named("ForgottenTopic"),   named("ReplicaState"),
                              named("FetchRequest"),     named("MalformedRequest"),
                              named("NO_REPLICA_STATE"), named("wait"),
                              named("uuid_of"),          named("NO_HIGH_WATERMARK")};
    PyObject *d = bind_fetch(NULL, fetch_args, 10);
    if (a == NULL || b == NULL || c == NULL || d == NULL)
        abort();
    Py_DECREF(d);
    Py_DECREF(a);
    Py_DECREF(b);
    Py_DECREF(c);
    return 0;
}

/* The only errors a caller expects (`allowed`, and UnicodeDecodeError where a name is
 * decoded); anything else aborts. */
static void expected_error(PyObject *allowed, int unicode_allowed)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL)
        abort();
    int ok = PyErr_GivenExceptionMatches(type, allowed) ||
             (unicode_allowed && PyErr_GivenExceptionMatches(type, PyExc_UnicodeDecodeError));
    if (!ok) {
        PyErr_Restore(type, value, tb);
        PyErr_Print();
        abort();
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

static PyObject *attr(PyObject *obj, const char *name)
{
    PyObject *value = PyObject_GetAttrString(obj, name);
    if (value == NULL)
        abort();
    return value;
}

/* The body's offset after a header that parses, else 0 (the body is then the frame). */
static Py_ssize_t check_header(PyObject *frame, Py_ssize_t size, int flexible)
{
    PyObject *args[] = {frame, flexible ? Py_True : Py_False};
    PyObject *r = parse_header(NULL, args, 2);
    if (r == NULL) {
        expected_error(malformed, 0);
        return 0;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
    PyObject *client_id = attr(PyTuple_GET_ITEM(r, 0), "client_id");
    if (offset < 10 || offset > size || (client_id != Py_None && !PyUnicode_Check(client_id)))
        abort();
    Py_DECREF(client_id);
    Py_DECREF(r);
    return offset;
}

static void check_produce(PyObject *frame, Py_ssize_t size, Py_ssize_t offset, long version,
                          long budget)
{
    PyObject *args[] = {PyLong_FromLong(version), frame, PyLong_FromSsize_t(offset),
                        PyLong_FromLong(budget)};
    PyObject *request = decode_produce(NULL, args, 4);
    Py_DECREF(args[0]);
    Py_DECREF(args[2]);
    Py_DECREF(args[3]);
    if (request == NULL) {
        expected_error(malformed, 1);
        return;
    }
    PyObject *topics = attr(request, "topic_data");
    Py_ssize_t elements = PyList_GET_SIZE(topics);
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(topics); t++) {
        PyObject *partitions = attr(PyList_GET_ITEM(topics, t), "partition_data");
        elements += PyList_GET_SIZE(partitions);
        for (Py_ssize_t p = 0; p < PyList_GET_SIZE(partitions); p++) {
            PyObject *records = attr(PyList_GET_ITEM(partitions, p), "records");
            if (records != Py_None && (!PyMemoryView_Check(records) ||
                                       PyMemoryView_GET_BUFFER(records)->len > size))
                abort();
            Py_DECREF(records);
        }
        Py_DECREF(partitions);
    }
    if (elements > budget)
        abort();
    Py_DECREF(topics);
    Py_DECREF(request);
}

/* The length of a tuple attribute. */
static Py_ssize_t tuple_size(PyObject *obj, const char *name)
{
    PyObject *value = attr(obj, name);
    if (!PyTuple_Check(value))
        abort();
    Py_ssize_t n = PyTuple_GET_SIZE(value);
    Py_DECREF(value);
    return n;
}

static void check_fetch(PyObject *frame, Py_ssize_t offset, long version, long budget)
{
    PyObject *args[] = {PyLong_FromLong(version), frame, PyLong_FromSsize_t(offset),
                        PyLong_FromLong(budget)};
    PyObject *request = decode_fetch(NULL, args, 4);
    Py_DECREF(args[0]);
    Py_DECREF(args[2]);
    Py_DECREF(args[3]);
    if (request == NULL) {
        expected_error(malformed, 0);
        return;
    }
    Py_ssize_t elements = 0;
    const char *arrays[] = {"topics", "forgotten_topics_data"};
    for (int a = 0; a < 2; a++) {
        PyObject *topics = attr(request, arrays[a]);
        if (!PyTuple_Check(topics))
            abort();
        elements += PyTuple_GET_SIZE(topics);
        for (Py_ssize_t t = 0; t < PyTuple_GET_SIZE(topics); t++)
            elements += tuple_size(PyTuple_GET_ITEM(topics, t), "partitions");
        Py_DECREF(topics);
    }
    if (elements > budget)
        abort();
    Py_DECREF(request);
}

static int64_t field(PyObject *header, const char *name)
{
    PyObject *value = attr(header, name);
    int64_t n = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return n;
}

static void check_batches(PyObject *blob, Py_ssize_t size, long max_bytes, int check_count)
{
    PyObject *args[] = {blob, PyLong_FromLong(max_bytes), check_count ? Py_True : Py_False};
    PyObject *headers = batch_headers(NULL, args, 3);
    Py_DECREF(args[1]);
    if (headers == NULL) {
        expected_error(named("InvalidBatchError"), 0);
        return;
    }
    int64_t next = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(headers); i++) {
        PyObject *h = PyList_GET_ITEM(headers, i);
        int64_t length = field(h, "batch_length") + 12;
        if (field(h, "position") != next || length < 61 || length > max_bytes ||
            field(h, "magic") != 2 || field(h, "crc") != 0 || field(h, "last_offset_delta") < 0)
            abort();
        next += length;
    }
    if (next != size || (size > 0 && PyList_GET_SIZE(headers) == 0))
        abort();
    Py_DECREF(headers);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    long version = (data[0] & 0x7f) % 14;
    int flexible = data[0] >> 7;
    long budget = data[1];
    Py_ssize_t length = (Py_ssize_t)size - 2;
    PyObject *frame = PyMemoryView_FromMemory((char *)data + 2, length, PyBUF_READ);
    if (frame == NULL)
        abort();
    Py_ssize_t body = check_header(frame, length, flexible);
    check_produce(frame, length, body, version, budget);
    check_fetch(frame, body, 4 + (data[0] & 0x7f) % 15, budget);
    check_batches(frame, length, budget * 16 + 61, data[1] & 1);
    Py_DECREF(frame);
    return 0;
}
