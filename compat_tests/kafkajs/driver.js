// KafkaJS against kbroker: one operation per run, named by a JSON argument; results and
// events are JSON lines on stdout, the client's own log lines go to stderr.
'use strict'

const { Kafka, CompressionTypes, Partitioners, logLevel } = require('kafkajs')

const spec = JSON.parse(process.argv[2])

function print(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function stderrLog() {
  return ({ level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`${label} ${log.logger || ''} ${message} ${JSON.stringify(extra)}\n`)
  }
}

const kafka = new Kafka({
  clientId: 'kbroker-kafkajs',
  brokers: spec.brokers.split(','),
  logLevel: spec.debug ? logLevel.DEBUG : logLevel.WARN,
  logCreator: stderrLog,
  connectionTimeout: 3000,
  requestTimeout: 10000,
  retry: { retries: spec.retries === undefined ? 5 : spec.retries, initialRetryTime: 100 },
  // SASL/OAUTHBEARER with a token the test made (KafkaJS asks its provider at each login)
  sasl: spec.oauth_token
    ? { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: spec.oauth_token }) }
    : undefined,
})

function encodeMessage(m) {
  const out = { value: m.value === null ? null : Buffer.from(m.value) }
  if (m.key !== undefined) out.key = m.key === null ? null : Buffer.from(m.key)
  if (m.headers) out.headers = m.headers
  if (m.partition !== undefined) out.partition = m.partition
  return out
}

function decodeMessage(topic, partition, message) {
  const headers = {}
  for (const [name, value] of Object.entries(message.headers || {})) {
    headers[name] = Array.isArray(value) ? value.map(v => v.toString()) : value.toString()
  }
  return {
    event: 'record',
    topic,
    partition,
    offset: Number(message.offset),
    key: message.key === null ? null : message.key.toString(),
    value: message.value === null ? null : message.value.toString(),
    headers,
  }
}

function compression(name) {
  return { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }[name || 'none']
}

function producer(options = {}) {
  return kafka.producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: false,
    idempotent: !!spec.idempotent,
    maxInFlightRequests: spec.idempotent ? 1 : undefined,
    ...options,
  })
}

function sendSpec(messages) {
  return {
    topic: spec.topic,
    acks: spec.acks === undefined ? -1 : spec.acks,
    compression: compression(spec.compression),
    messages: messages.map(encodeMessage),
  }
}

function metadataShape(m) {
  return m.map(r => ({
    partition: r.partition,
    offset: Number(r.baseOffset),
    error: r.errorCode,
  }))
}

const ops = {
  async 'create-topic'() {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const created = await admin.createTopics({
        waitForLeaders: true,
        topics: [
          {
            topic: spec.topic,
            numPartitions: spec.partitions || 1,
            replicationFactor: spec.replication || 1,
            configEntries: Object.entries(spec.config || {}).map(([name, value]) => ({
              name,
              value: String(value),
            })),
          },
        ],
      })
      return { created }
    } finally {
      await admin.disconnect()
    }
  },

  async 'list-topics'() {
    const admin = kafka.admin()
    await admin.connect()
    try {
      return { topics: await admin.listTopics() }
    } finally {
      await admin.disconnect()
    }
  },

  async 'describe-topic'() {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const { topics } = await admin.fetchTopicMetadata({ topics: [spec.topic] })
      const configs = await admin.describeConfigs({
        includeSynonyms: false,
        resources: [{ type: 2, name: spec.topic }],
      })
      const entries = {}
      for (const e of configs.resources[0].configEntries) {
        entries[e.configName] = { value: e.configValue, default: e.isDefault }
      }
      return { topics, configs: entries }
    } finally {
      await admin.disconnect()
    }
  },

  async offsets() {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const topic = await admin.fetchTopicOffsets(spec.topic)
      const result = { topic: topic.map(p => ({ ...p, partition: p.partition })) }
      if (spec.group) {
        const [group] = await admin.fetchOffsets({ groupId: spec.group, topics: [spec.topic] })
        result.group = group.partitions.map(p => ({
          partition: p.partition,
          offset: Number(p.offset),
        }))
      }
      if (spec.timestamp !== undefined) {
        result.by_time = await admin.fetchTopicOffsetsByTimestamp(spec.topic, spec.timestamp)
      }
      return result
    } finally {
      await admin.disconnect()
    }
  },

  async 'delete-topic'() {
    const admin = kafka.admin()
    await admin.connect()
    try {
      await admin.deleteTopics({ topics: [spec.topic], timeout: 10000 })
      return {}
    } finally {
      await admin.disconnect()
    }
  },

  async produce() {
    const p = producer()
    await p.connect()
    try {
      const sent = []
      const batch = spec.batch || spec.messages.length
      for (let i = 0; i < spec.messages.length; i += batch) {
        const meta = await p.send(sendSpec(spec.messages.slice(i, i + batch)))
        sent.push(...metadataShape(meta))
      }
      return { sent }
    } finally {
      await p.disconnect()
    }
  },

  async transaction() {
    const p = producer({
      transactionalId: spec.transactional_id,
      idempotent: true,
      maxInFlightRequests: 1,
    })
    await p.connect()
    try {
      const results = []
      for (const step of spec.transactions) {
        const tx = await p.transaction()
        await tx.send(sendSpec(step.messages))
        if (step.offsets) {
          // consume-transform-produce: the group's offsets commit or abort with the records
          const partitions = Object.entries(step.offsets).map(([partition, offset]) => ({
            partition: Number(partition),
            offset: String(offset),
          }))
          await tx.sendOffsets({
            consumerGroupId: spec.group,
            topics: [{ topic: spec.topic, partitions }],
          })
        }
        if (step.commit) await tx.commit()
        else await tx.abort()
        results.push(step.commit ? 'committed' : 'aborted')
      }
      return { results }
    } finally {
      await p.disconnect()
    }
  },

  // Produces spec.batch-sized sends, each awaited, until SIGTERM; prints each acked send.
  async stream() {
    const p = producer()
    await p.connect()
    let stopping = false
    process.on('SIGTERM', () => {
      stopping = true
    })
    let next = 0
    const batch = spec.batch || 5
    let acked = 0
    while (!stopping) {
      const messages = []
      for (let i = 0; i < batch; i++, next++) {
        messages.push({ key: `key-${next}`, value: `value-${next}` })
      }
      try {
        const meta = await p.send(sendSpec(messages))
        acked += messages.length
        print({ event: 'acked', values: messages.map(m => m.value), meta: metadataShape(meta) })
      } catch (e) {
        print({ event: 'send-error', values: messages.map(m => m.value), error: String(e) })
      }
    }
    await p.disconnect()
    return { acked }
  },

  // One consumer, in a group or not, until spec.count records or SIGTERM; records and
  // group assignments are printed as they come.
  async consume() {
    const groupId = spec.group || `kbroker-kafkajs-${process.pid}-${Date.now()}`
    const consumer = kafka.consumer({
      groupId,
      readUncommitted: !!spec.read_uncommitted,
      sessionTimeout: spec.session_timeout || 10000,
      heartbeatInterval: 1000,
      rebalanceTimeout: spec.rebalance_timeout || 20000,
      maxWaitTimeInMs: 200,
      retry: { retries: spec.retries === undefined ? 5 : spec.retries, initialRetryTime: 100 },
    })
    consumer.on(consumer.events.GROUP_JOIN, e => {
      print({
        event: 'assigned',
        member: e.payload.memberId,
        leader: e.payload.isLeader,
        assignment: e.payload.memberAssignment,
      })
    })
    consumer.on(consumer.events.CRASH, e => {
      print({ event: 'crash', error: String(e.payload.error), restart: e.payload.restart })
    })
    await consumer.connect()
    await consumer.subscribe({ topics: [spec.topic], fromBeginning: spec.from_beginning !== false })
    let consumed = 0
    let finish
    const finished = new Promise(resolve => {
      finish = resolve
    })
    process.on('SIGTERM', () => finish('signal'))
    const seeks = Object.entries(spec.seek || {})
    await consumer.run({
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, heartbeat, isStale }) => {
        for (const message of batch.messages) {
          // A batch fetched before a seek took effect is stale: none of it is consumed.
          if (isStale() || (spec.count && consumed >= spec.count)) return
          consumed++
          print(decodeMessage(batch.topic, batch.partition, message))
          resolveOffset(message.offset)
          if (spec.count && consumed >= spec.count) finish('count')
        }
        await heartbeat()
      },
    })
    for (const [partition, offset] of seeks) {
      consumer.seek({ topic: spec.topic, partition: Number(partition), offset: String(offset) })
    }
    const timer = spec.idle_timeout ? setTimeout(() => finish('timeout'), spec.idle_timeout) : null
    const reason = await finished
    if (timer) clearTimeout(timer)
    await consumer.disconnect()
    return { event: 'closed', reason, consumed }
  },
}

async function main() {
  const op = ops[spec.op]
  if (!op) throw new Error(`unknown op ${spec.op}`)
  return op()
}

main().then(
  result => {
    print(result)
    process.exit(0)
  },
  e => {
    print({
      error: String(e),
      type: e.name,
      code: e.type || null,
      retriable: e.retriable,
      errors: (e.errors || []).map(inner => inner.type || String(inner)),
    })
    process.exit(1)
  },
)
