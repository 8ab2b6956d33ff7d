/* Decrypting every TLS record a read delivered, in one call, and encrypting an answer
 * with the file ranges it sends, in another (security/tls_session.py).
 *
 * OpenSSL's SSL_read hands out one TLS record per call, and librdkafka writes each
 * produced message's value and its header as TLS records of their own: a GiB produced
 * over TLS is about half a million records. Through Python's ssl module each record
 * costs a method call, a buffer export, and a release and re-take of the interpreter
 * lock, about as much again as OpenSSL's own work on it. Here the loop over the records
 * runs in C, with the lock released once per call.
 *
 * The SSL object is the one Python's ssl module made for an SSLObject (wrap_bio): the
 * handshake, certificates, verification and every setting stay with Python's ssl; this
 * only reads, and narrows TLS 1.3's suites, which Python cannot. CPython does not
 * expose the SSL pointer, so it is taken from the `_ssl._SSLSocket` object's layout,
 * which has opened with the same fields since Python 3.7 (PyObject_HEAD, the socket
 * weak reference, then `SSL *ssl`), and it is used only after OpenSSL confirms it:
 * CPython stores the owning `_SSLSocket` as the SSL object's app data. Both must also
 * be running the same OpenSSL build. Where any check fails, `ssl_of` answers None and
 * the caller keeps Python's read loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define DRAINED 0 /* every complete record is decrypted; more ciphertext is needed */
#define FULL 1    /* the buffer is full; records may remain */
#define CLOSED 2  /* the peer sent close_notify */
#define FAILED 3  /* a corrupt record or a protocol error: the session is dead */

typedef struct {
    PyObject_HEAD
    PyObject *socket;
    SSL *ssl;
} SSLSocketHead;

/* The SSL object behind a `_ssl._SSLSocket`, or NULL when it cannot be vouched for. */
static SSL *ssl_from(PyObject *sslsocket)
{
#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
    (void)sslsocket;
    return NULL; /* layout checked for CPython 3.11 to 3.13 only */
#else
    PyTypeObject *type = Py_TYPE(sslsocket);
    if (strcmp(type->tp_name, "_ssl._SSLSocket") != 0 ||
        type->tp_basicsize < (Py_ssize_t)sizeof(SSLSocketHead))
        return NULL;
    SSL *ssl = ((SSLSocketHead *)sslsocket)->ssl;
    if (ssl == NULL || SSL_get_app_data(ssl) != (void *)sslsocket)
        return NULL;
    return ssl;
#endif
}

/* ssl_of(sslsocket) -> int or None: the SSL object's address, checked; None if unusable. */
static PyObject *ssl_of(PyObject *self, PyObject *sslsocket)
{
    (void)self;
    SSL *ssl = ssl_from(sslsocket);
    if (ssl == NULL)
        Py_RETURN_NONE;
    return PyLong_FromVoidPtr(ssl);
}

/* Room for the plaintext of what OpenSSL can decrypt now: no more than the ciphertext
 * waiting in its read BIO, plus one record it may hold partly read, plus what it holds
 * decrypted and unread. */
static size_t plaintext_bound(SSL *ssl)
{
    return BIO_ctrl_pending(SSL_get_rbio(ssl)) + (size_t)SSL_pending(ssl) +
           SSL3_RT_MAX_PLAIN_LENGTH + SSL3_RT_MAX_ENCRYPTED_OVERHEAD;
}

/* (out cut to its first `pos` bytes, status, reason): what read_records and
 * write_records return; the reason is OpenSSL's for a FAILED status. Steals `out`. */
static PyObject *outcome(PyObject *out, size_t pos, int status, unsigned long error)
{
    if (_PyBytes_Resize(&out, (Py_ssize_t)pos) < 0)
        return NULL;
    const char *reason = NULL;
    if (status == FAILED) {
        reason = error ? ERR_reason_error_string(error) : NULL;
        if (reason == NULL)
            reason = "TLS failure";
    }
    PyObject *result = Py_BuildValue("(Oiz)", out, status, reason);
    Py_DECREF(out);
    return result;
}

/* read_records(sslsocket) -> (plaintext, status, reason)
 *
 * Decrypts every complete record waiting into one new bytes object (no buffer to copy
 * out of) until the ciphertext runs out (DRAINED), the peer closes (CLOSED) or a record
 * fails (FAILED, with OpenSSL's reason string; the plaintext before it is not to be
 * used). FULL means the room ran out first (plaintext_bound says it cannot): call again
 * for the rest. */
static PyObject *read_records(PyObject *self, PyObject *sslsocket)
{
    (void)self;
    SSL *ssl = ssl_from(sslsocket);
    if (ssl == NULL) {
        PyErr_SetString(PyExc_TypeError, "not an SSL object this module can read");
        return NULL;
    }
    size_t end = plaintext_bound(ssl);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)end);
    if (out == NULL)
        return NULL;
    unsigned char *base = (unsigned char *)PyBytes_AS_STRING(out);
    size_t pos = 0;
    int status = FULL;
    unsigned long error = 0;
    Py_BEGIN_ALLOW_THREADS
    ERR_clear_error(); /* SSL_get_error reads the queue: nothing stale may be in it */
    while (pos < end) {
        size_t got = 0;
        int ok = SSL_read_ex(ssl, base + pos, end - pos, &got);
        if (ok) {
            pos += got;
            continue;
        }
        int why = SSL_get_error(ssl, ok);
        if (why == SSL_ERROR_WANT_READ) {
            status = DRAINED;
        } else if (why == SSL_ERROR_ZERO_RETURN) {
            status = CLOSED;
        } else {
            status = FAILED;
            error = ERR_peek_last_error();
        }
        break;
    }
    ERR_clear_error();
    Py_END_ALLOW_THREADS
    return outcome(out, pos, status, error);
}

/* write_records reads files this much at a time: four records, one pread. */
#define CHUNK (4 * SSL3_RT_MAX_PLAIN_LENGTH)
/* Room for the ciphertext of `plain` bytes: TLS 1.3's AES-GCM adds 22 bytes a record,
 * TLS 1.2's 29 (CBC suites up to 85), and a post-handshake message may come first. */
static size_t ciphertext_room(size_t plain)
{
    return plain + (plain / SSL3_RT_MAX_PLAIN_LENGTH + 1) * 96 + 1024;
}

/* Moves everything the write BIO holds to out + *pos; false if it would not fit. */
static int drain_into(BIO *wbio, unsigned char *out, size_t room, size_t *pos)
{
    size_t pending = BIO_ctrl_pending(wbio);
    if (pending > room - *pos)
        return 0;
    while (pending) {
        int got = BIO_read(wbio, out + *pos, (int)pending);
        if (got <= 0)
            return 0;
        *pos += (size_t)got;
        pending -= (size_t)got;
    }
    return 1;
}

/* Where write_records has OpenSSL put the records: straight into the bytes object it
 * returns. Python's memory BIO would clear its buffer as it grows, copy the records in,
 * and copy them out again; this takes them in one copy. It stands in for the session's
 * write BIO only during write_records, which leaves room for every record first. */
typedef struct {
    unsigned char *base;
    size_t room;
    size_t pos;
} Sink;

static BIO_METHOD *sink_method;

static int sink_write(BIO *bio, const char *data, int len)
{
    Sink *sink = BIO_get_data(bio);
    if (len < 0 || (size_t)len > sink->room - sink->pos)
        return -1; /* cannot happen: the room is checked before each write */
    memcpy(sink->base + sink->pos, data, (size_t)len);
    sink->pos += (size_t)len;
    return len;
}

static long sink_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
    (void)bio, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int sink_create(BIO *bio)
{
    BIO_set_init(bio, 1);
    return 1;
}

/* write_records(sslsocket, head, fd, position, length) -> (ciphertext, status, reason)
 *
 * Encrypts `head` (bytes-like) followed by `length` bytes of file `fd` from `position`
 * (fd -1: head alone) as full TLS records of 16 KiB, into one new bytes object: the file
 * is read with pread straight into the records' plaintext, so the fetched bytes never
 * become a Python object, and the write BIO is drained after every four records, so it
 * never grows past them. Status DRAINED: done; FAILED: OpenSSL refused (reason says why);
 * CLOSED: the file ended before `length` bytes (no ciphertext is returned). */
static PyObject *write_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *sslsocket;
    Py_buffer head;
    int fd;
    long long position;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "Oy*iLn", &sslsocket, &head, &fd, &position, &length))
        return NULL;
    SSL *ssl = ssl_from(sslsocket);
    if (ssl == NULL || length < 0 || position < 0 || (fd < 0 && length)) {
        PyBuffer_Release(&head);
        PyErr_SetString(PyExc_ValueError, "not an SSL object or file range this module can write");
        return NULL;
    }
    BIO *wbio = SSL_get_wbio(ssl);
    size_t total = (size_t)head.len + (size_t)length;
    size_t room = BIO_ctrl_pending(wbio) + ciphertext_room(total);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)room);
    unsigned char *plain = length ? PyMem_RawMalloc(CHUNK) : NULL;
    if (out == NULL || (length && plain == NULL)) {
        Py_XDECREF(out);
        PyMem_RawFree(plain);
        PyBuffer_Release(&head);
        return PyErr_NoMemory();
    }
    const unsigned char *from = head.buf;
    size_t head_left = (size_t)head.len, file_left = (size_t)length;
    Sink sink = {(unsigned char *)PyBytes_AS_STRING(out), room, 0};
    int status = DRAINED, read_errno = 0;
    unsigned long error = 0;
    /* What the memory BIO holds goes first (drained, it stays empty), then the sink
     * stands in for it until the records are written. */
    BIO *sink_bio = BIO_new(sink_method);
    if (sink_bio == NULL || !drain_into(wbio, sink.base, sink.room, &sink.pos) ||
        !BIO_up_ref(wbio)) {
        BIO_free(sink_bio);
        ERR_clear_error();
        Py_DECREF(out);
        PyMem_RawFree(plain);
        PyBuffer_Release(&head);
        PyErr_SetString(PyExc_RuntimeError, "could not set up the TLS record writer");
        return NULL;
    }
    BIO_set_data(sink_bio, &sink);
    SSL_set0_wbio(ssl, sink_bio); /* drops the session's reference to wbio: ours remains */
    for (;;) {
        int grow = 0;
        Py_BEGIN_ALLOW_THREADS
        ERR_clear_error();
        while (status == DRAINED && head_left + file_left) {
            size_t next = head_left + file_left < CHUNK ? head_left + file_left : CHUNK;
            if (sink.room - sink.pos < ciphertext_room(next)) {
                grow = 1;
                break;
            }
            /* A chunk: CHUNK bytes of the head, or what is left of the head topped up
             * from the file, so that every record but the very last is full. */
            const unsigned char *chunk = from;
            size_t fill;
            if (head_left >= CHUNK || !file_left) {
                fill = head_left < CHUNK ? head_left : CHUNK;
                head_left -= fill;
                from += fill;
            } else {
                memcpy(plain, from, head_left);
                fill = head_left;
                from += head_left;
                head_left = 0;
                size_t want = CHUNK - fill < file_left ? CHUNK - fill : file_left;
                size_t have = 0;
                while (have < want) {
                    ssize_t got = pread(fd, plain + fill + have, want - have, (off_t)position);
                    if (got < 0 && errno == EINTR)
                        continue;
                    if (got <= 0) {
                        read_errno = got < 0 ? errno : 0;
                        break;
                    }
                    have += (size_t)got;
                    position += got;
                }
                if (have < want) {
                    status = CLOSED;
                    break;
                }
                file_left -= want;
                fill += want;
                chunk = plain;
            }
            /* One call for the chunk's records: OpenSSL cuts them at 16 KiB. */
            size_t written = 0;
            if (!SSL_write_ex(ssl, chunk, fill, &written) || written != fill) {
                status = FAILED;
                error = ERR_peek_last_error();
                break;
            }
        }
        ERR_clear_error();
        Py_END_ALLOW_THREADS
        if (!grow)
            break;
        if (_PyBytes_Resize(&out, (Py_ssize_t)(sink.room + ciphertext_room(CHUNK))) < 0)
            break;
        sink.base = (unsigned char *)PyBytes_AS_STRING(out);
        sink.room += ciphertext_room(CHUNK);
    }
    SSL_set0_wbio(ssl, wbio); /* takes our reference back; frees the sink */
    if (out == NULL) {
        PyMem_RawFree(plain);
        PyBuffer_Release(&head);
        return NULL;
    }
    size_t pos = sink.pos;
    PyMem_RawFree(plain);
    PyBuffer_Release(&head);
    if (read_errno) {
        Py_DECREF(out);
        errno = read_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (status != DRAINED)
        pos = 0;
    return outcome(out, pos, status, error);
}

/* set_ciphersuites(sslsocket, suites): the TLS 1.3 suites (OpenSSL's colon-separated
 * names) this session may negotiate, before its handshake. Python's ssl sets only TLS
 * 1.2's cipher list, which would leave a narrowed `ssl.cipher.suites` wider than asked. */
static PyObject *set_ciphersuites(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *sslsocket;
    const char *suites;
    if (!PyArg_ParseTuple(args, "Os", &sslsocket, &suites))
        return NULL;
    SSL *ssl = ssl_from(sslsocket);
    if (ssl == NULL) {
        PyErr_SetString(PyExc_TypeError, "not an SSL object this module can configure");
        return NULL;
    }
    int ok = SSL_set_ciphersuites(ssl, suites);
    ERR_clear_error();
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "OpenSSL refused the TLS 1.3 suites %s", suites);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"ssl_of", ssl_of, METH_O, "The checked address of an _SSLSocket's SSL object, or None."},
    {"read_records", read_records, METH_O,
     "Decrypt every complete TLS record: (plaintext, status, reason)."},
    {"write_records", write_records, METH_VARARGS,
     "Encrypt bytes and a file range as 16 KiB TLS records: (ciphertext, status, reason)."},
    {"set_ciphersuites", set_ciphersuites, METH_VARARGS,
     "Narrow the TLS 1.3 suites one session may negotiate."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tlsread", "Reading and writing many TLS records in one call.", -1, methods,
};

PyMODINIT_FUNC PyInit__tlsread(void)
{
    if (sink_method == NULL) {
        sink_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kbroker records");
        if (sink_method == NULL || !BIO_meth_set_write(sink_method, sink_write) ||
            !BIO_meth_set_ctrl(sink_method, sink_ctrl) ||
            !BIO_meth_set_create(sink_method, sink_create)) {
            PyErr_SetString(PyExc_ImportError, "OpenSSL refused a BIO method");
            return NULL;
        }
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "DRAINED", DRAINED) < 0 ||
        PyModule_AddIntConstant(m, "FULL", FULL) < 0 ||
        PyModule_AddIntConstant(m, "CLOSED", CLOSED) < 0 ||
        PyModule_AddIntConstant(m, "FAILED", FAILED) < 0 ||
        PyModule_AddIntConstant(m, "OPENSSL_VERSION_NUMBER", (long)OpenSSL_version_num()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
