// KafkaJS 2.2.4 as a test peer: create a topic, produce, list offsets, read everything back.
// Called by tests/peers/clients.py as `node run.js '<json args>'`; prints ONE JSON line on
// stdout (logs go to stderr). KafkaJS's consumer always joins a group and has no assign(),
// so the read-back uses KafkaJS's own Cluster and Broker.fetch (the Fetch request its
// consumer sends, v11 at most), partition by partition, from offset 0: no group.
'use strict'

const crypto = require('crypto')
const { Kafka, logLevel } = require('kafkajs')

const args = JSON.parse(process.argv[2])
const { bootstrap, topic, records, partitions, replicationFactor, valueBytes, timeoutMs } = args
const acks = args.acks === 'all' ? -1 : Number(args.acks)
const deadline = Date.now() + timeoutMs
const started = Date.now()

const result = {
  client: 'kafkajs',
  client_version: require('kafkajs/package.json').version,
  bootstrap,
  topic,
  produced: 0,
  consumed: 0,
  earliest: {},
  latest: {},
  per_partition: {},
  errors: [],
  timings_s: {},
}
let phase = 'start'
let phaseStart = Date.now()
const enter = next => {
  const now = Date.now()
  if (phase !== 'start') result.timings_s[phase] = (now - phaseStart) / 1000
  phase = next
  phaseStart = now
  if (now > deadline) throw new TimeoutErr()
}
class TimeoutErr extends Error {}
const error = msg => {
  if (result.errors.length < 20) result.errors.push(`${phase}: ${msg}`)
}
const remaining = () => Math.max(1, deadline - Date.now())

const keyOf = i => `key-${i}`
const valueOf = i => `value-${String(i).padStart(8, '0')}`.padEnd(valueBytes, '.')

const logCreator = () => ({ namespace, level, log }) => {
  process.stderr.write(`[kafkajs ${namespace}] ${log.message} ${log.error || ''}\n`)
}

const kafka = new Kafka({
  clientId: 'kraftcore-peer-kafkajs',
  brokers: bootstrap.split(","),
  logLevel: logLevel.WARN,
  logCreator,
  connectionTimeout: 3000,
  requestTimeout: 30000,
  retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
})

const privateSymbol = (obj, description) =>
  Object.getOwnPropertySymbols(obj).find(s => s.description === description)

async function main() {
  enter('create_topic')
  const admin = kafka.admin()
  await admin.connect()
  try {
    await admin.createTopics({
      topics: [{ topic, numPartitions: partitions, replicationFactor }],
      waitForLeaders: true,
      timeout: Math.min(30000, remaining()),
    }) // false (not an error) when the topic already exists
  } catch (e) {
    error(`createTopics: ${e.message}`)
  }

  enter('produce')
  const producer = kafka.producer({ idempotent: false, allowAutoTopicCreation: false })
  await producer.connect()
  const BATCH = 1000
  const sends = []
  for (let start = 0; start < records; start += BATCH) {
    const messages = []
    for (let i = start; i < Math.min(records, start + BATCH); i++) {
      messages.push({ key: keyOf(i), value: valueOf(i) })
    }
    sends.push(
      producer
        .send({ topic, acks, messages, timeout: 30000 })
        .then(() => messages.length)
        .catch(e => {
          error(`send: ${e.message}`)
          return 0
        })
    )
    if (sends.length % 4 === 0) await Promise.all(sends.slice(-4)) // at most 4 sends in flight
  }
  result.produced = (await Promise.all(sends)).reduce((a, b) => a + b, 0)
  await producer.disconnect()

  enter('list_offsets')
  let latest = null
  try {
    const offsets = await admin.fetchTopicOffsets(topic)
    latest = {}
    for (const { partition, low, high } of offsets) {
      result.earliest[partition] = Number(low)
      result.latest[partition] = Number(high)
      latest[partition] = Number(high)
    }
  } catch (e) {
    error(`fetchTopicOffsets: ${e.message}`)
  }
  await admin.disconnect()

  enter('consume')
  const cluster = kafka[privateSymbol(kafka, 'private:Kafka:createCluster')]({
    allowAutoTopicCreation: false,
  })
  await cluster.connect()
  const values = []
  try {
    await cluster.addTargetTopic(topic)
    await cluster.refreshMetadata()
    let meta = cluster.findTopicPartitionMetadata(topic)
    while (meta.length < partitions || meta.some(p => p.leader < 0)) {
      if (Date.now() > deadline) throw new TimeoutErr()
      await new Promise(r => setTimeout(r, 200))
      await cluster.refreshMetadata()
      meta = cluster.findTopicPartitionMetadata(topic)
    }
    const pos = {}
    for (const p of meta) {
      pos[p.partitionId] = 0
      result.per_partition[p.partitionId] = 0
    }
    const done = () =>
      latest !== null
        ? meta.every(p => pos[p.partitionId] >= (latest[p.partitionId] || 0))
        : values.length >= result.produced
    while (!done()) {
      if (Date.now() > deadline) throw new TimeoutErr()
      const byLeader = {}
      for (const p of meta) {
        if (latest !== null && pos[p.partitionId] >= latest[p.partitionId]) continue
        ;(byLeader[p.leader] = byLeader[p.leader] || []).push(p.partitionId)
      }
      for (const [leader, parts] of Object.entries(byLeader)) {
        const broker = await cluster.findBroker({ nodeId: leader })
        let resp
        try {
          resp = await broker.fetch({
            replicaId: -1,
            isolationLevel: 0, // READ_UNCOMMITTED, like the Python clients' default
            maxWaitTime: 200,
            minBytes: 1,
            maxBytes: 10485760,
            topics: [
              {
                topic,
                partitions: parts.map(partition => ({
                  partition,
                  fetchOffset: String(pos[partition]),
                  maxBytes: 1048576,
                })),
              },
            ],
          })
        } catch (e) {
          error(`fetch: ${e.message}`)
          await new Promise(r => setTimeout(r, 200))
          await cluster.refreshMetadata()
          continue
        }
        for (const { partitions: ps } of resp.responses) {
          for (const pd of ps) {
            for (const m of pd.messages) {
              const off = Number(m.offset)
              if (off < pos[pd.partition]) continue // a batch may start before the fetch offset
              values.push(m.value.toString())
              result.per_partition[pd.partition]++
              pos[pd.partition] = off + 1
            }
          }
        }
      }
    }
  } finally {
    await cluster.disconnect()
  }
  return values
}

function summarize(values) {
  const seen = new Uint8Array(records)
  let duplicates = 0
  let foreign = 0
  for (const v of values) {
    const i = v.startsWith('value-') ? Number(v.slice(6, 14)) : -1
    if (!(i >= 0 && i < records) || v !== valueOf(i)) foreign++
    else if (seen[i]) duplicates++
    else seen[i] = 1
  }
  const sorted = values.slice().sort()
  result.consumed = values.length
  result.checksum = crypto.createHash('sha256').update(sorted.join('\n')).digest('hex')
  result.missing = records - seen.reduce((a, b) => a + b, 0)
  result.duplicates = duplicates
  result.foreign = foreign
}

const timer = setTimeout(() => {
  result.timeout = true
  result.phase = phase
  process.stdout.write(JSON.stringify(result) + '\n')
  process.exit(3)
}, timeoutMs)

main()
  .then(values => {
    enter('done')
    summarize(values)
    result.timings_s.total = (Date.now() - started) / 1000
    clearTimeout(timer)
    process.stdout.write(JSON.stringify(result) + '\n')
    process.exit(0)
  })
  .catch(e => {
    clearTimeout(timer)
    if (e instanceof TimeoutErr) result.timeout = true
    else result.fatal = `${e.name}: ${e.message}`
    result.phase = phase
    process.stdout.write(JSON.stringify(result) + '\n')
    process.exit(e instanceof TimeoutErr ? 3 : 1)
  })
