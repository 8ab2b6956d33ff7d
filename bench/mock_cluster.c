/*
 * mock_cluster: run librdkafka's in-process mock Kafka cluster as a standalone
 * broker process so a benchmark can drive it over loopback like any other peer.
 *
 * Usage: mock_cluster [TOPIC[:PARTITIONS]]...
 *
 * Creates a one-broker mock cluster, creates the named topics (one partition
 * unless given), prints the bootstrap servers on one stdout line and then waits
 * for SIGTERM or SIGINT.  The mock keeps all records in memory and never fsyncs,
 * which makes it the "no storage cost" reference point of the comparison.
 * It exits too when its parent dies, so a crashed harness leaves no stray broker.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static int create_topic(rd_kafka_mock_cluster_t *mcluster, const char *spec) {
        char name[512];
        int partitions = 1;
        const char *colon = strrchr(spec, ':');
        size_t len = colon ? (size_t)(colon - spec) : strlen(spec);

        if (len == 0 || len >= sizeof(name)) {
                fprintf(stderr, "mock_cluster: bad topic spec '%s'\n", spec);
                return -1;
        }
        memcpy(name, spec, len);
        name[len] = '\0';
        if (colon) {
                partitions = atoi(colon + 1);
                if (partitions <= 0) {
                        fprintf(stderr, "mock_cluster: bad partition count in '%s'\n", spec);
                        return -1;
                }
        }
        rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mcluster, name, partitions, 1);
        if (err) {
                fprintf(stderr, "mock_cluster: creating %s failed: %s\n", name,
                        rd_kafka_err2str(err));
                return -1;
        }
        return 0;
}

int main(int argc, char **argv) {
        char errstr[512];
        sigset_t waitset;
        int sig = 0;

        /* Block the stop signals before librdkafka starts its threads so they
         * inherit the mask and sigwait() below is the only receiver. */
        sigemptyset(&waitset);
        sigaddset(&waitset, SIGTERM);
        sigaddset(&waitset, SIGINT);
        pthread_sigmask(SIG_BLOCK, &waitset, NULL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);

        /* The mock cluster hangs off an ordinary client handle; it needs no
         * bootstrap servers of its own. */
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr)) !=
            RD_KAFKA_CONF_OK) {
                fprintf(stderr, "mock_cluster: %s\n", errstr);
                return 1;
        }
        rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) {
                fprintf(stderr, "mock_cluster: rd_kafka_new failed: %s\n", errstr);
                return 1;
        }
        rd_kafka_mock_cluster_t *mcluster = rd_kafka_mock_cluster_new(rk, 1);
        if (!mcluster) {
                fprintf(stderr, "mock_cluster: rd_kafka_mock_cluster_new failed\n");
                rd_kafka_destroy(rk);
                return 1;
        }
        for (int i = 1; i < argc; i++) {
                if (create_topic(mcluster, argv[i]) != 0) {
                        rd_kafka_mock_cluster_destroy(mcluster);
                        rd_kafka_destroy(rk);
                        return 1;
                }
        }

        printf("%s\n", rd_kafka_mock_cluster_bootstraps(mcluster));
        fflush(stdout);

        sigwait(&waitset, &sig);

        rd_kafka_mock_cluster_destroy(mcluster);
        rd_kafka_destroy(rk);
        return 0;
}
