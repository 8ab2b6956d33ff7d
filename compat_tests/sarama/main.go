// Command sarama-driver runs one Sarama client operation against a broker and prints
// its outcome as JSON, so the compat tests can drive the Go client from pytest.
//
// Every subcommand prints exactly one JSON object on stdout when it finishes: the
// result, or {"error": "..."} with exit status 1. The long-running "group" subcommand
// also prints one JSON line per event (assignment, record) while it runs, because the
// tests steer a group of several members by watching those events.
//
// Subcommands:
//
//	produce        sync producer: -count records, -compression, -acks, -idempotent
//	consume        partition consumer from the oldest offset until -count records
//	group          consumer-group member; marks every record, commits on SIGTERM/-count
//	offsets        committed offsets of a group (OffsetFetch through ClusterAdmin)
//	create-topic   ClusterAdmin.CreateTopic
//	describe-topic ClusterAdmin.DescribeTopics (Metadata without auto-creation)
//	delete-topic   ClusterAdmin.DeleteTopic
//	list-topics    ClusterAdmin.ListTopics
//	describe-config  ClusterAdmin.DescribeConfig, or a DescribeConfigs request of
//	               -request-version sent through a sarama.Broker
//	partitions     Client.Partitions (Metadata that may auto-create the topic)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/ioutil"
	"log"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Shopify/sarama"
)

type common struct {
	brokers string
	version string
	timeout time.Duration
	debug   bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "comma-separated bootstrap servers")
	fs.StringVar(&c.version, "version", "newest",
		"Kafka protocol version Sarama assumes: newest, default, or x.y.z")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Second, "give up after this long")
	fs.BoolVar(&c.debug, "debug", false, "Sarama's log on stderr")
}

func (c *common) addrs() []string { return strings.Split(c.brokers, ",") }

// config is Sarama's configuration for the common flags; a -version that does not
// parse fails the run.
func (c *common) config() *sarama.Config {
	if c.debug {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	} else {
		sarama.Logger = log.New(ioutil.Discard, "", 0)
	}
	cfg := sarama.NewConfig()
	cfg.ClientID = "kbroker-compat-sarama"
	switch c.version {
	case "default":
	case "newest":
		cfg.Version = sarama.MaxVersion
	default:
		v, err := sarama.ParseKafkaVersion(c.version)
		if err != nil {
			fail(err)
		}
		cfg.Version = v
	}
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.ReadTimeout = 10 * time.Second
	cfg.Net.WriteTimeout = 5 * time.Second
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	return cfg
}

// flags is a subcommand's flag set holding the flags every subcommand takes.
func flags(name string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	c := &common{}
	c.register(fs)
	return fs, c
}

// emit prints one JSON line; a mutex keeps lines whole when goroutines emit together.
var emitLock sync.Mutex

func emit(v interface{}) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"error": "encoding result: " + err.Error()})
	}
	emitLock.Lock()
	defer emitLock.Unlock()
	os.Stdout.Write(append(data, '\n'))
}

// fail reports err and exits; "error_code" is Kafka's code when Sarama kept one.
func fail(err error) {
	out := map[string]interface{}{"error": err.Error(), "error_type": fmt.Sprintf("%T", err)}
	if code, ok := errorCode(err); ok {
		out["error_code"] = code
	}
	emit(out)
	os.Exit(1)
}

func errorCode(err error) (int16, bool) {
	var k sarama.KError
	var topicErr *sarama.TopicError
	var consumerErr *sarama.ConsumerError
	var producerErrs sarama.ProducerErrors
	switch {
	case errors.As(err, &k):
		return int16(k), true
	case errors.As(err, &topicErr):
		return int16(topicErr.Err), true
	case errors.As(err, &consumerErr):
		return errorCode(consumerErr.Err)
	case errors.As(err, &producerErrs) && len(producerErrs) > 0:
		return errorCode(producerErrs[0].Err)
	}
	return 0, false
}

// bytesOrNil keeps Kafka's null apart from the empty string in JSON.
func bytesOrNil(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// kerr is Kafka's numeric error code, the one thing the tests compare.
func kerr(err sarama.KError) int16 { return int16(err) }

// ---- produce ------------------------------------------------------------------------

// The records a producer sends are derived from their index, so a consumer's output can
// be checked without passing the records around: key "key-i" (null when -null-keys and
// i%4==3), value "value-i" (null when -null-values and i%3==2), headers h=i and idx=i.
func recordKey(i int, nullKeys bool) sarama.Encoder {
	if nullKeys && i%4 == 3 {
		return nil
	}
	return sarama.StringEncoder(fmt.Sprintf("key-%d", i))
}

func recordValue(i int, nullValues bool, size int) sarama.Encoder {
	if nullValues && i%3 == 2 {
		return nil
	}
	v := fmt.Sprintf("value-%d", i)
	if len(v) < size {
		v += strings.Repeat("x", size-len(v))
	}
	return sarama.StringEncoder(v)
}

var codecs = map[string]sarama.CompressionCodec{
	"none":   sarama.CompressionNone,
	"gzip":   sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy,
	"lz4":    sarama.CompressionLZ4,
	"zstd":   sarama.CompressionZSTD,
}

func cmdProduce(args []string) {
	fs, c := flags("produce")
	topic := fs.String("topic", "", "topic")
	count := fs.Int("count", 10, "records to send")
	start := fs.Int("start", 0, "index of the first record")
	partition := fs.Int("partition", -1, "partition, or -1 to spread records round-robin")
	compression := fs.String("compression", "none", "none, gzip, snappy, lz4, zstd")
	acks := fs.Int("acks", -1, "required acks: -1, 1 or 0")
	idempotent := fs.Bool("idempotent", false, "Producer.Idempotent (forces acks=-1)")
	headers := fs.Bool("headers", false, "give every record two headers")
	nullKeys := fs.Bool("null-keys", false, "every fourth record has a null key")
	nullValues := fs.Bool("null-values", false, "every third record has a null value")
	valueSize := fs.Int("value-size", 0, "pad values to this many bytes")
	batch := fs.Int("batch", 0, "records per SendMessages call (0: all at once)")
	fs.Parse(args)

	cfg := c.config()
	codec, ok := codecs[*compression]
	if !ok {
		fail(fmt.Errorf("unknown compression %q", *compression))
	}
	cfg.Producer.Compression = codec
	cfg.Producer.RequiredAcks = sarama.RequiredAcks(*acks)
	cfg.Producer.Return.Successes = true
	cfg.Producer.Timeout = 5 * time.Second
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Producer.Flush.Messages = 1000
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	if *partition >= 0 {
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
	} else {
		cfg.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	}
	if *idempotent {
		cfg.Producer.Idempotent = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Net.MaxOpenRequests = 1
		cfg.Producer.Retry.Max = 5
	}
	producer, err := sarama.NewSyncProducer(c.addrs(), cfg)
	if err != nil {
		fail(err)
	}
	defer producer.Close()

	msgs := make([]*sarama.ProducerMessage, 0, *count)
	for i := *start; i < *start+*count; i++ {
		m := &sarama.ProducerMessage{
			Topic: *topic,
			Key:   recordKey(i, *nullKeys),
			Value: recordValue(i, *nullValues, *valueSize),
		}
		if *partition >= 0 {
			m.Partition = int32(*partition)
		}
		if *headers {
			m.Headers = []sarama.RecordHeader{
				{Key: []byte("h"), Value: []byte(strconv.Itoa(i))},
				{Key: []byte("idx"), Value: []byte(fmt.Sprintf("%06d", i))},
			}
		}
		msgs = append(msgs, m)
	}
	step := *batch
	if step <= 0 {
		step = len(msgs)
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() {
		for lo := 0; lo < len(msgs); lo += step {
			hi := lo + step
			if hi > len(msgs) {
				hi = len(msgs)
			}
			if err := producer.SendMessages(msgs[lo:hi]); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err = <-done:
	case <-time.After(c.timeout):
		fail(fmt.Errorf("produce did not finish within %s", c.timeout))
	}
	if err != nil {
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			out := map[string]interface{}{
				"error":  fmt.Sprintf("%d of %d records failed, first: %v", len(perrs), len(msgs), perrs[0].Err),
				"failed": len(perrs),
			}
			if code, ok := errorCode(perrs[0].Err); ok {
				out["error_code"] = code
			}
			emit(out)
			os.Exit(1)
		}
		fail(err)
	}
	type sent struct {
		Partition int32 `json:"partition"`
		Offset    int64 `json:"offset"`
	}
	out := make([]sent, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, sent{m.Partition, m.Offset})
	}
	emit(map[string]interface{}{
		"produced": out,
		"seconds":  time.Since(began).Seconds(),
		"version":  cfg.Version.String(),
	})
}

// ---- consume ------------------------------------------------------------------------

type consumedRecord struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       *string           `json:"key"`
	Value     *string           `json:"value"`
	Headers   map[string]string `json:"headers"`
	Timestamp int64             `json:"timestamp_ms"`
}

func toRecord(m *sarama.ConsumerMessage) consumedRecord {
	hs := map[string]string{}
	for _, h := range m.Headers {
		hs[string(h.Key)] = string(h.Value)
	}
	ts := int64(0)
	if !m.Timestamp.IsZero() {
		ts = m.Timestamp.UnixNano() / int64(time.Millisecond)
	}
	return consumedRecord{m.Partition, m.Offset, bytesOrNil(m.Key), bytesOrNil(m.Value), hs, ts}
}

func cmdConsume(args []string) {
	fs, c := flags("consume")
	topic := fs.String("topic", "", "topic")
	partition := fs.Int("partition", 0, "partition")
	offset := fs.Int64("offset", sarama.OffsetOldest, "first offset (-2 oldest, -1 newest)")
	count := fs.Int("count", 1, "stop after this many records")
	fs.Parse(args)

	cfg := c.config()
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	consumer, err := sarama.NewConsumer(c.addrs(), cfg)
	if err != nil {
		fail(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(*topic, int32(*partition), *offset)
	if err != nil {
		fail(err)
	}
	defer pc.Close()
	records := make([]consumedRecord, 0, *count)
	deadline := time.After(c.timeout)
	for len(records) < *count {
		select {
		case m := <-pc.Messages():
			records = append(records, toRecord(m))
		case cerr := <-pc.Errors():
			fail(cerr)
		case <-deadline:
			fail(fmt.Errorf("consumed %d of %d records within %s", len(records), *count, c.timeout))
		}
	}
	emit(map[string]interface{}{
		"records":        records,
		"high_watermark": pc.HighWaterMarkOffset(),
		"version":        cfg.Version.String(),
	})
}

// ---- consumer group -----------------------------------------------------------------

// member is a ConsumerGroupHandler that marks every record it sees and reports
// assignments and records as JSON lines.
type member struct {
	mu       sync.Mutex
	consumed int
	want     int
	enough   chan struct{}
	once     sync.Once
}

func (h *member) Setup(s sarama.ConsumerGroupSession) error {
	claims := map[string][]int32{}
	for t, ps := range s.Claims() {
		sorted := append([]int32(nil), ps...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		claims[t] = sorted
	}
	emit(map[string]interface{}{
		"event":      "assigned",
		"member_id":  s.MemberID(),
		"generation": s.GenerationID(),
		"claims":     claims,
	})
	return nil
}

func (h *member) Cleanup(s sarama.ConsumerGroupSession) error {
	emit(map[string]interface{}{"event": "revoked", "generation": s.GenerationID()})
	return nil
}

func (h *member) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		s.MarkMessage(m, "")
		rec := toRecord(m)
		emit(map[string]interface{}{
			"event":      "record",
			"generation": s.GenerationID(),
			"partition":  rec.Partition,
			"offset":     rec.Offset,
			"key":        rec.Key,
			"value":      rec.Value,
		})
		h.mu.Lock()
		h.consumed++
		if h.want > 0 && h.consumed >= h.want {
			h.once.Do(func() { close(h.enough) })
		}
		h.mu.Unlock()
	}
	return nil
}

func cmdGroup(args []string) {
	fs, c := flags("group")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "", "group id")
	count := fs.Int("count", 0, "leave after this many records (0: run until SIGTERM)")
	fs.Parse(args)

	cfg := c.config()
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	// With no retention set, Sarama before 1.26 commits with OffsetCommit v1, which
	// Kafka 4 no longer serves (KIP-896); a retention makes it send v2.
	cfg.Consumer.Offsets.Retention = 24 * time.Hour
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 200 * time.Millisecond
	cg, err := sarama.NewConsumerGroup(c.addrs(), *group, cfg)
	if err != nil {
		fail(err)
	}
	handler := &member{want: *count, enough: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	var groupErrs []string
	var errMu sync.Mutex
	go func() {
		for e := range cg.Errors() {
			errMu.Lock()
			groupErrs = append(groupErrs, e.Error())
			errMu.Unlock()
			emit(map[string]interface{}{"event": "error", "error": e.Error()})
		}
	}()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{*topic}, handler); err != nil {
				emit(map[string]interface{}{"event": "error", "error": err.Error()})
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	reason := ""
	select {
	case <-signals:
		reason = "signal"
	case <-handler.enough:
		reason = "count"
	case <-time.After(c.timeout):
		reason = "timeout"
	}
	cancel()
	<-stopped
	// Closing the group commits what was marked and leaves the group.
	closeErr := cg.Close()
	handler.mu.Lock()
	consumed := handler.consumed
	handler.mu.Unlock()
	result := map[string]interface{}{"event": "closed", "reason": reason, "consumed": consumed}
	if closeErr != nil {
		result["close_error"] = closeErr.Error()
	}
	emit(result)
	if reason == "timeout" {
		os.Exit(1)
	}
}

func cmdOffsets(args []string) {
	fs, c := flags("offsets")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "", "group id")
	partitions := fs.Int("partitions", 1, "partitions 0..n-1 to ask about")
	fs.Parse(args)
	admin := newAdmin(c)
	defer admin.Close()
	ps := make([]int32, *partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	resp, err := admin.ListConsumerGroupOffsets(*group, map[string][]int32{*topic: ps})
	if err != nil {
		fail(err)
	}
	out := map[string]interface{}{}
	for p, block := range resp.Blocks[*topic] {
		out[strconv.Itoa(int(p))] = map[string]interface{}{
			"offset": block.Offset, "metadata": block.Metadata, "error": kerr(block.Err),
		}
	}
	emit(map[string]interface{}{"offsets": out, "error_code": int16(resp.Err)})
}

// ---- admin --------------------------------------------------------------------------

type configFlags map[string]string

func (f configFlags) String() string { return fmt.Sprint(map[string]string(f)) }
func (f configFlags) Set(s string) error {
	kv := strings.SplitN(s, "=", 2)
	if len(kv) != 2 {
		return fmt.Errorf("want name=value, got %q", s)
	}
	f[kv[0]] = kv[1]
	return nil
}

func newAdmin(c *common) sarama.ClusterAdmin {
	admin, err := sarama.NewClusterAdmin(c.addrs(), c.config())
	if err != nil {
		fail(err)
	}
	return admin
}

func cmdCreateTopic(args []string) {
	fs, c := flags("create-topic")
	topic := fs.String("topic", "", "topic")
	partitions := fs.Int("partitions", 1, "partitions")
	replication := fs.Int("replication", 1, "replication factor")
	validateOnly := fs.Bool("validate-only", false, "validate only")
	configs := configFlags{}
	fs.Var(configs, "config", "topic config name=value (repeatable)")
	fs.Parse(args)
	admin := newAdmin(c)
	defer admin.Close()
	entries := map[string]*string{}
	for k, v := range configs {
		v := v
		entries[k] = &v
	}
	detail := &sarama.TopicDetail{
		NumPartitions:     int32(*partitions),
		ReplicationFactor: int16(*replication),
		ConfigEntries:     entries,
	}
	if err := admin.CreateTopic(*topic, detail, *validateOnly); err != nil {
		fail(err)
	}
	emit(map[string]interface{}{"created": *topic})
}

func describeTopics(admin sarama.ClusterAdmin, topics []string) []map[string]interface{} {
	metas, err := admin.DescribeTopics(topics)
	if err != nil {
		fail(err)
	}
	out := []map[string]interface{}{}
	for _, tm := range metas {
		parts := []map[string]interface{}{}
		for _, p := range tm.Partitions {
			parts = append(parts, map[string]interface{}{
				"id": p.ID, "leader": p.Leader, "replicas": p.Replicas, "isr": p.Isr,
				"error": kerr(p.Err),
			})
		}
		sort.Slice(parts, func(i, j int) bool {
			return parts[i]["id"].(int32) < parts[j]["id"].(int32)
		})
		out = append(out, map[string]interface{}{
			"name": tm.Name, "internal": tm.IsInternal, "error": kerr(tm.Err),
			"partitions": parts,
		})
	}
	return out
}

func cmdDescribeTopic(args []string) {
	fs, c := flags("describe-topic")
	topic := fs.String("topic", "", "topic")
	fs.Parse(args)
	admin := newAdmin(c)
	defer admin.Close()
	emit(map[string]interface{}{"topics": describeTopics(admin, []string{*topic})})
}

func cmdDeleteTopic(args []string) {
	fs, c := flags("delete-topic")
	topic := fs.String("topic", "", "topic")
	fs.Parse(args)
	admin := newAdmin(c)
	defer admin.Close()
	if err := admin.DeleteTopic(*topic); err != nil {
		fail(err)
	}
	emit(map[string]interface{}{"deleted": *topic})
}

func cmdListTopics(args []string) {
	fs, c := flags("list-topics")
	fs.Parse(args)
	admin := newAdmin(c)
	defer admin.Close()
	topics, err := admin.ListTopics()
	if err != nil {
		fail(err)
	}
	out := map[string]interface{}{}
	for name, d := range topics {
		out[name] = map[string]interface{}{
			"partitions": d.NumPartitions, "replication": d.ReplicationFactor,
		}
	}
	emit(map[string]interface{}{"topics": out})
}

func cmdDescribeConfig(args []string) {
	fs, c := flags("describe-config")
	topic := fs.String("topic", "", "topic")
	requestVersion := fs.Int("request-version", -1,
		"send DescribeConfigs of this version through a sarama.Broker (-1: ClusterAdmin)")
	fs.Parse(args)
	resource := sarama.ConfigResource{Type: sarama.TopicResource, Name: *topic}
	var entries []sarama.ConfigEntry
	if *requestVersion < 0 {
		admin := newAdmin(c)
		defer admin.Close()
		got, err := admin.DescribeConfig(resource)
		if err != nil {
			fail(err)
		}
		entries = got
	} else {
		cfg := c.config()
		client, err := sarama.NewClient(c.addrs(), cfg)
		if err != nil {
			fail(err)
		}
		defer client.Close()
		b, err := client.Controller()
		if err != nil {
			fail(err)
		}
		resp, err := b.DescribeConfigs(&sarama.DescribeConfigsRequest{
			Version:   int16(*requestVersion),
			Resources: []*sarama.ConfigResource{&resource},
		})
		if err != nil {
			fail(err)
		}
		for _, r := range resp.Resources {
			if r.ErrorCode != 0 {
				fail(fmt.Errorf("resource %s: error %d: %s", r.Name, r.ErrorCode, r.ErrorMsg))
			}
			for _, e := range r.Configs {
				entries = append(entries, *e)
			}
		}
	}
	out := map[string]interface{}{}
	for _, e := range entries {
		out[e.Name] = map[string]interface{}{
			"value": e.Value, "read_only": e.ReadOnly, "default": e.Default,
			"source": int8(e.Source), "sensitive": e.Sensitive,
		}
	}
	emit(map[string]interface{}{"configs": out})
}

func cmdPartitions(args []string) {
	fs, c := flags("partitions")
	topic := fs.String("topic", "", "topic")
	fs.Parse(args)
	cfg := c.config()
	cfg.Metadata.Retry.Max = 1
	client, err := sarama.NewClient(c.addrs(), cfg)
	if err != nil {
		fail(err)
	}
	defer client.Close()
	ps, err := client.Partitions(*topic)
	if err != nil {
		fail(err)
	}
	emit(map[string]interface{}{"partitions": ps})
}

func main() {
	commands := map[string]func([]string){
		"produce":         cmdProduce,
		"consume":         cmdConsume,
		"group":           cmdGroup,
		"offsets":         cmdOffsets,
		"create-topic":    cmdCreateTopic,
		"describe-topic":  cmdDescribeTopic,
		"delete-topic":    cmdDeleteTopic,
		"list-topics":     cmdListTopics,
		"describe-config": cmdDescribeConfig,
		"partitions":      cmdPartitions,
	}
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: %s {%s} [flags]\n", os.Args[0], strings.Join(names, "|"))
		os.Exit(2)
	}
	commands[os.Args[1]](os.Args[2:])
}
