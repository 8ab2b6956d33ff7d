/* Decrypting every TLS record a read delivered, in one call (security/tls_session.py).
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
#include <string.h>
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
    {"set_ciphersuites", set_ciphersuites, METH_VARARGS,
     "Narrow the TLS 1.3 suites one session may negotiate."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tlsread", "Reading many TLS records in one call.", -1, methods,
};

PyMODINIT_FUNC PyInit__tlsread(void)
{
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
