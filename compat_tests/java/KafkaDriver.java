import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.RaftVoterEndpoint;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RaftVoterEndpoint;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.token.delegation.DelegationToken;
import org.apache.kafka.common.security.token.delegation.TokenInformation;
import org.apache.kafka.clients.admin.CreateDelegationTokenOptions;
import org.apache.kafka.clients.admin.DescribeDelegationTokenOptions;
import org.apache.kafka.clients.admin.ExpireDelegationTokenOptions;
import org.apache.kafka.clients.admin.RenewDelegationTokenOptions;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Drives the official Java Kafka client for kbroker's compat tests.
 *
 * <p>{@code serve} reads one command a line from stdin (tab-separated {@code key=value}
 * words, the first word the command's name) and answers each with JSON lines on stdout,
 * the last of them {@code {"end":"ok"}} or {@code {"end":"error",...}} with the client's
 * exception chain. Any other first argument runs that one command and exits. Clients are
 * configured as an application would (defaults, plus what a command names under {@code
 * producer.}, {@code consumer.} or {@code admin.}); the driver reports what the client
 * returned and leaves judging it to the tests. Producers and consumers opened by name live
 * across commands, so a test can interleave steps (a transaction left open while another
 * consumer reads).
 */
public final class KafkaDriver {
    private final PrintStream out;
    private final Args defaults;
    private final Map<String, KafkaProducer<String, String>> producers = new HashMap<>();
    private final Map<String, KafkaConsumer<String, String>> consumers = new HashMap<>();
    private final Map<String, Admin> admins = new HashMap<>();

    private KafkaDriver(PrintStream out, Args defaults) {
        this.out = out;
        this.defaults = defaults;
    }

    public static void main(String[] argv) throws Exception {
        PrintStream out =
                new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        List<String> words = Arrays.asList(argv);
        if (!words.isEmpty() && words.get(0).equals("serve")) {
            KafkaDriver driver = new KafkaDriver(out, Args.parse(words.subList(1, words.size())));
            driver.serve();
            System.exit(0);
        }
        KafkaDriver driver = new KafkaDriver(out, Args.parse(List.of()));
        boolean ok = !words.isEmpty() && driver.run(words);
        driver.closeAll();
        System.exit(ok ? 0 : 1);
    }

    private void serve() throws Exception {
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        emit(Json.obj("ready", true));
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.isBlank()) {
                run(Arrays.asList(line.split("\t")));
            }
        }
        closeAll();
    }

    private boolean run(List<String> words) {
        String command = words.get(0);
        Args args = defaults.with(Args.parse(words.subList(1, words.size())));
        try {
            dispatch(command, args);
            emit(Json.obj("end", "ok"));
            return true;
        } catch (Throwable t) {
            // The deepest cause names the broker's error (ExecutionException and
            // KafkaException wrap it), which is what tests compare.
            Throwable root = t;
            while (root.getCause() != null && root.getCause() != root) {
                root = root.getCause();
            }
            StringWriter trace = new StringWriter();
            t.printStackTrace(new PrintWriter(trace));
            emit(
                    Json.obj(
                            "end", "error",
                            "error", root.getClass().getSimpleName(),
                            "class", root.getClass().getName(),
                            "message", String.valueOf(root.getMessage()),
                            "trace", trace.toString()));
            return false;
        }
    }

    private void dispatch(String command, Args a) throws Exception {
        switch (command) {
            case "create-topics" -> createTopics(a);
            case "delete-topics" -> deleteTopics(a);
            case "list-topics" -> listTopics(a);
            case "describe-topics" -> describeTopics(a);
            case "describe-configs" -> describeConfigs(a);
            case "alter-configs" -> alterConfigs(a);
            case "create-partitions" -> admin(a)
                    .createPartitions(
                            Map.of(a.str("topic"), NewPartitions.increaseTo(a.integer("total"))))
                    .all()
                    .get();
            case "delete-records" -> deleteRecords(a);
            case "list-offsets" -> listOffsets(a);
            case "describe-cluster" -> describeCluster(a);
            case "describe-features" -> describeFeatures(a);
            case "create-token" -> createToken(a);
            case "describe-tokens" -> describeTokens(a);
            case "renew-token" -> emit(Json.obj("expiry", admin(a).renewDelegationToken(
                    Base64.getDecoder().decode(a.str("hmac")),
                    new RenewDelegationTokenOptions().renewTimePeriodMs(a.lng("period-ms", -1)))
                    .expiryTimestamp().get()));
            case "expire-token" -> emit(Json.obj("expiry", admin(a).expireDelegationToken(
                    Base64.getDecoder().decode(a.str("hmac")),
                    new ExpireDelegationTokenOptions().expiryTimePeriodMs(a.lng("period-ms", -1)))
                    .expiryTimestamp().get()));
            case "describe-quorum" -> describeQuorum(a);
            case "update-features" -> updateFeatures(a);
            case "add-raft-voter" -> admin(a)
                    .addRaftVoter(
                            a.integer("id"),
                            Uuid.randomUuid(),
                            Set.of(new RaftVoterEndpoint(
                                    "CONTROLLER", a.str("host", "127.0.0.1"), a.integer("port", 9093))))
                    .all()
                    .get();
            case "remove-raft-voter" -> admin(a)
                    .removeRaftVoter(a.integer("id"), Uuid.randomUuid())
                    .all()
                    .get();
            case "unregister-broker" -> admin(a).unregisterBroker(a.integer("id", -1)).all().get();
            case "describe-acls" -> emit(
                    Json.obj("count", admin(a).describeAcls(AclBindingFilter.ANY).values().get().size()));
            case "elect-leaders" -> electLeaders(a);
            case "describe-quotas" -> emit(Json.obj(
                    "count", admin(a).describeClientQuotas(ClientQuotaFilter.all()).entities().get().size()));
            case "list-reassignments" -> listReassignments(a);
            case "reassign" -> reassign(a);
            case "list-groups" -> listGroups(a);
            case "describe-groups" -> describeGroups(a);
            case "list-group-offsets" -> listGroupOffsets(a);
            case "describe-producers" -> describeProducers(a);
            case "alter-group-offsets" -> admin(a)
                    .alterConsumerGroupOffsets(a.str("group"), parseOffsets(a.str("offsets")))
                    .all()
                    .get();
            case "delete-group-offsets" -> admin(a)
                    .deleteConsumerGroupOffsets(
                            a.str("group"), new HashSet<>(partitionsOf(a)))
                    .all()
                    .get();
            case "list-transactions" -> listTransactions(a);
            case "describe-transactions" -> describeTransactions(a);
            case "describe-log-dirs" -> describeLogDirs(a);
            case "delete-groups" -> admin(a).deleteConsumerGroups(a.list("groups")).all().get();
            case "produce" -> produce(a);
            case "producer-open" -> producers.put(a.str("name"), newProducer(a));
            case "txn" -> transaction(a);
            case "consumer-open" -> consumers.put(a.str("name"), newConsumer(a));
            case "subscribe" -> subscribe(consumer(a), a);
            case "assign" -> assign(consumer(a), a);
            case "poll" -> poll(consumer(a), a);
            case "commit" -> commit(consumer(a), a);
            case "group-metadata" -> groupMetadata(consumer(a));
            case "consume" -> consume(a);
            case "offsets" -> consumerOffsets(a);
            case "close" -> close(a.str("name"));
            case "close-all" -> closeClients();
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
    }

    // ---------------------------------------------------------------- admin

    private Admin admin(Args a) {
        String bootstrap = a.str("bootstrap");
        return admins.computeIfAbsent(
                bootstrap,
                b -> {
                    Properties props = new Properties();
                    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, b);
                    props.put(AdminClientConfig.CLIENT_ID_CONFIG, "kbroker-compat-java-admin");
                    props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
                    props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
                    props.putAll(a.props("admin"));
                    return Admin.create(props);
                });
    }

    private void createTopics(Args a) throws Exception {
        List<NewTopic> topics = new ArrayList<>();
        for (String name : a.list("topics")) {
            NewTopic topic =
                    new NewTopic(name, a.integer("partitions", 1), (short) a.integer("rf", 1));
            topic.configs(a.props("config"));
            topics.add(topic);
        }
        CreateTopicsOptions options =
                new CreateTopicsOptions().validateOnly(a.bool("validate-only", false));
        CreateTopicsResult result = admin(a).createTopics(topics, options);
        result.all().get();
        Map<String, Object> created = new LinkedHashMap<>();
        for (NewTopic topic : topics) {
            String name = topic.name();
            Map<String, Object> configs = new TreeMap<>();
            for (ConfigEntry entry : result.config(name).get().entries()) {
                configs.put(entry.name(), entry.value());
            }
            created.put(
                    name,
                    Json.obj(
                            "partitions", result.numPartitions(name).get(),
                            "rf", result.replicationFactor(name).get(),
                            "topicId", result.topicId(name).get().toString(),
                            "configs", configs));
        }
        emit(Json.obj("created", created));
    }

    /** By name ({@code topics=}) or by topic id ({@code ids=}). */
    private void deleteTopics(Args a) throws Exception {
        if (a.has("ids")) {
            List<Uuid> ids = new ArrayList<>();
            a.list("ids").forEach(id -> ids.add(Uuid.fromString(id)));
            admin(a).deleteTopics(TopicCollection.ofTopicIds(ids)).all().get();
        } else {
            admin(a).deleteTopics(a.list("topics")).all().get();
        }
    }

    private void listTopics(Args a) throws Exception {
        ListTopicsOptions options = new ListTopicsOptions().listInternal(a.bool("internal", false));
        emit(Json.obj("topics", new TreeMap<>(admin(a).listTopics(options).namesToListings().get()).keySet()));
    }

    /** By name ({@code topics=}) or by topic id ({@code ids=}, base64 as Kafka prints them). */
    private void describeTopics(Args a) throws Exception {
        Map<String, TopicDescription> found = new LinkedHashMap<>();
        if (a.has("ids")) {
            List<Uuid> ids = new ArrayList<>();
            a.list("ids").forEach(id -> ids.add(Uuid.fromString(id)));
            admin(a)
                    .describeTopics(TopicCollection.ofTopicIds(ids))
                    .allTopicIds()
                    .get()
                    .values()
                    .forEach(d -> found.put(d.name(), d));
        } else {
            found.putAll(admin(a).describeTopics(a.list("topics")).allTopicNames().get());
        }
        Map<String, Object> topics = new LinkedHashMap<>();
        for (TopicDescription d : found.values()) {
            List<Object> partitions = new ArrayList<>();
            for (TopicPartitionInfo p : d.partitions()) {
                partitions.add(
                        Json.obj(
                                "partition", p.partition(),
                                "leader", p.leader() == null ? null : p.leader().id(),
                                "replicas", nodeIds(p.replicas()),
                                "isr", nodeIds(p.isr()),
                                "elr", p.elr() == null ? null : nodeIds(p.elr()),
                                "lastKnownElr",
                                p.lastKnownElr() == null ? null : nodeIds(p.lastKnownElr())));
            }
            topics.put(
                    d.name(),
                    Json.obj(
                            "name", d.name(),
                            "topicId", d.topicId().toString(),
                            "internal", d.isInternal(),
                            "partitions", partitions));
        }
        emit(Json.obj("topics", topics));
    }

    private static List<Integer> nodeIds(List<Node> nodes) {
        List<Integer> ids = new ArrayList<>();
        for (Node n : nodes) {
            ids.add(n.id());
        }
        return ids;
    }

    private static ConfigResource resource(Args a) {
        if (a.has("topic")) {
            return new ConfigResource(ConfigResource.Type.TOPIC, a.str("topic"));
        }
        return new ConfigResource(ConfigResource.Type.BROKER, a.str("broker"));
    }

    private void describeConfigs(Args a) throws Exception {
        ConfigResource resource = resource(a);
        DescribeConfigsOptions options =
                new DescribeConfigsOptions()
                        .includeSynonyms(a.bool("synonyms", false))
                        .includeDocumentation(a.bool("documentation", false));
        Config config = admin(a).describeConfigs(List.of(resource), options).all().get().get(resource);
        Map<String, Object> entries = new TreeMap<>();
        for (ConfigEntry e : config.entries()) {
            List<Object> synonyms = new ArrayList<>();
            for (ConfigEntry.ConfigSynonym s : e.synonyms()) {
                synonyms.add(Json.obj("name", s.name(), "value", s.value(), "source", s.source()));
            }
            entries.put(
                    e.name(),
                    Json.obj(
                            "value", e.value(),
                            "source", e.source(),
                            "default", e.isDefault(),
                            "readOnly", e.isReadOnly(),
                            "sensitive", e.isSensitive(),
                            "type", e.type(),
                            "synonyms", synonyms));
        }
        emit(Json.obj("configs", entries));
    }

    private void alterConfigs(Args a) throws Exception {
        List<AlterConfigOp> ops = new ArrayList<>();
        a.props("set").forEach((k, v) -> ops.add(op(k, v, AlterConfigOp.OpType.SET)));
        a.props("append").forEach((k, v) -> ops.add(op(k, v, AlterConfigOp.OpType.APPEND)));
        a.props("subtract").forEach((k, v) -> ops.add(op(k, v, AlterConfigOp.OpType.SUBTRACT)));
        for (String name : a.list("delete", List.of())) {
            ops.add(op(name, null, AlterConfigOp.OpType.DELETE));
        }
        AlterConfigsOptions options =
                new AlterConfigsOptions().validateOnly(a.bool("validate-only", false));
        admin(a).incrementalAlterConfigs(Map.of(resource(a), ops), options).all().get();
    }

    private static AlterConfigOp op(String name, String value, AlterConfigOp.OpType type) {
        return new AlterConfigOp(new ConfigEntry(name, value), type);
    }

    private void deleteRecords(Args a) throws Exception {
        TopicPartition tp = new TopicPartition(a.str("topic"), a.integer("partition", 0));
        long low =
                admin(a)
                        .deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(a.lng("before"))))
                        .lowWatermarks()
                        .get(tp)
                        .get()
                        .lowWatermark();
        emit(Json.obj("lowWatermark", low));
    }

    private static OffsetSpec offsetSpec(String spec) {
        if (spec.startsWith("timestamp:")) {
            return OffsetSpec.forTimestamp(Long.parseLong(spec.substring("timestamp:".length())));
        }
        return switch (spec) {
            case "earliest" -> OffsetSpec.earliest();
            case "latest" -> OffsetSpec.latest();
            case "max-timestamp" -> OffsetSpec.maxTimestamp();
            default -> throw new IllegalArgumentException("unknown offset spec " + spec);
        };
    }

    private void listOffsets(Args a) throws Exception {
        Map<TopicPartition, OffsetSpec> request = new LinkedHashMap<>();
        for (TopicPartition tp : partitionsOf(a)) {
            request.put(tp, offsetSpec(a.str("spec")));
        }
        IsolationLevel isolation =
                IsolationLevel.valueOf(a.str("isolation", "read_uncommitted").toUpperCase());
        Map<TopicPartition, ListOffsetsResultInfo> found =
                admin(a).listOffsets(request, new ListOffsetsOptions(isolation)).all().get();
        Map<String, Object> offsets = new TreeMap<>();
        found.forEach(
                (tp, info) ->
                        offsets.put(
                                key(tp),
                                Json.obj(
                                        "offset", info.offset(),
                                        "timestamp", info.timestamp(),
                                        "leaderEpoch", info.leaderEpoch())));
        emit(Json.obj("offsets", offsets));
    }

    /** The partitions a command names: {@code partitions=0,2} of {@code topic}, else all. */
    private List<TopicPartition> partitionsOf(Args a) throws Exception {
        String topic = a.str("topic");
        List<TopicPartition> tps = new ArrayList<>();
        if (a.has("partitions")) {
            for (String p : a.list("partitions")) {
                tps.add(new TopicPartition(topic, Integer.parseInt(p)));
            }
            return tps;
        }
        TopicDescription d = admin(a).describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        for (TopicPartitionInfo p : d.partitions()) {
            tps.add(new TopicPartition(topic, p.partition()));
        }
        return tps;
    }

    private void describeCluster(Args a) throws Exception {
        DescribeClusterResult result = admin(a).describeCluster();
        List<Object> nodes = new ArrayList<>();
        for (Node n : result.nodes().get()) {
            nodes.add(node(n));
        }
        emit(
                Json.obj(
                        "clusterId", result.clusterId().get(),
                        "controller", node(result.controller().get()),
                        "nodes", nodes));
    }

    /** Admin.describeMetadataQuorum: the leader's view, as kafka-metadata-quorum shows it. */
    private void describeQuorum(Args a) throws Exception {
        QuorumInfo q = admin(a).describeMetadataQuorum().quorumInfo().get();
        Map<String, Object> nodes = new TreeMap<>();
        q.nodes().forEach((id, n) -> {
            List<Object> endpoints = new ArrayList<>();
            for (RaftVoterEndpoint e : n.endpoints()) {
                endpoints.add(Json.obj("name", e.name(), "host", e.host(), "port", e.port()));
            }
            nodes.put(String.valueOf(id), endpoints);
        });
        emit(Json.obj(
                "leaderId", q.leaderId(),
                "leaderEpoch", q.leaderEpoch(),
                "highWatermark", q.highWatermark(),
                "voters", replicaStates(q.voters()),
                "observers", replicaStates(q.observers()),
                "nodes", nodes));
    }

    private static List<Object> replicaStates(List<QuorumInfo.ReplicaState> states) {
        List<Object> out = new ArrayList<>();
        for (QuorumInfo.ReplicaState r : states) {
            out.add(Json.obj(
                    "replicaId", r.replicaId(),
                    "logEndOffset", r.logEndOffset(),
                    "lastFetchTimestamp", r.lastFetchTimestamp(),
                    "lastCaughtUpTimestamp", r.lastCaughtUpTimestamp()));
        }
        return out;
    }

    /** Admin.updateFeatures: feature.NAME=LEVEL, type=upgrade|safe-downgrade|unsafe-downgrade. */
    private void updateFeatures(Args a) throws Exception {
        FeatureUpdate.UpgradeType type =
                switch (a.str("type", "upgrade")) {
                    case "safe-downgrade" -> FeatureUpdate.UpgradeType.SAFE_DOWNGRADE;
                    case "unsafe-downgrade" -> FeatureUpdate.UpgradeType.UNSAFE_DOWNGRADE;
                    default -> FeatureUpdate.UpgradeType.UPGRADE;
                };
        Map<String, FeatureUpdate> updates = new TreeMap<>();
        a.props("feature").forEach((name, level) -> updates.put(
                name, new FeatureUpdate(Short.parseShort(level), type)));
        UpdateFeaturesOptions options =
                new UpdateFeaturesOptions().validateOnly(a.bool("validate-only", false));
        admin(a).updateFeatures(updates, options).all().get();
    }

    /** Admin.describeFeatures: {finalized: {name: [min, max]}, supported: {...}, epoch}. */
    private void describeFeatures(Args a) throws Exception {
        FeatureMetadata features = admin(a).describeFeatures().featureMetadata().get();
        Map<String, Object> finalized = new TreeMap<>();
        features.finalizedFeatures().forEach((name, range) -> finalized.put(
                name, List.of((int) range.minVersionLevel(), (int) range.maxVersionLevel())));
        Map<String, Object> supported = new TreeMap<>();
        features.supportedFeatures().forEach((name, range) -> supported.put(
                name, List.of((int) range.minVersion(), (int) range.maxVersion())));
        emit(Json.obj(
                "finalized", finalized,
                "supported", supported,
                "epoch", features.finalizedFeaturesEpoch().orElse(-1L)));
    }

    private static Map<String, Object> tokenJson(DelegationToken token) {
        TokenInformation info = token.tokenInfo();
        List<String> renewers = new ArrayList<>();
        info.renewers().forEach(r -> renewers.add(r.toString()));
        return Json.obj(
                "token-id", info.tokenId(),
                "hmac", token.hmacAsBase64String(),
                "owner", info.owner().toString(),
                "requester", info.tokenRequester().toString(),
                "renewers", renewers,
                "issue", info.issueTimestamp(),
                "expiry", info.expiryTimestamp(),
                "max", info.maxTimestamp());
    }

    private void createToken(Args a) throws Exception {
        // The broker's delegation.token.max.lifetime.ms (the option's setter is named
        // differently in kafka-clients 3.9 and 4.x).
        CreateDelegationTokenOptions options = new CreateDelegationTokenOptions();
        if (a.has("owner")) {
            options.owner(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, a.str("owner")));
        }
        List<KafkaPrincipal> renewers = new ArrayList<>();
        for (String name : a.list("renewers", List.of())) {
            renewers.add(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, name));
        }
        options.renewers(renewers);
        emit(tokenJson(admin(a).createDelegationToken(options).delegationToken().get()));
    }

    private void describeTokens(Args a) throws Exception {
        DescribeDelegationTokenOptions options = new DescribeDelegationTokenOptions();
        if (a.has("owners")) {
            List<KafkaPrincipal> owners = new ArrayList<>();
            for (String name : a.list("owners")) {
                owners.add(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, name));
            }
            options.owners(owners);
        }
        List<Object> tokens = new ArrayList<>();
        for (DelegationToken token : admin(a).describeDelegationToken(options).delegationTokens().get()) {
            tokens.add(tokenJson(token));
        }
        emit(Json.obj("tokens", tokens));
    }

    private void electLeaders(Args a) throws Exception {
        Set<TopicPartition> partitions = new HashSet<>();
        for (String p : a.list("partitions")) {
            partitions.add(new TopicPartition(a.str("topic"), Integer.parseInt(p)));
        }
        Map<String, Object> outcomes = new TreeMap<>();
        admin(a).electLeaders(ElectionType.PREFERRED, partitions).partitions().get().forEach(
                (tp, error) -> outcomes.put(
                        String.valueOf(tp.partition()),
                        error.map(e -> e.getClass().getSimpleName()).orElse("none")));
        emit(Json.obj("partitions", outcomes));
    }

    /** topic, partition, replicas (comma-separated; "none" cancels the move in flight). */
    private void reassign(Args a) throws Exception {
        TopicPartition tp = new TopicPartition(a.str("topic"), a.integer("partition"));
        Optional<NewPartitionReassignment> target = Optional.empty();
        if (!a.str("replicas").equals("none")) {
            List<Integer> replicas = new ArrayList<>();
            for (String r : a.list("replicas")) {
                replicas.add(Integer.parseInt(r));
            }
            target = Optional.of(new NewPartitionReassignment(replicas));
        }
        admin(a).alterPartitionReassignments(Map.of(tp, target)).all().get();
    }

    private void listReassignments(Args a) throws Exception {
        Map<String, Object> moves = new TreeMap<>();
        admin(a).listPartitionReassignments().reassignments().get().forEach(
                (tp, r) -> moves.put(
                        tp.topic() + "-" + tp.partition(),
                        Json.obj(
                                "replicas", r.replicas(),
                                "adding", r.addingReplicas(),
                                "removing", r.removingReplicas())));
        emit(Json.obj("count", moves.size(), "reassignments", moves));
    }

    private static Object node(Node n) {
        if (n == null) {
            return null;
        }
        return Json.obj("id", n.id(), "host", n.host(), "port", n.port(), "rack", n.rack());
    }

    private void listGroups(Args a) throws Exception {
        List<Object> groups = new ArrayList<>();
        for (ConsumerGroupListing g : admin(a).listConsumerGroups().all().get()) {
            groups.add(
                    Json.obj(
                            "groupId", g.groupId(),
                            "simple", g.isSimpleConsumerGroup(),
                            "state", g.state(),
                            "type", g.type()));
        }
        emit(Json.obj("groups", groups));
    }

    private void describeGroups(Args a) throws Exception {
        Map<String, ConsumerGroupDescription> found =
                admin(a).describeConsumerGroups(a.list("groups")).all().get();
        Map<String, Object> groups = new LinkedHashMap<>();
        for (ConsumerGroupDescription g : found.values()) {
            List<Object> members = new ArrayList<>();
            for (MemberDescription m : g.members()) {
                List<String> assigned = new ArrayList<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    assigned.add(key(tp));
                }
                assigned.sort(null);
                members.add(
                        Json.obj(
                                "memberId", m.consumerId(),
                                "instanceId", m.groupInstanceId(),
                                "clientId", m.clientId(),
                                "host", m.host(),
                                "assignment", assigned));
            }
            groups.put(
                    g.groupId(),
                    Json.obj(
                            "groupId", g.groupId(),
                            "simple", g.isSimpleConsumerGroup(),
                            "state", g.state(),
                            "type", g.type(),
                            "assignor", g.partitionAssignor(),
                            "coordinator", node(g.coordinator()),
                            "members", members));
        }
        emit(Json.obj("groups", groups));
    }

    private void listGroupOffsets(Args a) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> found =
                admin(a)
                        .listConsumerGroupOffsets(a.str("group"))
                        .partitionsToOffsetAndMetadata()
                        .get();
        emit(Json.obj("offsets", offsetsJson(found)));
    }

    private static Map<String, Object> offsetsJson(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Object> out = new TreeMap<>();
        offsets.forEach(
                (tp, om) ->
                        out.put(
                                key(tp),
                                om == null
                                        ? null
                                        : Json.obj(
                                                "offset", om.offset(),
                                                "metadata", om.metadata(),
                                                "leaderEpoch", om.leaderEpoch())));
        return out;
    }

    private void describeProducers(Args a) throws Exception {
        List<TopicPartition> tps = partitionsOf(a);
        Map<String, Object> found = new TreeMap<>();
        admin(a)
                .describeProducers(tps)
                .all()
                .get()
                .forEach(
                        (tp, state) -> {
                            List<Object> active = new ArrayList<>();
                            for (ProducerState p : state.activeProducers()) {
                                active.add(
                                        Json.obj(
                                                "producerId", p.producerId(),
                                                "producerEpoch", p.producerEpoch(),
                                                "lastSequence", p.lastSequence(),
                                                "lastTimestamp", p.lastTimestamp(),
                                                "txnStartOffset",
                                                        p.currentTransactionStartOffset()));
                            }
                            found.put(key(tp), active);
                        });
        emit(Json.obj("producers", found));
    }

    private void listTransactions(Args a) throws Exception {
        List<Object> listed = new ArrayList<>();
        for (TransactionListing t : admin(a).listTransactions().all().get()) {
            listed.add(
                    Json.obj(
                            "transactionalId", t.transactionalId(),
                            "producerId", t.producerId(),
                            "state", t.state()));
        }
        emit(Json.obj("transactions", listed));
    }

    private void describeTransactions(Args a) throws Exception {
        Map<String, Object> described = new TreeMap<>();
        admin(a)
                .describeTransactions(a.list("ids"))
                .all()
                .get()
                .forEach(
                        (id, t) -> {
                            List<String> partitions = new ArrayList<>();
                            t.topicPartitions().forEach(tp -> partitions.add(key(tp)));
                            partitions.sort(null);
                            described.put(
                                    id,
                                    Json.obj(
                                            "coordinatorId", t.coordinatorId(),
                                            "state", t.state(),
                                            "producerId", t.producerId(),
                                            "producerEpoch", t.producerEpoch(),
                                            "timeoutMs", t.transactionTimeoutMs(),
                                            "startTimeMs", t.transactionStartTimeMs(),
                                            "partitions", partitions));
                        });
        emit(Json.obj("transactions", described));
    }

    private void describeLogDirs(Args a) throws Exception {
        List<Integer> brokers = new ArrayList<>();
        a.list("brokers").forEach(b -> brokers.add(Integer.parseInt(b)));
        Map<String, Object> found = new TreeMap<>();
        Map<Integer, Map<String, LogDirDescription>> all =
                admin(a).describeLogDirs(brokers).allDescriptions().get();
        for (Map.Entry<Integer, Map<String, LogDirDescription>> broker : all.entrySet()) {
            for (Map.Entry<String, LogDirDescription> dir : broker.getValue().entrySet()) {
                LogDirDescription d = dir.getValue();
                Map<String, Object> replicas = new TreeMap<>();
                d.replicaInfos()
                        .forEach(
                                (tp, r) ->
                                        replicas.put(
                                                key(tp),
                                                Json.obj("size", r.size(), "offsetLag", r.offsetLag())));
                found.put(
                        broker.getKey() + ":" + dir.getKey(),
                        Json.obj(
                                "error", d.error() == null ? null : d.error().toString(),
                                "totalBytes", d.totalBytes(),
                                "usableBytes", d.usableBytes(),
                                "replicas", replicas));
            }
        }
        emit(Json.obj("logDirs", found));
    }

    // ---------------------------------------------------------------- producer

    private KafkaProducer<String, String> newProducer(Args a) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, a.str("bootstrap"));
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        // Bounds the metadata wait of send() only; every other setting is the client's default.
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        props.putAll(a.props("producer"));
        return new KafkaProducer<>(props);
    }

    private KafkaProducer<String, String> producer(Args a) {
        KafkaProducer<String, String> p = producers.get(a.str("name"));
        if (p == null) {
            throw new IllegalArgumentException("no producer named " + a.str("name"));
        }
        return p;
    }

    /**
     * Sends {@code count} records: key {@code <key-prefix>i} (none without a prefix), value
     * {@code <value-prefix>i} plus {@code value-pad} x's, or null for every {@code
     * null-every}-th; headers (with {@code headers=true}) idx=i, dup=a, dup=b and a null-valued
     * one; timestamps {@code timestamp-base + i * timestamp-step} when a base is given.
     */
    private void produce(Args a) throws Exception {
        boolean shared = a.has("producer");
        KafkaProducer<String, String> producer =
                shared ? producers.get(a.str("producer")) : newProducer(a);
        if (producer == null) {
            throw new IllegalArgumentException("no producer named " + a.str("producer"));
        }
        try {
            String topic = a.str("topic");
            Integer partition = a.has("partition") ? a.integer("partition") : null;
            int count = a.integer("count");
            String keyPrefix = a.str("key-prefix", null);
            String valuePrefix = a.str("value-prefix", "v");
            String pad = "x".repeat(a.integer("value-pad", 0));
            int nullEvery = a.integer("null-every", 0);
            boolean headers = a.bool("headers", false);
            Long tsBase = a.has("timestamp-base") ? a.lng("timestamp-base") : null;
            long tsStep = a.lng("timestamp-step", 1);
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                String key = keyPrefix == null ? null : keyPrefix + i;
                String value = nullEvery > 0 && i % nullEvery == 0 ? null : valuePrefix + i + pad;
                RecordHeaders h = new RecordHeaders();
                if (headers) {
                    h.add("idx", String.valueOf(i).getBytes(StandardCharsets.UTF_8));
                    h.add("dup", "a".getBytes(StandardCharsets.UTF_8));
                    h.add("dup", "b".getBytes(StandardCharsets.UTF_8));
                    h.add("nul", null);
                }
                Long ts = tsBase == null ? null : tsBase + i * tsStep;
                futures.add(producer.send(new ProducerRecord<>(topic, partition, ts, key, value, h)));
            }
            if (a.bool("flush", true)) {
                producer.flush();
            }
            List<Object> sent = new ArrayList<>();
            long deadline = System.currentTimeMillis() + a.lng("wait-ms", 30000);
            for (Future<RecordMetadata> f : futures) {
                long left = Math.max(1, deadline - System.currentTimeMillis());
                RecordMetadata md = f.get(left, TimeUnit.MILLISECONDS);
                sent.add(List.of(md.partition(), md.offset(), md.timestamp()));
            }
            emit(Json.obj("sent", sent));
        } finally {
            if (!shared) {
                producer.close(Duration.ofSeconds(10));
            }
        }
    }

    private void transaction(Args a) throws Exception {
        KafkaProducer<String, String> producer = producer(a);
        switch (a.str("action")) {
            case "init" -> producer.initTransactions();
            case "begin" -> producer.beginTransaction();
            case "commit" -> producer.commitTransaction();
            case "abort" -> producer.abortTransaction();
            case "send-offsets" -> {
                if (a.has("consumer")) {
                    KafkaConsumer<String, String> c = consumers.get(a.str("consumer"));
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (TopicPartition tp : c.assignment()) {
                        offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
                    }
                    producer.sendOffsetsToTransaction(offsets, c.groupMetadata());
                    emit(Json.obj("sentOffsets", offsetsJson(offsets)));
                } else {
                    producer.sendOffsetsToTransaction(
                            parseOffsets(a.str("offsets")),
                            new ConsumerGroupMetadata(a.str("group")));
                }
            }
            default -> throw new IllegalArgumentException("unknown txn action " + a.str("action"));
        }
    }

    /** {@code topic:partition:offset,...} */
    private static Map<TopicPartition, OffsetAndMetadata> parseOffsets(String spec) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (String item : spec.split(",")) {
            int last = item.lastIndexOf(':');
            int middle = item.lastIndexOf(':', last - 1);
            offsets.put(
                    new TopicPartition(
                            item.substring(0, middle),
                            Integer.parseInt(item.substring(middle + 1, last))),
                    new OffsetAndMetadata(Long.parseLong(item.substring(last + 1))));
        }
        return offsets;
    }

    // ---------------------------------------------------------------- consumer

    private KafkaConsumer<String, String> newConsumer(Args a) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a.str("bootstrap"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        if (a.has("group")) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, a.str("group"));
        }
        props.putAll(a.props("consumer"));
        return new KafkaConsumer<>(props);
    }

    private KafkaConsumer<String, String> consumer(Args a) {
        KafkaConsumer<String, String> c = consumers.get(a.str("name"));
        if (c == null) {
            throw new IllegalArgumentException("no consumer named " + a.str("name"));
        }
        return c;
    }

    /** {@code topics=a,b}, or a regular expression as {@code pattern=}. */
    private static void subscribe(KafkaConsumer<String, String> c, Args a) {
        if (a.has("pattern")) {
            c.subscribe(Pattern.compile(a.str("pattern")));
        } else {
            c.subscribe(a.has("topics") ? a.list("topics") : List.of(a.str("topic")));
        }
    }

    private void assign(KafkaConsumer<String, String> c, Args a) {
        String topic = a.str("topic");
        List<TopicPartition> tps = new ArrayList<>();
        if (a.has("partitions")) {
            for (String p : a.list("partitions")) {
                tps.add(new TopicPartition(topic, Integer.parseInt(p)));
            }
        } else {
            for (PartitionInfo p : c.partitionsFor(topic)) {
                tps.add(new TopicPartition(topic, p.partition()));
            }
        }
        c.assign(tps);
        switch (a.str("from", "committed")) {
            case "beginning" -> c.seekToBeginning(tps);
            case "end" -> c.seekToEnd(tps);
            case "committed" -> {}
            default -> {
                long offset = Long.parseLong(a.str("from"));
                tps.forEach(tp -> c.seek(tp, offset));
            }
        }
    }

    /**
     * Polls until {@code expect} records arrived, or with {@code until-end=true} until the
     * position of every assigned partition reached its end offset (the LSO under
     * read_committed), or {@code timeout-ms} passed; then {@code extra-ms} more, to catch
     * records that should not exist. Prints each record and a summary.
     */
    private void poll(KafkaConsumer<String, String> c, Args a) {
        int expect = a.integer("expect", -1);
        boolean untilEnd = a.bool("until-end", false);
        long deadline = System.currentTimeMillis() + a.lng("timeout-ms", 20000);
        int count = 0;
        boolean reached = false;
        // Asked before the first poll when the assignment is known: once a fetch is parked on
        // the connection, the request would wait behind it (fetch.max.wait.ms).
        Map<TopicPartition, Long> ends =
                untilEnd && !c.assignment().isEmpty() ? c.endOffsets(c.assignment()) : null;
        while (System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                emit(Json.obj("record", record(r)));
                count++;
            }
            if (untilEnd) {
                Set<TopicPartition> assigned = c.assignment();
                if (ends == null && !assigned.isEmpty()) {
                    ends = c.endOffsets(assigned);
                }
                if (ends != null && reachedAll(c, ends)) {
                    reached = true;
                    break;
                }
            } else if (expect >= 0 && count >= expect) {
                reached = true;
                break;
            }
        }
        long extraEnd = System.currentTimeMillis() + a.lng("extra-ms", 0);
        while (System.currentTimeMillis() < extraEnd) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                emit(Json.obj("record", record(r)));
                count++;
            }
        }
        Map<String, Object> positions = new TreeMap<>();
        List<String> assignment = new ArrayList<>();
        for (TopicPartition tp : c.assignment()) {
            assignment.add(key(tp));
            positions.put(key(tp), c.position(tp));
        }
        assignment.sort(null);
        emit(
                Json.obj(
                        "polled", count,
                        "reached", reached,
                        "assignment", assignment,
                        "positions", positions));
    }

    private static boolean reachedAll(KafkaConsumer<String, String> c, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    private static Map<String, Object> record(ConsumerRecord<String, String> r) {
        List<Object> headers = new ArrayList<>();
        for (Header h : r.headers()) {
            headers.add(
                    Arrays.asList(
                            h.key(),
                            h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8)));
        }
        return Json.obj(
                "topic", r.topic(),
                "partition", r.partition(),
                "offset", r.offset(),
                "key", r.key(),
                "value", r.value(),
                "timestamp", r.timestamp(),
                "timestampType", r.timestampType().name,
                "leaderEpoch", r.leaderEpoch(),
                "headers", headers);
    }

    private void commit(KafkaConsumer<String, String> c, Args a) {
        if (a.has("offsets")) {
            c.commitSync(parseOffsets(a.str("offsets")));
        } else {
            c.commitSync();
        }
        emit(Json.obj("committed", offsetsJson(c.committed(c.assignment()))));
    }

    private void groupMetadata(KafkaConsumer<String, String> c) {
        ConsumerGroupMetadata m = c.groupMetadata();
        emit(
                Json.obj(
                        "groupId", m.groupId(),
                        "generationId", m.generationId(),
                        "memberId", m.memberId(),
                        "instanceId", m.groupInstanceId()));
    }

    /**
     * One consumer from open to close: {@code mode=assign} (with {@code from}) or {@code
     * mode=subscribe} in {@code group}; poll as {@link #poll}; {@code commit=true} commits
     * synchronously before closing.
     */
    private void consume(Args a) {
        try (KafkaConsumer<String, String> c = newConsumer(a)) {
            if (a.str("mode", "assign").equals("subscribe")) {
                subscribe(c, a);
            } else {
                assign(c, a);
            }
            poll(c, a);
            if (a.bool("commit", false)) {
                commit(c, a);
            }
            if (a.has("group")) {
                groupMetadata(c);
            }
        }
    }

    private void consumerOffsets(Args a) throws Exception {
        try (KafkaConsumer<String, String> c = newConsumer(a)) {
            List<TopicPartition> tps = partitionsOf(a);
            Map<String, Object> offsets = new TreeMap<>();
            switch (a.str("kind")) {
                case "beginning" -> c.beginningOffsets(tps).forEach((tp, o) -> offsets.put(key(tp), o));
                case "end" -> c.endOffsets(tps).forEach((tp, o) -> offsets.put(key(tp), o));
                case "times" -> {
                    Map<TopicPartition, Long> query = new HashMap<>();
                    tps.forEach(tp -> query.put(tp, a.lng("timestamp")));
                    Map<TopicPartition, OffsetAndTimestamp> found = c.offsetsForTimes(query);
                    found.forEach(
                            (tp, ot) ->
                                    offsets.put(
                                            key(tp),
                                            ot == null
                                                    ? null
                                                    : Json.obj(
                                                            "offset", ot.offset(),
                                                            "timestamp", ot.timestamp(),
                                                            "leaderEpoch", ot.leaderEpoch())));
                }
                default -> throw new IllegalArgumentException("unknown kind " + a.str("kind"));
            }
            emit(Json.obj("offsets", offsets));
        }
    }

    // ---------------------------------------------------------------- plumbing

    private static String key(TopicPartition tp) {
        return tp.topic() + ":" + tp.partition();
    }

    private void close(String name) {
        KafkaProducer<String, String> p = producers.remove(name);
        if (p != null) {
            p.close(Duration.ofSeconds(10));
        }
        KafkaConsumer<String, String> c = consumers.remove(name);
        if (c != null) {
            c.close(Duration.ofSeconds(10));
        }
    }

    /** Named clients, and admins of brokers other than the default one (a test's own node). */
    private void closeClients() {
        for (String name : new ArrayList<>(producers.keySet())) {
            close(name);
        }
        for (String name : new ArrayList<>(consumers.keySet())) {
            close(name);
        }
        String home = defaults.str("bootstrap", "");
        for (String bootstrap : new ArrayList<>(admins.keySet())) {
            if (!bootstrap.equals(home)) {
                admins.remove(bootstrap).close(Duration.ofSeconds(5));
            }
        }
    }

    private void closeAll() {
        closeClients();
        admins.values().forEach(admin -> admin.close(Duration.ofSeconds(5)));
        admins.clear();
    }

    private void emit(Map<String, Object> line) {
        out.println(Json.write(line));
    }

    /** {@code key=value} words; keys with a dotted prefix carry client or topic settings. */
    private record Args(Map<String, String> values) {
        static Args parse(List<String> words) {
            Map<String, String> values = new LinkedHashMap<>();
            for (String word : words) {
                int eq = word.indexOf('=');
                if (eq < 0) {
                    throw new IllegalArgumentException("expected key=value, got " + word);
                }
                values.put(word.substring(0, eq), word.substring(eq + 1));
            }
            return new Args(values);
        }

        Args with(Args more) {
            Map<String, String> merged = new LinkedHashMap<>(values);
            merged.putAll(more.values);
            return new Args(merged);
        }

        boolean has(String name) {
            return values.containsKey(name);
        }

        String str(String name) {
            String v = values.get(name);
            if (v == null) {
                throw new IllegalArgumentException("missing argument " + name);
            }
            return v;
        }

        String str(String name, String fallback) {
            return values.getOrDefault(name, fallback);
        }

        int integer(String name) {
            return Integer.parseInt(str(name));
        }

        int integer(String name, int fallback) {
            return has(name) ? integer(name) : fallback;
        }

        long lng(String name) {
            return Long.parseLong(str(name));
        }

        long lng(String name, long fallback) {
            return has(name) ? lng(name) : fallback;
        }

        boolean bool(String name, boolean fallback) {
            return has(name) ? Boolean.parseBoolean(str(name)) : fallback;
        }

        List<String> list(String name) {
            String v = str(name);
            return v.isEmpty() ? List.of() : Arrays.asList(v.split(","));
        }

        List<String> list(String name, List<String> fallback) {
            return has(name) ? list(name) : fallback;
        }

        /** Settings named {@code <prefix>.<setting>}, with the prefix taken off. */
        Map<String, String> props(String prefix) {
            Map<String, String> found = new LinkedHashMap<>();
            values.forEach(
                    (k, v) -> {
                        if (k.startsWith(prefix + ".")) {
                            found.put(k.substring(prefix.length() + 1), v);
                        }
                    });
            return found;
        }
    }
}
