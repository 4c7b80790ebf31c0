// kafkajs against a broker: produce, consume with a consumer group (two members, then one
// leaves, then a new member resumes from the committed offsets), commit, and print a JSON
// summary on stdout for tests/integration/test_kafkajs.py to check.
//
//   node group_roundtrip.js HOST:PORT
//
// Exit status 0 when the script ran to the end (the summary says what happened), 2 when a
// deadline passed or a call failed (the summary then carries "error").
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const bootstrap = process.argv[2];
if (!bootstrap) {
  console.error('usage: node group_roundtrip.js HOST:PORT');
  process.exit(1);
}
const suffix = `${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
const topic = `kafkajs-${suffix}`;
const groupId = `kafkajs-group-${suffix}`;
const PARTITIONS = 3;
const summary = { topic, groupId, phases: {}, joins: [], errors: [] };

const kafka = new Kafka({
  clientId: 'eddy-kafkajs-check',
  brokers: [bootstrap],
  logLevel: logLevel.ERROR,
  retry: { retries: 8, initialRetryTime: 100 },
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, cond, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

// one group member; records what it consumes and its assignments
function member(name) {
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 300,
    maxWaitTimeInMs: 100,
    retry: { retries: 8, initialRetryTime: 100 },
  });
  const m = { name, consumer, records: [], assignment: null, commitErrors: [] };
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const parts = (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b);
    m.assignment = parts;
    summary.joins.push({ member: name, isLeader: payload.isLeader, assignment: parts,
                         protocol: payload.groupProtocol });
  });
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    summary.errors.push({ member: name, crash: String(payload.error) });
  });
  m.start = async () => {
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        // commit the record before reporting it: a reported record is a committed one
        try {
          await consumer.commitOffsets([
            { topic, partition, offset: (BigInt(message.offset) + 1n).toString() },
          ]);
        } catch (e) {
          m.commitErrors.push(String(e));
          throw e; // kafkajs re-delivers from the last committed offset
        }
        m.records.push({ partition, offset: Number(message.offset),
                         value: message.value.toString() });
      },
    });
  };
  return m;
}

async function produce(producer, tag, perPartition) {
  const messages = [];
  for (let i = 0; i < perPartition; i++) {
    for (let p = 0; p < PARTITIONS; p++) messages.push({ partition: p, value: `${tag}-${p}-${i}` });
  }
  await producer.send({ topic, acks: -1, messages });
  return messages.map((m) => `${m.partition}:${m.value}`);
}

const values = (ms) => ms.flatMap((m) => m.records.map((r) => `${r.partition}:${r.value}`));
const covers = (ms) => {
  const all = ms.flatMap((m) => m.assignment || []);
  return ms.every((m) => m.assignment && m.assignment.length > 0) &&
    all.length === PARTITIONS && new Set(all).size === PARTITIONS;
};

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
    waitForLeaders: true,
  });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();

  // phase 1: two members split the partitions and read every record once
  const a = member('a');
  const b = member('b');
  await a.start();
  await b.start();
  await waitFor('two members to split the partitions', () => covers([a, b]));
  const split = { a: a.assignment, b: b.assignment };
  const sent1 = await produce(producer, 'one', 10);
  await waitFor('phase 1 records', () => sent1.every((v) => values([a, b]).includes(v)));
  summary.phases.split = { assignment: split, sent: sent1, consumed: values([a, b]),
                           a: values([a]), b: values([b]) };

  // phase 2: b leaves (LeaveGroup); a takes over every partition
  const marks = a.records.length;
  await b.consumer.disconnect();
  await waitFor('a to own every partition', () => covers([a]));
  const sent2 = await produce(producer, 'two', 5);
  const after = () => a.records.slice(marks).map((r) => `${r.partition}:${r.value}`);
  await waitFor('phase 2 records', () => sent2.every((v) => after().includes(v)));
  summary.phases.leave = { assignment: a.assignment, sent: sent2, consumed: after() };
  await a.consumer.disconnect();

  // the committed offsets, and the group as the admin API sees it (Empty, no members)
  const fetched = await admin.fetchOffsets({ groupId, topics: [topic] });
  summary.committed = Object.fromEntries(
    fetched[0].partitions.map((p) => [p.partition, Number(p.offset)]));
  const ends = await admin.fetchTopicOffsets(topic);
  summary.highWatermarks = Object.fromEntries(ends.map((p) => [p.partition, Number(p.high)]));
  const described = await admin.describeGroups([groupId]);
  const g = described.groups[0];
  summary.describe = { state: g.state, protocolType: g.protocolType, members: g.members.length,
                       errorCode: g.errorCode };
  const listed = await admin.listGroups();
  summary.listed = listed.groups.some((x) => x.groupId === groupId);

  // phase 3: more records; a new member resumes exactly at the committed offsets
  const sent3 = await produce(producer, 'three', 4);
  const c = member('c');
  await c.start();
  await waitFor('phase 3 records', () => sent3.every((v) => values([c]).includes(v)));
  await sleep(500); // anything re-delivered would arrive now
  summary.phases.resume = { sent: sent3, consumed: values([c]),
                            offsets: c.records.map((r) => [r.partition, r.offset]) };
  await c.consumer.disconnect();

  const deleted = await admin.deleteGroups([groupId]);
  summary.deleteGroups = deleted.map((d) => ({ groupId: d.groupId, errorCode: d.errorCode }));
  summary.commitErrors = [...a.commitErrors, ...b.commitErrors, ...c.commitErrors];
  await producer.disconnect();
  await admin.disconnect();
}

const timer = setTimeout(() => {
  summary.error = 'deadline (90 s) passed';
  console.log(JSON.stringify(summary));
  process.exit(2);
}, 90000);

main().then(
  () => {
    clearTimeout(timer);
    console.log(JSON.stringify(summary));
    process.exit(0);
  },
  (e) => {
    clearTimeout(timer);
    summary.error = String(e && e.stack ? e.stack : e);
    console.log(JSON.stringify(summary));
    process.exit(2);
  },
);
