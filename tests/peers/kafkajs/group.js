// KafkaJS 2.2.4 as one consumer-group member: `node group.js '<json args>'`, the same lines
// on stdout as tests/peers/group_member.py prints (see its docstring): started, assigned,
// processed, committed / commit_failed, closed. The consumer subscribes (KafkaJS's own
// JoinGroup, SyncGroup, Heartbeat and its RoundRobin assigner), processes each batch
// (processMs of sleep a record), then commits what it processed (autoCommit off). It
// leaves the group and exits when stdin says "stop" or ends, or after timeoutS.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const a = Object.assign({
  sessionMs: 6000, heartbeatMs: 500, rebalanceMs: 20000, processMs: 0, fetchBytes: 512,
  timeoutS: 120,
}, JSON.parse(process.argv[2]))

const say = (e, fields) => process.stdout.write(JSON.stringify(Object.assign({ e }, fields)) + '\n')
const sleep = ms => new Promise(r => setTimeout(r, ms))

const logCreator = () => ({ namespace, log }) => {
  process.stderr.write(`[kafkajs ${namespace}] ${log.message} ${log.error || ''}\n`)
}

const kafka = new Kafka({
  clientId: 'kraftcore-member-kafkajs',
  brokers: a.bootstrap.split(','),
  logLevel: logLevel.WARN,
  logCreator,
  connectionTimeout: 3000,
  requestTimeout: 30000,
  retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
})

const consumer = kafka.consumer({
  groupId: a.group,
  sessionTimeout: a.sessionMs,
  heartbeatInterval: a.heartbeatMs,
  rebalanceTimeout: a.rebalanceMs,
  maxBytesPerPartition: a.fetchBytes,
  maxWaitTimeInMs: 100,
  allowAutoTopicCreation: false,
  retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
})

let closing = null
async function close(code) {
  if (closing === null) {
    closing = (async () => {
      try {
        await consumer.disconnect()
        say('closed', {})
      } catch (e) {
        process.stderr.write(`disconnect: ${e.message}\n`)
      }
      process.exit(code)
    })()
  }
  return closing
}

async function main() {
  consumer.on(consumer.events.GROUP_JOIN, e => {
    const mine = (e.payload.memberAssignment || {})[a.topic] || []
    say('assigned', { partitions: mine.slice().sort((x, y) => x - y) })
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [a.topic], fromBeginning: true })
  say('started', { pid: process.pid })
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset }) => {
      if (closing !== null || batch.messages.length === 0) return
      const records = batch.messages.map(m => [batch.partition, Number(m.offset)])
      if (a.processMs) await sleep(a.processMs * records.length)
      say('processed', { records })
      const next = Number(batch.messages[batch.messages.length - 1].offset) + 1
      try {
        await consumer.commitOffsets([{ topic: a.topic, partition: batch.partition, offset: String(next) }])
        say('committed', { offsets: { [batch.partition]: next } })
      } catch (e) {
        say('commit_failed', { error: `${e.name}: ${e.message}` })
      }
      resolveOffset(batch.messages[batch.messages.length - 1].offset)
    },
  })
}

process.stdin.setEncoding('utf8')
let input = ''
process.stdin.on('data', chunk => {
  input += chunk
  if (input.split('\n').some(line => line.trim() === 'stop')) close(0)
})
process.stdin.on('end', () => close(0))
setTimeout(() => close(0), a.timeoutS * 1000)

main().catch(e => {
  process.stderr.write(`fatal: ${e.name}: ${e.message}\n`)
  say('fatal', { error: `${e.name}: ${e.message}` })
  close(1)
})
