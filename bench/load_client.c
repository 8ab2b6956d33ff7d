/* A closed-loop Kafka load client for bench/node_capacity.py: N connections, each
 * sending one pre-encoded request, waiting for its answer and sending it again.
 *
 * The Python client (an asyncio Protocol per connection) spends 32-60 us of CPU per
 * request; on a 2-core machine that CPU is taken from the brokers it measures. This one
 * is one epoll loop with no allocation per request: 23-41 us a request here, most of it
 * the kernel's, whose loopback send does the receiving side's TCP work and wake-up.
 *
 *   load_client SECONDS WARM CONNECTIONS HOST PORT REQUEST_FILE [HOST PORT REQUEST_FILE...]
 *
 * Connection i goes to target i mod T. Connections are opened one at a time, each
 * counted open once its first request is answered (a burst of connects would overflow a
 * small listen backlog). Then every connection runs; after WARM seconds the client
 * prints "start" (the caller samples the brokers' CPU then), counts the answers and their
 * latencies for SECONDS, prints "stop", and then one "name value" line per figure:
 * answers, wall_s, p50_ms, p99_ms, p999_ms, cpu_s (this process's own CPU over the
 * measured part). Any failure (a refused connect, a closed connection, a short write)
 * ends it with status 1 and one line on stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_TARGETS 16
#define READ_BUFFER 65536

struct target {
    struct sockaddr_in addr;
    char *request;
    size_t request_size;
};

struct conn {
    int fd;
    const struct target *target;
    double sent_at;
    size_t have;      /* bytes of the current answer read so far */
    size_t need;      /* its whole size with the 4-byte prefix, once the prefix is read */
    unsigned char head[4];
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double own_cpu(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec / 1e6 +
           (double)usage.ru_stime.tv_sec + (double)usage.ru_stime.tv_usec / 1e6;
}

static void fail(const char *what) {
    fprintf(stderr, "load_client: %s: %s\n", what, errno ? strerror(errno) : "failed");
    exit(1);
}

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail(path);
    if (fseek(f, 0, SEEK_END) != 0) fail(path);
    long length = ftell(f);
    if (length <= 0) fail(path);
    rewind(f);
    char *data = malloc((size_t)length);
    if (data == NULL || fread(data, 1, (size_t)length, f) != (size_t)length) fail(path);
    fclose(f);
    *size = (size_t)length;
    return data;
}

static void send_request(struct conn *c) {
    size_t sent = 0;
    while (sent < c->target->request_size) {
        ssize_t n = write(c->fd, c->target->request + sent, c->target->request_size - sent);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("write");  /* a request of a few hundred bytes into an idle socket */
        }
        sent += (size_t)n;
    }
    c->sent_at = now();
    c->have = 0;
    c->need = 0;
}

/* Reads what is there; returns 1 once the whole answer is in, -1 if the peer closed.
 * Small answers (all of these workloads') come whole in one read; a larger one is read
 * on through `scratch`, a prefix split over two reads is kept in `head`. */
static int read_answer(struct conn *c, unsigned char *scratch) {
    for (;;) {
        ssize_t n = read(c->fd, scratch, READ_BUFFER);
        if (n == 0) return -1;
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return -1;
        }
        size_t got = (size_t)n, used = 0;
        while (!c->need && used < got && c->have < 4) c->head[c->have++] = scratch[used++];
        if (!c->need && c->have == 4) {
            uint32_t size;
            memcpy(&size, c->head, 4);
            size = ntohl(size);
            if (size > (1u << 30)) { errno = EPROTO; fail("answer size"); }
            c->need = 4 + (size_t)size;
        }
        c->have += got - used;
        if (c->need && c->have > c->need) { errno = EPROTO; fail("answer longer than its size"); }
        if (c->need && c->have == c->need) return 1;
    }
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, size_t n, double q) {
    if (n == 0) return 0.0;
    size_t i = (size_t)(q * (double)n);
    return sorted[i < n ? i : n - 1];
}

int main(int argc, char **argv) {
    if (argc < 7 || (argc - 4) % 3 != 0) {
        fprintf(stderr, "usage: load_client SECONDS WARM CONNECTIONS HOST PORT REQUEST_FILE...\n");
        return 2;
    }
    double seconds = atof(argv[1]), warm = atof(argv[2]);
    int connections = atoi(argv[3]);
    int targets = (argc - 4) / 3;
    if (targets > MAX_TARGETS || connections <= 0) { errno = EINVAL; fail("arguments"); }
    struct target target[MAX_TARGETS];
    for (int t = 0; t < targets; t++) {
        memset(&target[t].addr, 0, sizeof target[t].addr);
        target[t].addr.sin_family = AF_INET;
        target[t].addr.sin_port = htons((uint16_t)atoi(argv[5 + 3 * t]));
        if (inet_pton(AF_INET, argv[4 + 3 * t], &target[t].addr.sin_addr) != 1) {
            errno = EINVAL;
            fail(argv[4 + 3 * t]);
        }
        target[t].request = read_file(argv[6 + 3 * t], &target[t].request_size);
    }
    struct conn *conns = calloc((size_t)connections, sizeof *conns);
    unsigned char *scratch = malloc(READ_BUFFER);
    size_t capacity = 1 << 20, count = 0;
    double *latencies = malloc(capacity * sizeof *latencies);
    if (conns == NULL || scratch == NULL || latencies == NULL) fail("malloc");

    int epoll = epoll_create1(0);
    if (epoll < 0) fail("epoll_create1");
    for (int i = 0; i < connections; i++) {
        struct conn *c = &conns[i];
        c->target = &target[i % targets];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->fd < 0) fail("socket");
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(c->fd, (const struct sockaddr *)&c->target->addr, sizeof c->target->addr))
            fail("connect");
        send_request(c);  /* blocking: its answer says the broker took the connection */
        int done;
        while ((done = read_answer(c, scratch)) == 0) {}
        if (done < 0) { errno = ECONNRESET; fail("first answer"); }
        if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0) fail("fcntl");
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epoll, EPOLL_CTL_ADD, c->fd, &event) < 0) fail("epoll_ctl");
    }
    for (int i = 0; i < connections; i++) send_request(&conns[i]);

    double start = now() + warm, stop = start + seconds, cpu_start = 0.0;
    int measuring = 0;
    struct epoll_event events[256];
    for (;;) {
        double t = now();
        if (!measuring && t >= start) {
            measuring = 1;
            cpu_start = own_cpu();
            printf("start\n");
            fflush(stdout);
            start = now();
            stop = start + seconds;
        }
        if (measuring && t >= stop) break;
        int n = epoll_wait(epoll, events, 256, 10);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("epoll_wait");
        }
        for (int e = 0; e < n; e++) {
            struct conn *c = events[e].data.ptr;
            int done = read_answer(c, scratch);
            if (done < 0) { errno = ECONNRESET; fail("connection closed by the broker"); }
            if (done == 0) continue;
            double answered = now();
            if (measuring && c->sent_at >= start) {
                if (count == capacity) {
                    capacity *= 2;
                    latencies = realloc(latencies, capacity * sizeof *latencies);
                    if (latencies == NULL) fail("realloc");
                }
                latencies[count++] = answered - c->sent_at;
            }
            send_request(c);
        }
    }
    double wall = now() - start, cpu = own_cpu() - cpu_start;
    printf("stop\n");
    fflush(stdout);
    qsort(latencies, count, sizeof *latencies, compare);
    printf("answers %zu\nwall_s %.6f\np50_ms %.4f\np99_ms %.4f\np999_ms %.4f\ncpu_s %.6f\n", count,
           wall, 1e3 * percentile(latencies, count, 0.50), 1e3 * percentile(latencies, count, 0.99),
           1e3 * percentile(latencies, count, 0.999), cpu);
    fflush(stdout);
    for (int i = 0; i < connections; i++) close(conns[i].fd);
    return 0;
}
